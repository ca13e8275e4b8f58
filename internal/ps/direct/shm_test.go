package direct

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"elasticdl/proto/pserverpb"
)

// inRegion reports whether b lies in the shared region mem.
func inRegion(b, mem []byte) bool {
	if len(b) == 0 || len(mem) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= start && p+uintptr(len(b)) <= start+uintptr(len(mem))
}

// On the local socket a connection lends the server a shared region; a
// request and its answer travel in it, and the region grows to fit them.
func TestSharedMemory(t *testing.T) {
	for _, layout := range []string{"", "reversed", "own"} {
		t.Run("layout="+layout, func(t *testing.T) {
			e := &echoPS{layout: layout}
			addr, mux, _ := serveBoth(t, e)
			if err := mux.ServeLocal(fmt.Sprintf("elasticdl-direct-shm-%d-%d", os.Getpid(), time.Now().UnixNano())); err != nil {
				t.Fatal(err)
			}
			c := newClient(t, addr)
			ctx := ctxT(t, 10*time.Second)
			if _, release, err := c.Pull(ctx, &pserverpb.PullDenseParametersRequest{Version: 1}); err != nil {
				t.Fatal(err) // over TCP, learning the local socket
			} else {
				release()
			}
			// The first local connection's region is made for its request
			// (400 KiB): the doubled answer comes on the socket, and the
			// connection makes way for one whose region fits both. Larger
			// requests grow it again. Answers laid out of order in the region
			// come on the socket too.
			steps := []struct {
				size   int
				shared bool
			}{{300 << 10, false}, {300 << 10, true}, {300 << 10, true}, {1 << 20, false}, {1 << 20, true}, {10, true}}
			for i, step := range steps {
				a := bytes.Repeat([]byte{byte(i)}, step.size)
				b := bytes.Repeat([]byte{byte(i + 1)}, step.size/3)
				resp, release, err := c.Push(ctx, &pserverpb.PushGradientsRequest{ReturnParameters: true, Gradients: []*pserverpb.Tensor{
					{Name: "a", Content: a}, {Name: "none"}, {Name: "b", Content: b}}})
				if err != nil {
					t.Fatal(err)
				}
				got := resp.GetDenseParameters()
				if len(got) != 3 || !bytes.Equal(got[0].Content, append(a, a...)) || len(got[1].Content) != 0 || !bytes.Equal(got[2].Content, append(b, b...)) {
					t.Fatalf("push %d of %d bytes: answer differs", i, step.size)
				}
				release()
				c.mu.Lock()
				shared := len(c.idle) == 1 && c.idle[0].local && inRegion(got[0].Content, c.idle[0].f.shared) && inRegion(got[2].Content, c.idle[0].f.shared)
				idle := len(c.idle)
				c.mu.Unlock()
				wantShared := step.shared && layout != "reversed"
				if shared != wantShared || idle != map[bool]int{true: 1, false: 0}[step.shared] {
					t.Errorf("push %d of %d bytes: answer in the shared region %v, %d idle connections; want %v", i, step.size, shared, idle, wantShared)
				}
			}
			if !c.SharesMemory() {
				t.Error("the client gave shared memory up")
			}
		})
	}
}

// A server maps only a region that is sealed against shrinking, holds what
// is announced and comes alone; any other offer is refused, and the
// connection goes on without one.
func TestRegionOffers(t *testing.T) {
	sealed := func(size int) int {
		mem, fd, err := createRegion(size)
		if err != nil {
			t.Fatal(err)
		}
		unmapRegion(mem)
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	unsealed := func(size int) int {
		fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	cases := []struct {
		name   string
		size   uint64
		fds    []int
		mapped bool
	}{
		{"none", 0, nil, false},
		{"sealed", 1 << 16, []int{sealed(1 << 16)}, true},
		{"smaller than announced", 1 << 20, []int{sealed(1 << 16)}, false},
		{"not sealed", 1 << 16, []int{unsealed(1 << 16)}, false},
		{"too large", maxRegion + 1, []int{sealed(1 << 16)}, false},
		{"no fd", 1 << 16, nil, false},
		{"two fds", 1 << 16, []int{sealed(1 << 16), sealed(1 << 16)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, server := unixPair(t)
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], tc.size)
			var oob []byte
			if len(tc.fds) > 0 {
				oob = unix.UnixRights(tc.fds...)
			}
			if _, _, err := client.WriteMsgUnix(b[:], oob, nil); err != nil {
				t.Fatal(err)
			}
			mem, refused, err := acceptRegion(server)
			if err != nil {
				t.Fatal(err)
			}
			defer unmapRegion(mem)
			var ack [1]byte
			if _, err := io.ReadFull(client, ack[:]); err != nil {
				t.Fatal(err)
			}
			if (mem != nil) != tc.mapped || (ack[0] == 1) != tc.mapped || (refused != nil) == (tc.mapped || tc.size == 0) {
				t.Errorf("mapped %d bytes, ack %d, refused %v; want mapped %v", len(mem), ack[0], refused, tc.mapped)
			}
		})
	}
}

// A client whose region the server refuses goes on without shared memory.
func TestClientGivesSharedMemoryUp(t *testing.T) {
	client, server := unixPair(t)
	go func() {
		var b [8]byte
		oob := make([]byte, 64)
		server.ReadMsgUnix(b[:], oob)
		server.Write([]byte{0})
	}()
	c := NewClient("127.0.0.1:1")
	mem, err := c.lendRegion(ctxT(t, 5*time.Second), client, 1<<16)
	if err != nil || mem != nil || c.SharesMemory() {
		t.Fatalf("lendRegion: %d bytes, %v, still sharing %v: want none, and shared memory given up", len(mem), err, c.SharesMemory())
	}
}

func unixPair(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// When a connection's region is kept, and when it makes way for a larger
// one; and the size a new region gets.
func TestRegionSizing(t *testing.T) {
	fits := []struct {
		local, noShared bool
		size, want      int
		keep            bool
	}{
		{false, false, 0, 1 << 20, true},              // TCP: no region
		{true, true, 0, 1 << 20, true},                // shared memory given up
		{true, false, 1 << 20, 1 << 20, true},         // fits exactly
		{true, false, 1 << 19, 1 << 20, false},        // outgrown
		{true, false, 0, 0, true},                     // nothing seen yet
		{true, false, maxRegion, 2 * maxRegion, true}, // as large as it gets
	}
	for _, c := range fits {
		if got := regionFits(c.local, c.noShared, c.size, c.want); got != c.keep {
			t.Errorf("regionFits(local %v, noShared %v, %d, want %d) = %v, want %v", c.local, c.noShared, c.size, c.want, got, c.keep)
		}
	}
	sizes := map[int]int{0: 0, -1: 0, 1: regionGranule, 400 << 10: 512 << 10, 800 << 10: 1 << 20, 2 * maxRegion: maxRegion}
	for want, size := range sizes {
		if got := regionSize(want); got != size {
			t.Errorf("regionSize(%d) = %d, want %d", want, got, size)
		}
	}
}
