package ringd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, q := range []request{
		{op: opHello},
		{op: opMap, bytes: 1 << 33},
		{op: opForm, version: -3, rank: 2, timeout: 1500 * time.Millisecond, peers: []string{"a:1", "", "127.0.0.1:70"}},
		{op: opForm, version: 1 << 40, rank: 0, timeout: time.Millisecond, peers: []string{"x:9"}},
		{op: opForm, version: 2, rank: 1, timeout: time.Second, peers: []string{"a:1", "b:2"}, ids: []int{7, 1 << 31}},
		{op: opAllReduce, version: 7, offset: 3, count: 1 << 40},
		{op: opBroadcast, version: 8, root: 4, offset: 5, count: 6},
		{op: opLeave},
		{op: opStats},
		{op: opSupersede, version: 9, closeLive: true},
		{op: opSupersede, version: 10},
	} {
		got, err := parseRequest(q.marshal())
		if err != nil {
			t.Errorf("%v: %v", q.op, err)
			continue
		}
		if !reflect.DeepEqual(got, q) {
			t.Errorf("%v: decoded %+v, want %+v", q.op, got, q)
		}
	}
}

// TestRequestLayout pins the wire layout the Python client writes.
func TestRequestLayout(t *testing.T) {
	le := binary.LittleEndian
	form := []byte{3}
	form = le.AppendUint64(form, 5)
	form = le.AppendUint32(form, 1)
	form = le.AppendUint32(form, 2500)
	form = le.AppendUint32(form, 2)
	form = append(le.AppendUint16(form, 3), "a:1"...)
	form = append(le.AppendUint16(form, 4), "bb:2"...)
	bcast := []byte{5}
	bcast = le.AppendUint64(bcast, 6)
	bcast = le.AppendUint32(bcast, 1)
	bcast = le.AppendUint64(bcast, 16)
	bcast = le.AppendUint64(bcast, 32)
	for _, c := range []struct {
		q    request
		want []byte
	}{
		{request{op: opForm, version: 5, rank: 1, timeout: 2500 * time.Millisecond, peers: []string{"a:1", "bb:2"}}, form},
		{request{op: opForm, version: 5, rank: 1, timeout: 2500 * time.Millisecond, peers: []string{"a:1", "bb:2"}, ids: []int{4, 9}},
			le.AppendUint32(le.AppendUint32(bytes.Clone(form), 4), 9)},
		{request{op: opBroadcast, version: 6, root: 1, offset: 16, count: 32}, bcast},
		{request{op: opSupersede, version: 2, closeLive: true}, []byte{8, 2, 0, 0, 0, 0, 0, 0, 0, 1}},
		{request{op: opStats}, []byte{7}},
	} {
		if got := c.q.marshal(); !bytes.Equal(got, c.want) {
			t.Errorf("%v: % x, want % x", c.q.op, got, c.want)
		}
	}
}

func TestParseRequestErrors(t *testing.T) {
	ar := request{op: opAllReduce, version: 1, offset: 2, count: 3}.marshal()
	form := request{op: opForm, version: 1, timeout: time.Second, peers: []string{"a:1", "b:2"}}.marshal()
	wildPeers := request{op: opForm, version: 1, timeout: time.Second}.marshal()
	binary.LittleEndian.PutUint32(wildPeers[17:], 1<<31) // npeers
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"empty", nil, "empty request"},
		{"unknown op", []byte{99}, "unknown operation 99"},
		{"op zero", []byte{0}, "unknown operation 0"},
		{"truncated", ar[:len(ar)-1], "ALLREDUCE request of 24 bytes is truncated"},
		{"stray bytes", append(append([]byte{}, ar...), 0), "ALLREDUCE request has 1 stray bytes"},
		{"stray after stats", []byte{7, 1}, "STATS request has 1 stray bytes"},
		{"truncated peer", form[:len(form)-1], "FORM request"},
		{"wild peer count", wildPeers, "truncated"},
	} {
		_, err := parseRequest(c.body)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	if err := writeFrame(&b, response(statusBroken, []byte("gone"))); err != nil {
		t.Fatal(err)
	}
	if want := []byte{5, 0, 0, 0, 2, 'g', 'o', 'n', 'e'}; !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("frame % x, want % x", b.Bytes(), want)
	}
	body, err := readFrame(&b)
	if err != nil {
		t.Fatal(err)
	}
	st, payload, err := parseResponse(body)
	if err != nil || st != statusBroken || string(payload) != "gone" {
		t.Fatalf("parsed %v %q %v, want BROKEN \"gone\"", st, payload, err)
	}
	for _, c := range []struct {
		name string
		in   []byte
		want error
		msg  string
	}{
		{"clean end", nil, io.EOF, ""},
		{"end in the length", []byte{1, 0}, io.ErrUnexpectedEOF, ""},
		{"end in the body", []byte{3, 0, 0, 0, 1}, io.ErrUnexpectedEOF, ""},
		{"zero length", []byte{0, 0, 0, 0}, nil, "frame of 0 bytes"},
		{"too long", []byte{0, 0, 0, 1}, nil, "stream out of step"},
	} {
		_, err := readFrame(bytes.NewReader(c.in))
		switch {
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		case c.want == nil && (err == nil || !strings.Contains(err.Error(), c.msg)):
			t.Errorf("%s: error %v, want it to mention %q", c.name, err, c.msg)
		}
	}
	if _, _, err := parseResponse([]byte{3}); err == nil {
		t.Error("status 3 parsed")
	}
}
