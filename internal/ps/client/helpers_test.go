package client

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/direct"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/rpc"
	"elasticdl/nn"
)

// psProc is an in-process PS shard on a real TCP port, serving gRPC and
// direct connections as a PS process does.
type psProc struct {
	addr string
	srv  *ps.Server
	g    *grpc.Server
	mux  *direct.Mux
	done chan struct{}
}

// serve serves srv on lis, both transports, and on a local socket as a
// PS process does (clients on this host switch to it) unless tcpOnly.
func serve(t testing.TB, srv *ps.Server, lis net.Listener, tcpOnly ...bool) *psProc {
	g := grpc.NewServer(rpc.ServerOptions()...)
	srv.Register(g)
	mux := direct.NewMux(lis, srv.DirectHandler(), nil)
	if len(tcpOnly) == 0 || !tcpOnly[0] {
		if err := mux.ServeLocal(fmt.Sprintf("elasticdl-client-test-%d-%d", os.Getpid(), time.Now().UnixNano())); err != nil {
			t.Fatal(err)
		}
	}
	p := &psProc{addr: lis.Addr().String(), srv: srv, g: g, mux: mux, done: make(chan struct{})}
	go func() { defer close(p.done); _ = g.Serve(mux) }()
	t.Cleanup(p.kill)
	return p
}

// startPS serves shard index of numPS on addr ("" picks a free port) with
// SGD at lr, tcpOnly as serve. The listen is retried briefly because a
// restarted PS reuses the address of one just stopped.
func startPS(t testing.TB, index, numPS int, addr string, lr float64, tcpOnly ...bool) *psProc {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lis net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optimizer.NewSGD("sgd", lr, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ps.NewServer(ps.Config{Index: index, NumPS: numPS, Optimizer: opt})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv, lis, tcpOnly...)
}

// kill stops the shard abruptly, as a killed pod would.
func (p *psProc) kill() { p.g.Stop(); p.mux.Stop(0); <-p.done }

// startCluster serves numPS shards with SGD at lr on free ports.
func startCluster(t testing.TB, numPS int, lr float64, tcpOnly ...bool) ([]*psProc, []string) {
	t.Helper()
	var procs []*psProc
	var addrs []string
	for i := range numPS {
		p := startPS(t, i, numPS, "", lr, tcpOnly...)
		procs = append(procs, p)
		addrs = append(addrs, p.addr)
	}
	return procs, addrs
}

// dial dials addrs with short backoffs, for tests that kill shards.
func dial(t testing.TB, addrs []string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), addrs, WithBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pushedCluster is most tests' start: numPS shards with SGD at lr, a
// client dialed to them, a context ending after timeout, and testModel
// (with tbl) pushed as version 0 by that client.
func pushedCluster(t *testing.T, numPS int, lr float64, timeout time.Duration, tbl ...EmbeddingTable) (
	procs []*psProc, addrs []string, c *Client, ctx context.Context, model []*nn.Param) {
	t.Helper()
	procs, addrs = startCluster(t, numPS, lr)
	c = dial(t, addrs)
	ctx = ctxT(t, timeout)
	model = testModel()
	if err := c.PushModel(ctx, model, tbl...); err != nil {
		t.Fatal(err)
	}
	return procs, addrs, c, ctx, model
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func param(name string, shape []int, vals ...float32) *nn.Param {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if vals == nil {
		vals = make([]float32, n)
	}
	return &nn.Param{
		Name:  name,
		Value: &nn.Tensor{Shape: shape, Data: vals},
		Grad:  &nn.Tensor{Shape: shape, Data: make([]float32, n)},
	}
}

// model: dense/* land on shard 0 of 2, out/* on shard 1 (checked below).
func testModel() []*nn.Param {
	return []*nn.Param{
		param("dense/kernel", []int{2, 2}, 1, 2, 3, 4),
		param("dense/bias", []int{2}, -1, 1),
		param("out/kernel", []int{2, 1}, 0.5, -0.5),
		param("out/bias", []int{1}, 10),
	}
}

// zeroValues gives a worker that has not pulled yet: same shapes, zeros.
func zeroValues(params []*nn.Param) []*nn.Param {
	var out []*nn.Param
	for _, p := range params {
		out = append(out, param(p.Name, p.Value.Shape))
	}
	return out
}

func values(params []*nn.Param) map[string][]float32 {
	m := map[string][]float32{}
	for _, p := range params {
		m[p.Name] = slices.Clone(p.Value.Data)
	}
	return m
}

func wantValues(t *testing.T, got map[string][]float32, want map[string][]float32) {
	t.Helper()
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("%s = %v, want %v", name, got[name], w)
		}
	}
}

func setGrads(params []*nn.Param, v float32) {
	for _, p := range params {
		for i := range p.Grad.Data {
			p.Grad.Data[i] = v
		}
	}
}

// recorder is a slog handler keeping messages, to check what was logged.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}

func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

func (r *recorder) WithGroup(string) slog.Handler { return r }

func (r *recorder) count(substr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}
