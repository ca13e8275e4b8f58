package direct

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"elasticdl/proto/pserverpb"
)

// Pushes and pulls travel whole, contents of any size (none included),
// and a gRPC client is served on the same port.
func TestPushPullAndGRPCOnOnePort(t *testing.T) {
	e := &echoPS{}
	addr, _, _ := serveBoth(t, e)
	c := newClient(t, addr)
	ctx := ctxT(t, 10*time.Second)
	big := make([]byte, 3<<20+5)
	for i := range big {
		big[i] = byte(i * 7)
	}
	req := &pserverpb.PushGradientsRequest{WorkerId: 2, Version: 41, ReturnParameters: true, Gradients: []*pserverpb.Tensor{
		{Name: "a", Dims: []int64{3}, Content: []byte{1, 2, 3}}, {Name: "none"}, {Name: "big", Content: big}}}
	resp, release, err := c.Push(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAccepted() || resp.GetVersion() != 42 || len(resp.GetDenseParameters()) != 3 {
		t.Fatalf("answer %v", resp)
	}
	for i, p := range resp.GetDenseParameters() {
		g := req.Gradients[i]
		if want := append(append([]byte{}, g.Content...), g.Content...); p.GetName() != g.GetName() || !bytes.Equal(p.GetContent(), want) {
			t.Errorf("parameter %d: %q of %d bytes, want %q of %d", i, p.GetName(), len(p.GetContent()), g.GetName(), len(want))
		}
	}
	// The request is left as it was.
	if !bytes.Equal(req.Gradients[0].Content, []byte{1, 2, 3}) || len(req.Gradients[2].Content) != len(big) {
		t.Errorf("the request's contents changed: %v", req.Gradients[0].Content)
	}
	release()
	release() // twice is harmless
	for _, v := range []int64{5, 0, 70000} {
		resp, release, err := c.Pull(ctx, &pserverpb.PullDenseParametersRequest{Version: v})
		if err != nil {
			t.Fatal(err)
		}
		if ps := resp.GetDenseParameters(); resp.GetVersion() != v || len(ps) != 2 || len(ps[0].Content) != int(v) || len(ps[1].Content) != 0 ||
			v > 0 && ps[0].Content[v-1] != byte(v) {
			t.Errorf("pull of %d: %v", v, resp)
		}
		release()
	}
	// gRPC on the same port.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gresp, err := pserverpb.NewPserverClient(conn).PushGradients(ctx, &pserverpb.PushGradientsRequest{Version: 7})
	if err != nil || gresp.GetVersion() != 8 {
		t.Fatalf("gRPC on the direct port: %v, %v", gresp, err)
	}
	if got := e.lent.Load(); got != 4 {
		t.Errorf("%d answers built in the lent buffer, want 4 (the direct ones)", got)
	}
}

// A handler's error reaches the caller as the same status, and the
// connection stays usable.
func TestErrorsAreStatuses(t *testing.T) {
	addr, _, _ := serveBoth(t, &echoPS{})
	c := newClient(t, addr)
	ctx := ctxT(t, 10*time.Second)
	_, release, err := c.Push(ctx, &pserverpb.PushGradientsRequest{WorkerId: 13})
	if status.Code(err) != codes.FailedPrecondition || release != nil || !bytes.Contains([]byte(err.Error()), []byte("not initialized")) {
		t.Fatalf("error %v (release %v), want FailedPrecondition", err, release != nil)
	}
	if _, release, err := c.Push(ctx, &pserverpb.PushGradientsRequest{}); err != nil {
		t.Fatalf("after an error answer: %v", err)
	} else {
		release()
	}
	if n := len(c.idle); n != 1 {
		t.Errorf("%d idle connections, want the one, reused", n)
	}
}

// Calls in parallel each get their own connection and their own answer.
func TestParallelCalls(t *testing.T) {
	addr, _, _ := serveBoth(t, &echoPS{})
	c := newClient(t, addr)
	ctx := ctxT(t, 20*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				v := int64(w*100 + i)
				resp, release, err := c.Pull(ctx, &pserverpb.PullDenseParametersRequest{Version: v})
				if err != nil {
					errs <- err
					return
				}
				if resp.GetVersion() != v || len(resp.DenseParameters[0].Content) != int(v) {
					errs <- fmt.Errorf("pull %d answered %d", v, resp.GetVersion())
				}
				release()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(c.idle); n > maxIdle {
		t.Errorf("%d idle connections kept, at most %d", n, maxIdle)
	}
}

// A cancelled call returns at once with the context's status; its
// connection is not reused.
func TestCancelInterruptsACall(t *testing.T) {
	e := &echoPS{block: make(chan struct{})}
	addr, _, _ := serveBoth(t, e)
	c := newClient(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, _, err := c.Push(ctx, &pserverpb.PushGradientsRequest{})
	if status.Code(err) != codes.Canceled || time.Since(start) > 5*time.Second {
		t.Fatalf("after %v: %v, want Canceled", time.Since(start), err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, _, err = c.Push(ctx2, &pserverpb.PushGradientsRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("deadline: %v, want DeadlineExceeded", err)
	}
	close(e.block)
	if len(c.idle) != 0 {
		t.Errorf("%d connections kept after interrupted calls", len(c.idle))
	}
	if _, release, err := c.Push(ctxT(t, 10*time.Second), &pserverpb.PushGradientsRequest{}); err != nil {
		t.Fatalf("a call after: %v", err)
	} else {
		release()
	}
}

// A server that goes away is Unavailable; a server that does not speak
// the protocol is ErrUnsupported, once and for all.
func TestUnavailableAndUnsupported(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	if _, _, err := newClient(t, dead).Pull(ctxT(t, 5*time.Second), &pserverpb.PullDenseParametersRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("nobody listening: %v, want Unavailable", err)
	}

	e := &echoPS{block: make(chan struct{})}
	addr, mux, g := serveBoth(t, e)
	c := newClient(t, addr)
	got := make(chan error, 1)
	go func() {
		_, _, err := c.Push(ctxT(t, 10*time.Second), &pserverpb.PushGradientsRequest{})
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	g.Stop()
	mux.Stop(0)
	if err := <-got; status.Code(err) != codes.Unavailable {
		t.Errorf("server stopped mid-call: %v, want Unavailable", err)
	}
	close(e.block)

	lis, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcOnly := grpc.NewServer()
	pserverpb.RegisterPserverServer(grpcOnly, &echoPS{})
	go grpcOnly.Serve(lis)
	defer grpcOnly.Stop()
	c = newClient(t, lis.Addr().String())
	for range 2 {
		if _, _, err := c.Pull(ctxT(t, 5*time.Second), &pserverpb.PullDenseParametersRequest{}); !errors.Is(err, ErrUnsupported) || !c.Unsupported() {
			t.Errorf("a gRPC-only server: %v, want ErrUnsupported", err)
		}
	}
}

// A client told of the server's local socket uses it from its next
// connection on; one it cannot reach (another host, a server gone) is
// left for TCP, for good.
func TestLocalSocket(t *testing.T) {
	e := &echoPS{}
	addr, mux, _ := serveBoth(t, e)
	name := fmt.Sprintf("elasticdl-direct-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	if err := mux.ServeLocal(name); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, addr)
	ctx := ctxT(t, 10*time.Second)
	pull := func() {
		t.Helper()
		_, release, err := c.Pull(ctx, &pserverpb.PullDenseParametersRequest{Version: 9})
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	pull() // over TCP: the hello names the local socket
	if c.route.name != name || len(c.idle) != 0 {
		t.Fatalf("local %q, %d idle connections: want %q learned and the TCP connection closed", c.route.name, len(c.idle), name)
	}
	pull()
	if len(c.idle) != 1 || !c.idle[0].local || c.idle[0].conn.RemoteAddr().Network() != "unix" {
		t.Fatalf("after a second call: %d idle connections, want the local one", len(c.idle))
	}
	// The local socket goes (its server, say): calls go on over TCP.
	c.idle[0].conn.Close()
	c.idle = nil
	mux.local.Close()
	pull()
	if c.route.name != "" || c.route.failed != name || len(c.idle) != 1 || c.idle[0].local {
		t.Fatalf("local %q, bad %q, %d idle: want TCP and the socket given up", c.route.name, c.route.failed, len(c.idle))
	}

	// A server naming a socket this client cannot reach.
	e2 := &echoPS{}
	addr2, mux2, _ := serveBoth(t, e2)
	mux2.mu.Lock()
	mux2.localName = name + "-elsewhere"
	mux2.mu.Unlock()
	c2 := newClient(t, addr2)
	for range 3 {
		if _, release, err := c2.Pull(ctx, &pserverpb.PullDenseParametersRequest{}); err != nil {
			t.Fatal(err)
		} else {
			release()
		}
	}
	if c2.route.failed != name+"-elsewhere" || c2.route.name != "" {
		t.Errorf("local %q, bad %q: want the unreachable socket given up", c2.route.name, c2.route.failed)
	}
}

// The route's decisions, event by event.
func TestLocalRoute(t *testing.T) {
	type step struct {
		event, name  string // told, unreachable
		want, failed string
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"no local socket", []step{{"told", "", "", ""}}},
		{"learned", []step{{"told", "a", "a", ""}, {"told", "a", "a", ""}}},
		{"unreachable, then named again", []step{{"told", "a", "a", ""}, {"unreachable", "a", "", "a"}, {"told", "a", "", "a"}}},
		{"a relaunched server's new name", []step{{"told", "a", "a", ""}, {"unreachable", "a", "", "a"}, {"told", "b", "b", "a"}}},
		{"a stale failure of another name", []step{{"told", "b", "b", ""}, {"unreachable", "a", "b", ""}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r localRoute
			for i, s := range c.steps {
				if s.event == "told" {
					r.told(s.name)
				} else {
					r.unreachable(s.name)
				}
				if r.name != s.want || r.failed != s.failed {
					t.Fatalf("after step %d (%s %q): route %+v, want name %q failed %q", i, s.event, s.name, r, s.want, s.failed)
				}
			}
		})
	}
	for _, c := range []struct {
		name  string
		local bool
		keep  bool
	}{{"", false, true}, {"", true, true}, {"a", false, false}, {"a", true, true}} {
		r := localRoute{name: c.name}
		if got := r.keeps(c.local); got != c.keep {
			t.Errorf("route to %q keeps a local=%v connection: %v, want %v", c.name, c.local, got, c.keep)
		}
	}
}
