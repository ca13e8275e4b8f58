package direct

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"elasticdl/proto/pserverpb"
)

// A peer that breaks the framing loses its connection, not the server.
func TestBadFramesCloseTheConnection(t *testing.T) {
	addr, _, _ := serveBoth(t, &echoPS{})
	frame := func(k kind, hdrLen, n uint32, lens ...uint64) []byte {
		b := make([]byte, fixedLen)
		b[0] = byte(k)
		binary.LittleEndian.PutUint32(b[4:], hdrLen)
		binary.LittleEndian.PutUint32(b[8:], n)
		for _, l := range lens {
			b = binary.LittleEndian.AppendUint64(b, l)
		}
		return b
	}
	cases := map[string][]byte{
		"header too long":      frame(kindPush, 1<<30, 0),
		"too many contents":    frame(kindPush, 0, maxContents+1),
		"contents too long":    frame(kindPush, 0, 2, 1<<27, 1<<27+1),
		"reserved bytes set":   append([]byte{1, 0, 1}, make([]byte, fixedLen-3)...),
		"unknown flag":         append([]byte{1, 2}, make([]byte, fixedLen-2)...),
		"shared but no region": func() []byte { b := frame(kindPush, 0, 1, 4); b[1] = flagShared; return b }(),
		"contents for no one":  append(frame(kindPull, 0, 1, 2), 9, 9),
		"not protobuf":         append(frame(kindPush, 2, 0), 0xff, 0xff),
		"content given inline": append(frame(kindPush, 6, 1, 0), 0x1a, 0x04, 0x1a, 0x02, 'x', 'y'),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			hello := make([]byte, len(Preface)+1)
			if _, err := io.WriteString(conn, Preface); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(conn, hello); err != nil || string(hello) != Preface+"\x00" {
				t.Fatalf("hello: %q, %v", hello, err)
			}
			if _, err := conn.Write(b); err != nil {
				t.Fatal(err)
			}
			if n, err := conn.Read(make([]byte, 64)); !errors.Is(err, io.EOF) {
				t.Errorf("read %d bytes, %v: want the connection closed", n, err)
			}
		})
	}
	// An unknown kind is answered Unimplemented.
	c := newClient(t, addr)
	cc, err := c.get(ctxT(t, 5*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cc.f.write(kind(9), &pserverpb.PullDenseParametersRequest{}, nil); err != nil {
		t.Fatal(err)
	}
	if k, _, _, err := cc.f.read(); err != nil || k != kindError {
		t.Errorf("unknown kind answered %d, %v", k, err)
	}
	cc.conn.Close()
	// The server still serves.
	if _, release, err := c.Pull(ctxT(t, 5*time.Second), &pserverpb.PullDenseParametersRequest{Version: 3}); err != nil {
		t.Fatal(err)
	} else {
		release()
	}
}

// placement tells contents laid out in a region in order (nothing to copy)
// from contents elsewhere (copied in) and from contents in the region out
// of order (which a copy could overwrite).
func TestPlacement(t *testing.T) {
	region := make([]byte, 100)
	other := make([]byte, 100)
	cases := []struct {
		name     string
		contents [][]byte
		want     where
	}{
		{"none", nil, outside},
		{"empty ones", [][]byte{nil, {}}, outside},
		{"elsewhere", [][]byte{other[:10], other[50:60]}, outside},
		{"in order", [][]byte{region[:10], nil, region[10:30]}, inPlace},
		{"in order, not from the start", [][]byte{region[5:10]}, misplaced},
		{"a gap", [][]byte{region[:10], region[11:20]}, misplaced},
		{"reversed", [][]byte{region[10:20], region[:10]}, misplaced},
		{"one in, one elsewhere", [][]byte{region[:10], other[10:20]}, misplaced},
		{"one elsewhere, one in", [][]byte{other[:10], region[10:20]}, misplaced},
		{"overlapping the end", [][]byte{region[90:], other[:5]}, misplaced},
	}
	for _, c := range cases {
		if got := placement(c.contents, region); got != c.want {
			t.Errorf("%s: placement %d, want %d", c.name, got, c.want)
		}
	}
	if got := placement([][]byte{other[:10]}, nil); got != outside {
		t.Errorf("no region: placement %d, want outside", got)
	}
}
