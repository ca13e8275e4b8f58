package direct

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/proto/pserverpb"
)

// Close lets a request being answered finish, then closes its connection;
// idle and silent connections close at once.
func TestCloseFinishesTheRequestInFlight(t *testing.T) {
	e := &echoPS{block: make(chan struct{})}
	addr, mux, _ := serveBoth(t, e)
	idle := newClient(t, addr)
	if _, release, err := idle.Pull(ctxT(t, 5*time.Second), &pserverpb.PullDenseParametersRequest{}); err != nil {
		t.Fatal(err)
	} else {
		release()
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	c := newClient(t, addr)
	got := make(chan error, 1)
	go func() {
		_, release, err := c.Push(ctxT(t, 10*time.Second), &pserverpb.PushGradientsRequest{})
		if release != nil {
			release()
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	mux.Close()
	silent.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("a silent connection after Close: %v, want EOF", err)
	}
	if _, _, err := idle.Pull(ctxT(t, 5*time.Second), &pserverpb.PullDenseParametersRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("an idle connection after Close: %v, want Unavailable", err)
	}
	close(e.block)
	if err := <-got; err != nil {
		t.Errorf("the request in flight at Close: %v", err)
	}
	stopped := make(chan struct{})
	go func() { mux.Stop(time.Minute); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop still waits with nothing in flight")
	}
}

// A client of another protocol version is handed to gRPC, whose answer
// (an HTTP/2 SETTINGS frame) makes such a client fall back to gRPC.
func TestOtherVersionGoesToGRPC(t *testing.T) {
	addr, _, _ := serveBoth(t, &echoPS{})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "EDLDIR1\n"); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 9) // an HTTP/2 frame header
	if _, err := io.ReadFull(conn, b); err != nil {
		t.Fatal(err)
	}
	if bytes.HasPrefix(b, []byte("EDLDIR")) || b[3] != 0x4 {
		t.Errorf("answer to version 1: %q, want gRPC's SETTINGS frame", b)
	}
}
