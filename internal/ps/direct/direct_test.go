package direct

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"elasticdl/proto/pserverpb"
)

// echoPS answers a push with its gradients doubled as parameters (when
// asked), and a pull with one tensor of the asked version's bytes; a push
// from worker 13 fails as an uninitialized shard does. It counts releases.
type echoPS struct {
	pserverpb.UnimplementedPserverServer
	// block, when not nil, holds every push until it is closed.
	block chan struct{}
	// layout is how answers are put in the buffer the Mux lends: "" back
	// to back, "reversed" in reverse order (the Mux must not copy them
	// over each other), "own" in buffers of the handler's own.
	layout string
	// lent counts the answers built in the lent buffer.
	lent atomic.Int64
}

// push answers each gradient doubled, as the parameters when asked for.
func (e *echoPS) push(ctx context.Context, req *pserverpb.PushGradientsRequest, out *[]byte) (*pserverpb.PushGradientsResponse, error) {
	if e.block != nil {
		<-e.block
	}
	if req.GetWorkerId() == 13 {
		return nil, status.Errorf(codes.FailedPrecondition, "shard not initialized")
	}
	resp := &pserverpb.PushGradientsResponse{Accepted: true, Version: req.GetVersion() + 1}
	if req.GetReturnParameters() {
		// *out may be where the request's contents are: read them all first.
		var answers [][]byte
		for _, g := range req.GetGradients() {
			answers = append(answers, append(bytes.Clone(g.GetContent()), g.GetContent()...))
		}
		for i, c := range e.place(answers, out) {
			g := req.Gradients[i]
			resp.DenseParameters = append(resp.DenseParameters, &pserverpb.Tensor{Name: g.GetName(), Dims: []int64{int64(len(c))}, Content: c})
		}
	}
	return resp, nil
}

func (e *echoPS) pull(ctx context.Context, req *pserverpb.PullDenseParametersRequest, out *[]byte) (*pserverpb.PullDenseParametersResponse, error) {
	c := e.place([][]byte{bytes.Repeat([]byte{byte(req.GetVersion())}, int(req.GetVersion())), nil}, out)
	return &pserverpb.PullDenseParametersResponse{Initialized: true, Version: req.GetVersion(),
		DenseParameters: []*pserverpb.Tensor{{Name: "p", Content: c[0]}, {Name: "empty", Content: c[1]}}}, nil
}

// place lays contents out in *out as e.layout says (out is nil on gRPC).
func (e *echoPS) place(contents [][]byte, out *[]byte) [][]byte {
	if e.layout == "own" || out == nil {
		return contents
	}
	order := make([]int, len(contents))
	total := 0
	for i, c := range contents {
		order[i] = i
		total += len(c)
	}
	if e.layout == "reversed" {
		slices.Reverse(order)
	}
	if cap(*out) < total {
		*out = make([]byte, 0, total)
	}
	buf := (*out)[:0]
	placed := make([][]byte, len(contents))
	for _, i := range order {
		start := len(buf)
		buf = append(buf, contents[i]...)
		placed[i] = buf[start:len(buf):len(buf)]
	}
	e.lent.Add(1)
	return placed
}

func (e *echoPS) PushGradients(ctx context.Context, req *pserverpb.PushGradientsRequest) (*pserverpb.PushGradientsResponse, error) {
	return e.push(ctx, req, nil)
}

func (e *echoPS) handler() Handler { return Handler{Push: e.push, Pull: e.pull} }

// serveBoth serves e on a free port: direct connections and gRPC.
func serveBoth(t *testing.T, e *echoPS) (addr string, mux *Mux, g *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g = grpc.NewServer()
	pserverpb.RegisterPserverServer(g, e)
	mux = NewMux(lis, e.handler(), nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(mux) }()
	t.Cleanup(func() { g.Stop(); mux.Stop(0); <-done })
	return lis.Addr().String(), mux, g
}

func newClient(t *testing.T, addr string) *Client {
	c := NewClient(addr)
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

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
