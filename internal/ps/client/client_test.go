package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/direct"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/ps/shard"
	"elasticdl/internal/rpc"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
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

func dial(t testing.TB, addrs []string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), addrs, WithBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
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

func TestShardOf(t *testing.T) {
	// Fixed values: routing must never change across releases. FNV-1a 32
	// of "a" is 0xe40c292c = 3826002220 (mod 3 = 1, mod 7 = 5).
	for _, c := range []struct {
		name string
		n    int
		want int
	}{
		{"a", 1, 0}, {"a", 3, 1}, {"a", 7, 5},
		{"dense/kernel", 2, 0}, {"dense/bias", 2, 0}, {"out/kernel", 2, 1}, {"out/bias", 2, 1},
	} {
		if got := ShardOf(c.name, c.n); got != c.want {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", c.name, c.n, got, c.want)
		}
		if got := shard.Of(c.name, c.n); got != ShardOf(c.name, c.n) {
			t.Errorf("client and server disagree on %q", c.name)
		}
	}
}

func TestOneShard(t *testing.T) {
	procs, addrs := startCluster(t, 1, 0.5)
	c := dial(t, addrs)
	ctx := ctxT(t, 10*time.Second)
	model := testModel()
	if err := c.PushModel(ctx, model); err != nil {
		t.Fatal(err)
	}
	// The worker holds version 0 already (its push was accepted).
	changed, err := c.Pull(ctx, model)
	if err != nil || changed {
		t.Fatalf("pull after own push: changed=%v err=%v, want false nil", changed, err)
	}
	// SGD lr 0.5 on dense/kernel [1 2 3 4] with grad [2 0 0 -2] -> [0 2 3 5];
	// dense/bias [-1 1] with [1 1] -> [-1.5 0.5]; the others get zero grads.
	model[0].Grad.Data = []float32{2, 0, 0, -2}
	model[1].Grad.Data = []float32{1, 1}
	ok, err := c.Push(ctx, model, nil, 7, AllShards)
	if err != nil || !ok {
		t.Fatalf("push: %v %v", ok, err)
	}
	if v := procs[0].srv.Version(); v != 1 {
		t.Errorf("server version %d, want 1", v)
	}
	// Push does not touch the worker's values; Pull does, in place.
	before := &model[0].Value.Data[0]
	changed, err = c.Pull(ctx, model)
	if err != nil || !changed {
		t.Fatalf("pull: changed=%v err=%v, want true nil", changed, err)
	}
	if &model[0].Value.Data[0] != before {
		t.Error("Pull replaced Value.Data instead of filling it in place")
	}
	wantValues(t, values(model), map[string][]float32{
		"dense/kernel": {0, 2, 3, 5}, "dense/bias": {-1.5, 0.5}, "out/kernel": {0.5, -0.5}, "out/bias": {10},
	})
	// A second worker that never pushed gets the same values.
	other := zeroValues(model)
	if _, err := dial(t, addrs).Pull(ctx, other); err != nil {
		t.Fatal(err)
	}
	wantValues(t, values(other), values(model))
}

func TestTwoShards(t *testing.T) {
	// lr 0.25 keeps every expected value exact in float32.
	procs, addrs := startCluster(t, 2, 0.25)
	c := dial(t, addrs)
	ctx := ctxT(t, 10*time.Second)
	model := testModel()
	if err := c.PushModel(ctx, model); err != nil {
		t.Fatal(err)
	}
	// Each shard holds exactly its half.
	p0, p1 := procs[0].srv.Parameters(), procs[1].srv.Parameters()
	if len(p0) != 2 || p0["dense/kernel"] == nil || p0["dense/bias"] == nil {
		t.Errorf("shard 0 holds %v, want dense/*", p0)
	}
	if len(p1) != 2 || p1["out/kernel"] == nil || p1["out/bias"] == nil {
		t.Errorf("shard 1 holds %v, want out/*", p1)
	}
	for _, p := range model {
		for i := range p.Grad.Data {
			p.Grad.Data[i] = 1
		}
	}
	// Only shard 1's parameters get a non-zero gradient twice more.
	for step := range 3 {
		if step > 0 {
			model[0].Grad.Data = []float32{0, 0, 0, 0}
			model[1].Grad.Data = []float32{0, 0}
		}
		if ok, err := c.Push(ctx, model, nil, 0, AllShards); err != nil || !ok {
			t.Fatalf("push %d: %v %v", step, ok, err)
		}
	}
	if procs[0].srv.Version() != 3 || procs[1].srv.Version() != 3 {
		t.Errorf("versions %d %d, want 3 3", procs[0].srv.Version(), procs[1].srv.Version())
	}
	w := zeroValues(model)
	if changed, err := dial(t, addrs).Pull(ctx, w); err != nil || !changed {
		t.Fatal(changed, err)
	}
	// dense: one step of 0.25; out: three steps of 0.25.
	wantValues(t, values(w), map[string][]float32{
		"dense/kernel": {0.75, 1.75, 2.75, 3.75},
		"dense/bias":   {-1.25, 0.75},
		"out/kernel":   {-0.25, -1.25},
		"out/bias":     {9.25},
	})
}

// TestConcurrentClients has two workers pushing and pulling at once; with
// SGD the final values are exact whatever the interleaving.
func TestConcurrentClients(t *testing.T) {
	procs, addrs := startCluster(t, 2, 1)
	ctx := ctxT(t, 30*time.Second)
	if err := dial(t, addrs).PushModel(ctx, testModel()); err != nil {
		t.Fatal(err)
	}
	const steps = 50
	var wg sync.WaitGroup
	for w := range 2 {
		c := dial(t, addrs)
		model := zeroValues(testModel())
		wg.Go(func() {
			for range steps {
				if _, err := c.Pull(ctx, model); err != nil {
					t.Error(err)
					return
				}
				for _, p := range model {
					for i := range p.Grad.Data {
						p.Grad.Data[i] = 0.5
					}
				}
				if _, err := c.Push(ctx, model, nil, w, AllShards); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, p := range procs {
		if v := p.srv.Version(); v != 2*steps {
			t.Errorf("shard %d version %d, want %d", i, v, 2*steps)
		}
	}
	// 100 pushes of 0.5 at lr 1: every value drops by 50.
	if got := procs[1].srv.Parameters()["out/bias"]; len(got) != 1 || got[0] != 10-50 {
		t.Errorf("out/bias = %v, want [-40]", got)
	}
}

// TestRestartedShardReinitializedByPush kills shard 1 mid-training and
// relaunches it empty at the same address: the next Push must ride out the
// outage, restore the shard from the worker's values and apply the push.
func TestRestartedShardReinitializedByPush(t *testing.T) {
	procs, addrs := startCluster(t, 2, 0.5)
	rec := &recorder{}
	c, err := Dial(context.Background(), addrs, WithLogger(slog.New(rec)), WithBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t, 30*time.Second)
	model := testModel()
	if err := c.PushModel(ctx, model); err != nil {
		t.Fatal(err)
	}
	setGrads(model, 1)
	for range 2 {
		if _, err := c.Push(ctx, model, nil, 0, AllShards); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Pull(ctx, model); err != nil {
		t.Fatal(err)
	}
	// out/bias: 10 - 2*0.5 = 9 at version 2.
	if model[3].Value.Data[0] != 9 {
		t.Fatalf("out/bias = %v before the restart, want 9", model[3].Value.Data)
	}
	held := values(model)

	procs[1].kill()
	restarted := make(chan *psProc, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // the client sees Unavailable meanwhile
		restarted <- startPS(t, 1, 2, addrs[1], 0.5)
	}()
	if ok, err := c.Push(ctx, model, nil, 0, AllShards); err != nil || !ok {
		t.Fatalf("push across restart: %v %v", ok, err)
	}
	p1 := <-restarted
	// The outage was seen (Unavailable, retried) and the shard restored once.
	if n := rec.count("DEBUG PS shard unavailable"); n == 0 {
		t.Error("no Unavailable retry logged: the test did not exercise the outage")
	}
	if n := rec.count("WARN re-initialized relaunched PS shard"); n != 1 {
		t.Errorf("%d re-initializations logged, want 1", n)
	}
	// Shard 1 restarted from the worker's values at version 2, then took
	// the push: version 3, values one SGD step below what the worker held.
	if v := p1.srv.Version(); v != 3 {
		t.Errorf("restarted shard version %d, want 3", v)
	}
	got := p1.srv.Parameters()
	for _, name := range []string{"out/kernel", "out/bias"} {
		want := slices.Clone(held[name])
		for i := range want {
			want[i] -= 0.5
		}
		if !slices.Equal(got[name], want) {
			t.Errorf("restarted %s = %v, want %v", name, got[name], want)
		}
	}
	// Shard 0 was untouched by the outage: version 3 as well.
	if v := procs[0].srv.Version(); v != 3 {
		t.Errorf("shard 0 version %d, want 3", v)
	}
	// Training carries on.
	if changed, err := c.Pull(ctx, model); err != nil || !changed {
		t.Fatalf("pull after restart: %v %v", changed, err)
	}
	if model[3].Value.Data[0] != 8.5 {
		t.Errorf("out/bias = %v, want 8.5", model[3].Value.Data)
	}
}

// TestRestartedShardReinitializedByPull: the first call to reach the
// relaunched shard is a Pull.
func TestRestartedShardReinitializedByPull(t *testing.T) {
	procs, addrs := startCluster(t, 1, 0.5)
	c := dial(t, addrs)
	ctx := ctxT(t, 30*time.Second)
	model := testModel()
	if err := c.PushModel(ctx, model); err != nil {
		t.Fatal(err)
	}
	setGrads(model, 2)
	if _, err := c.Push(ctx, model, nil, 0, AllShards); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pull(ctx, model); err != nil {
		t.Fatal(err)
	}
	held := values(model)
	procs[0].kill()
	p := startPS(t, 0, 1, addrs[0], 0.5)
	changed, err := c.Pull(ctx, model)
	if err != nil {
		t.Fatal(err)
	}
	if changed {
		t.Error("pull after re-initializing from own values reported a change")
	}
	if v := p.srv.Version(); v != 1 {
		t.Errorf("restarted version %d, want 1 (the version the worker held)", v)
	}
	wantValues(t, p.srv.Parameters(), held)
	wantValues(t, values(model), held)
}

// TestFreshWorkerDoesNotReinitialize: a worker that never held a shard's
// values must not restore it with its own (zero) values; it waits.
func TestFreshWorkerDoesNotReinitialize(t *testing.T) {
	procs, addrs := startCluster(t, 1, 0.5)
	ctx := ctxT(t, 30*time.Second)
	if err := dial(t, addrs).PushModel(ctx, testModel()); err != nil {
		t.Fatal(err)
	}
	procs[0].kill()
	p := startPS(t, 0, 1, addrs[0], 0.5)
	fresh := zeroValues(testModel())
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := dial(t, addrs).Pull(short, fresh)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fresh pull from an empty shard: %v, want deadline exceeded", err)
	}
	if !strings.Contains(err.Error(), addrs[0]) {
		t.Errorf("error %q does not name the address", err)
	}
	if p.srv.Version() != -1 {
		t.Error("a worker without values initialized the shard")
	}
	if _, err := dial(t, addrs).Push(ctx, fresh, nil, 0, AllShards); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("fresh push to an empty shard: %v, want FailedPrecondition", err)
	}
}

func TestPullWaitsForInitialization(t *testing.T) {
	_, addrs := startCluster(t, 2, 0.5)
	ctx := ctxT(t, 10*time.Second)
	waiter := zeroValues(testModel())
	go func() {
		time.Sleep(200 * time.Millisecond)
		if err := dial(t, addrs).PushModel(ctx, testModel()); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	changed, err := dial(t, addrs).Pull(ctx, waiter)
	if err != nil || !changed {
		t.Fatalf("pull: %v %v", changed, err)
	}
	if time.Since(start) < 150*time.Millisecond {
		t.Errorf("pull returned after %v, before the model was pushed", time.Since(start))
	}
	wantValues(t, values(waiter), values(testModel()))
}

func TestPSStartsLate(t *testing.T) {
	// Reserve a port, free it, and start the PS there only later.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c := dial(t, []string{addr})
	go func() {
		time.Sleep(300 * time.Millisecond)
		startPS(t, 0, 1, addr, 0.1)
	}()
	if err := c.PushModel(ctxT(t, 10*time.Second), testModel()); err != nil {
		t.Fatalf("push model to a late PS: %v", err)
	}
}

func TestUnavailableUntilDeadline(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c := dial(t, []string{addr})
	start := time.Now()
	_, err = c.Pull(ctxT(t, 400*time.Millisecond), testModel())
	if err == nil {
		t.Fatal("pull from a dead PS succeeded")
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Errorf("gave up after %v, before the deadline", time.Since(start))
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "shard 0 ("+addr+")") {
		t.Errorf("error %q: want deadline exceeded naming shard 0 and %s", err, addr)
	}
}

func TestInvalidPush(t *testing.T) {
	procs, addrs := startCluster(t, 1, 0.5)
	c := dial(t, addrs)
	ctx := ctxT(t, 10*time.Second)
	model := testModel()
	if err := c.PushModel(ctx, model); err != nil {
		t.Fatal(err)
	}
	setGrads(model, 1)
	// dense/bias's gradient has the wrong shape; dense/kernel's is fine but
	// must not be applied either.
	model[1].Grad = &nn.Tensor{Shape: []int{3}, Data: []float32{1, 1, 1}}
	_, err := c.Push(ctx, model, nil, 0, AllShards)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("push: %v, want InvalidArgument", err)
	}
	for _, want := range []string{"dense/bias", "shard 0", addrs[0]} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if procs[0].srv.Version() != 0 {
		t.Errorf("version %d after invalid push, want 0", procs[0].srv.Version())
	}
	wantValues(t, procs[0].srv.Parameters(), values(testModel()))
}

func TestClientSideValidation(t *testing.T) {
	_, addrs := startCluster(t, 1, 0.5)
	c := dial(t, addrs)
	ctx := ctxT(t, 10*time.Second)
	dup := []*nn.Param{param("x", []int{1}), param("x", []int{1})}
	if err := c.PushModel(ctx, dup); err == nil || !strings.Contains(err.Error(), `"x" given twice`) {
		t.Errorf("duplicate names: %v", err)
	}
	noGrad := []*nn.Param{param("x", []int{1})}
	noGrad[0].Grad = nil
	if _, err := c.Push(ctx, noGrad, nil, 0, AllShards); err == nil || !strings.Contains(err.Error(), "no gradient") {
		t.Errorf("missing gradient: %v", err)
	}
	// The worker's model disagrees with the shard's: error, values intact.
	if err := c.PushModel(ctx, testModel()); err != nil {
		t.Fatal(err)
	}
	wrong := testModel()
	wrong[0] = param("dense/kernel", []int{4}, 7, 7, 7, 7)
	if _, err := dial(t, addrs).Pull(ctx, wrong); err == nil {
		t.Error("pull into a differently shaped parameter succeeded")
	}
	if !slices.Equal(wrong[0].Value.Data, []float32{7, 7, 7, 7}) {
		t.Errorf("failed pull changed values: %v", wrong[0].Value.Data)
	}
	if _, err := Dial(ctx, nil); err == nil {
		t.Error("Dial with no addresses succeeded")
	}
}

// TestReinitRace: two workers holding different versions race to restore
// a relaunched shard; one wins and both end up with the winner's values.
func TestReinitRace(t *testing.T) {
	procs, addrs := startCluster(t, 1, 0.5)
	ctx := ctxT(t, 30*time.Second)
	a, b := dial(t, addrs), dial(t, addrs)
	ma, mb := testModel(), zeroValues(testModel())
	if err := a.PushModel(ctx, ma); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pull(ctx, mb); err != nil { // b holds version 0
		t.Fatal(err)
	}
	setGrads(ma, 1)
	if _, err := a.Push(ctx, ma, nil, 0, AllShards); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pull(ctx, ma); err != nil { // a holds version 1
		t.Fatal(err)
	}
	procs[0].kill()
	p := startPS(t, 0, 1, addrs[0], 0.5)
	var wg sync.WaitGroup
	for _, w := range []struct {
		c *Client
		m []*nn.Param
	}{{a, ma}, {b, mb}} {
		wg.Go(func() {
			if _, err := w.c.Pull(ctx, w.m); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	server := p.srv.Parameters()
	if got := server["out/bias"][0]; got != 10 && got != 9.5 {
		t.Fatalf("restored out/bias = %v, want one worker's value (10 or 9.5)", got)
	}
	// The loser re-pulled: everyone agrees with the server now.
	wantValues(t, values(ma), server)
	wantValues(t, values(mb), server)
}

// TestRefetchAfterOutage: a worker that saw its shard go away re-pulls in
// full afterwards, even if the restored shard reached the same version
// number from other values (restored by a worker holding an older version).
func TestRefetchAfterOutage(t *testing.T) {
	procs, addrs := startCluster(t, 1, 0.5)
	ctx := ctxT(t, 30*time.Second)
	a, b := dial(t, addrs), dial(t, addrs)
	ma, mb := testModel(), zeroValues(testModel())
	if err := a.PushModel(ctx, ma); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pull(ctx, mb); err != nil { // b: version 0
		t.Fatal(err)
	}
	setGrads(ma, 1)
	for range 2 {
		if _, err := a.Push(ctx, ma, nil, 0, AllShards); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Pull(ctx, ma); err != nil { // a: version 2, out/bias 9
		t.Fatal(err)
	}
	procs[0].kill()
	// a notices the outage.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := a.Pull(short, ma); err == nil {
		t.Fatal("pull from a dead shard succeeded")
	}
	cancel()
	p := startPS(t, 0, 1, addrs[0], 0.5)
	// b restores version 0 and pushes twice: version 2 again, other values.
	setGrads(mb, -1)
	for range 2 {
		if _, err := b.Push(ctx, mb, nil, 1, AllShards); err != nil {
			t.Fatal(err)
		}
	}
	if v := p.srv.Version(); v != 2 {
		t.Fatalf("restored shard at version %d, want 2", v)
	}
	changed, err := a.Pull(ctx, ma)
	if err != nil || !changed {
		t.Fatalf("pull after outage: changed=%v err=%v, want a full pull", changed, err)
	}
	wantValues(t, values(ma), p.srv.Parameters())
	if ma[3].Value.Data[0] != 11 { // 10 + 2*0.5
		t.Errorf("out/bias = %v, want 11", ma[3].Value.Data)
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
func (r *recorder) WithGroup(string) slog.Handler      { return r }

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

func setGrads(params []*nn.Param, v float32) {
	for _, p := range params {
		for i := range p.Grad.Data {
			p.Grad.Data[i] = v
		}
	}
}

// BenchmarkPushPull moves a 4 MiB model (4 x 512x512 float32) to the PS
// and back: "push+pull" as two calls; "push-return" as one push answered
// with the parameters (what an async worker does), in float32 and in
// bfloat16; over direct connections (on the PS's local socket with a
// shared region, as on one host; the socket alone; TCP, as across hosts)
// and over gRPC. MB/s counts the float32
// bytes of both directions, whatever travels.
func BenchmarkPushPull(b *testing.B) {
	for _, numPS := range []int{1, 2} {
		for _, mode := range []string{"push+pull", "push-return", "push-return-bf16"} {
			for _, transport := range []string{"direct", "direct-socket", "direct-tcp", "grpc"} {
				b.Run(fmt.Sprintf("ps=%d/%s/%s", numPS, mode, transport), func(b *testing.B) {
					_, addrs := startCluster(b, numPS, 1e-6, transport == "direct-tcp")
					dtype := pserverpb.DType_FLOAT32
					if mode == "push-return-bf16" {
						dtype = pserverpb.DType_BFLOAT16
					}
					opts := []Option{WithTransportDType(dtype)}
					switch transport {
					case "grpc":
						opts = append(opts, WithGRPCOnly())
					case "direct-socket":
						opts = append(opts, func(o *options) { o.noSharedMemory = true })
					}
					c, err := Dial(context.Background(), addrs, opts...)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { c.Close() })
					ctx := context.Background()
					var model []*nn.Param
					for i := range 4 {
						model = append(model, param(fmt.Sprintf("w%d", i), []int{512, 512}))
					}
					if err := c.PushModel(ctx, model); err != nil {
						b.Fatal(err)
					}
					setGrads(model, 1)
					b.SetBytes(2 * 4 * 4 * 512 * 512)
					b.ReportAllocs()
					for b.Loop() {
						if mode != "push+pull" {
							if r, err := c.StartPush(ctx, PushRequest{Params: model, ReturnParameters: true}).Wait(); err != nil || !r.Fresh {
								b.Fatal(r, err)
							}
							continue
						}
						if _, err := c.Push(ctx, model, nil, 0, AllShards); err != nil {
							b.Fatal(err)
						}
						if changed, err := c.Pull(ctx, model); err != nil || !changed {
							b.Fatal(changed, err)
						}
					}
				})
			}
		}
	}
}

// TestMinibatchPushes: a named minibatch reaches each shard once; a repeat
// is answered duplicate; Applied says what each shard holds, and a push
// can leave out the shards that hold its minibatch.
func TestMinibatchPushes(t *testing.T) {
	procs, addrs := startCluster(t, 2, 0.25)
	c := dial(t, addrs)
	ctx := ctxT(t, 10*time.Second)
	model := testModel()
	if err := c.PushModel(ctx, model); err != nil {
		t.Fatal(err)
	}
	for _, p := range model {
		for i := range p.Grad.Data {
			p.Grad.Data[i] = 1
		}
	}
	key := func(i int32) *pserverpb.MinibatchKey { return &pserverpb.MinibatchKey{TaskId: 4, Index: i} }
	if ok, dup, err := c.PushMinibatch(ctx, model, nil, 0, AllShards, key(0), nil); err != nil || !ok || dup {
		t.Fatalf("first push: %v %v %v", ok, dup, err)
	}
	if ok, dup, err := c.PushMinibatch(ctx, model, nil, 0, AllShards, key(0), nil); err != nil || !ok || !dup {
		t.Fatalf("the same minibatch again: accepted %v duplicate %v %v, want a duplicate", ok, dup, err)
	}
	// Minibatch 1 only to shard 1 (shard 0 said it holds it).
	if ok, dup, err := c.PushMinibatch(ctx, model, nil, 0, AllShards, key(1), func(s int) bool { return s == 0 }); err != nil || !ok || dup {
		t.Fatalf("push leaving shard 0 out: %v %v %v", ok, dup, err)
	}
	if procs[0].srv.Version() != 1 || procs[1].srv.Version() != 2 {
		t.Errorf("versions %d %d, want 1 2", procs[0].srv.Version(), procs[1].srv.Version())
	}
	held, err := c.Applied(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(held[0], []int32{0, 1}) || !slices.Equal(held[1], []int32{0, 2}) {
		t.Fatalf("applied %v, want shard 0 [0,1), shard 1 [0,2)", held)
	}
	if !HoldsMinibatch(held[1], 1) || HoldsMinibatch(held[0], 1) || HoldsMinibatch(held[1], 2) {
		t.Errorf("HoldsMinibatch disagrees with %v", held)
	}
	// A minibatch with gradients for no parameter of a shard still
	// reaches it (recorded, no update), so every shard's set is complete.
	var only1 []*nn.Param
	for _, p := range model {
		if shard.Of(p.Name, 2) == 1 {
			only1 = append(only1, p)
		}
	}
	if ok, dup, err := c.PushMinibatch(ctx, only1, nil, 0, AllShards, key(2), nil); err != nil || !ok || dup {
		t.Fatalf("push with gradients for shard 1 only: %v %v %v", ok, dup, err)
	}
	all, err := c.AppliedAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(all[0].Tasks[4], [][2]int32{{0, 1}, {2, 3}}) || !slices.Equal(all[1].Tasks[4], [][2]int32{{0, 3}}) || all[0].Unknown || all[1].Unknown {
		t.Fatalf("applied %+v, want shard 0 {0, 2}, shard 1 [0,3)", all)
	}
	if procs[0].srv.Version() != 1 {
		t.Errorf("shard 0 version %d: a push without its gradients updated it", procs[0].srv.Version())
	}
}

// TestPushReturnsParameters: a push asking for the parameters back leaves
// the worker's values alone until Wait, then holds exactly the shards'
// values and versions, so the next pull moves nothing.
func TestPushReturnsParameters(t *testing.T) {
	procs, addrs := startCluster(t, 2, 0.25)
	a, b := dial(t, addrs), dial(t, addrs)
	ctx := ctxT(t, 10*time.Second)
	ma, mb := testModel(), testModel()
	if err := a.PushModel(ctx, ma); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pull(ctx, mb); err != nil {
		t.Fatal(err)
	}
	for _, m := range [][]*nn.Param{ma, mb} {
		for _, p := range m {
			for i := range p.Grad.Data {
				p.Grad.Data[i] = float32(i + 1)
			}
		}
	}
	// b moves the shards on: a's answer must bring b's update too.
	if _, err := b.Push(ctx, mb, nil, 1, AllShards); err != nil {
		t.Fatal(err)
	}
	before := testModel()
	pending := a.StartPush(ctx, PushRequest{Params: ma, To: AllShards, ReturnParameters: true, ComputedOn: a.Versions()})
	for i, p := range ma {
		// The gradients may change now (the next minibatch computes)...
		clear(p.Grad.Data)
		// ...but the values stay as they were until Wait.
		if !slices.Equal(p.Value.Data, before[i].Value.Data) {
			t.Fatalf("%s changed before Wait: %v", p.Name, p.Value.Data)
		}
	}
	r, err := pending.Wait()
	if err != nil || !r.Accepted || r.Duplicate || !r.Fresh {
		t.Fatalf("Wait: %+v, %v; want accepted and fresh", r, err)
	}
	for _, p := range ma {
		want := procs[shard.Of(p.Name, 2)].srv.Parameters()[p.Name]
		if !slices.Equal(p.Value.Data, want) {
			t.Errorf("%s = %v, the shard holds %v", p.Name, p.Value.Data, want)
		}
	}
	if v := a.Versions(); v[0] != procs[0].srv.Version() || v[1] != procs[1].srv.Version() || v[0] != 2 {
		t.Errorf("versions %v, shards at %d %d (want 2: b's push and a's)", v, procs[0].srv.Version(), procs[1].srv.Version())
	}
	if changed, err := a.Pull(ctx, ma); err != nil || changed {
		t.Errorf("pull after a fresh push: changed %v, %v", changed, err)
	}
	// Without ReturnParameters nothing is written and nothing is fresh.
	r, err = a.StartPush(ctx, PushRequest{Params: ma, To: AllShards}).Wait()
	if err != nil || r.Fresh {
		t.Errorf("plain push: %+v, %v", r, err)
	}
}

// TestStartPushSendsAtOnce: on one Go processor, as a worker runs, the
// sends of a push have begun by the time StartPush returns, so that an
// overlapped push travels while the caller computes rather than once it
// blocks (a whole step later).
func TestStartPushSendsAtOnce(t *testing.T) {
	_, addrs := startCluster(t, 1, 0.1)
	c := dial(t, addrs)
	ctx := ctxT(t, 10*time.Second)
	m := testModel()
	if err := c.PushModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for step := range 3 {
		p := c.StartPush(ctx, PushRequest{Params: m, ReturnParameters: true})
		// No yield between StartPush's return and this check.
		for _, sp := range p.shards {
			if !sp.begun.Load() {
				t.Errorf("step %d: shard %d's send had not begun when StartPush returned", step, sp.s.index)
			}
		}
		if _, err := p.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPushComputedOn: a push names the versions its gradients were
// computed on, not the ones the client holds when sending; a sync shard
// with no tolerance rejects it when they are stale.
func TestPushComputedOn(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := optimizer.NewSGD("sgd", 0.1, 0, false)
	srv, err := ps.NewServer(ps.Config{Index: 0, NumPS: 1, Optimizer: opt, Sync: true, GradsToWait: 1, LiveWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, []string{serve(t, srv, lis).addr})
	ctx := ctxT(t, 10*time.Second)
	m := testModel()
	if err := c.PushModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	old := c.Versions()
	if r, err := c.StartPush(ctx, PushRequest{Params: m, ReturnParameters: true}).Wait(); err != nil || !r.Accepted || !r.Fresh {
		t.Fatalf("first push: %+v, %v", r, err)
	}
	if r, err := c.StartPush(ctx, PushRequest{Params: m, ComputedOn: old}).Wait(); err != nil || r.Accepted {
		t.Fatalf("push computed on version %v after the shard moved to %d: %+v, %v; want rejected", old, srv.Version(), r, err)
	}
	if r, err := c.StartPush(ctx, PushRequest{Params: m, To: RejectedShards}).Wait(); err != nil || !r.Accepted {
		t.Fatalf("the redo, computed on the current version: %+v, %v", r, err)
	}
	if srv.Version() != 2 {
		t.Errorf("version %d, want 2", srv.Version())
	}
}

// TestAdoptRejectsForeignParameters: parameters answered by a push that
// are not this worker's (a re-sharded layout) are not written; the next
// pull fetches everything instead.
func TestAdoptRejectsForeignParameters(t *testing.T) {
	_, addrs := startCluster(t, 1, 0.1)
	c := dial(t, addrs)
	m := testModel()
	l, err := c.layoutFor(m)
	if err != nil {
		t.Fatal(err)
	}
	s := c.shards[0]
	s.version = 7
	resp := &pserverpb.PushGradientsResponse{Accepted: true, Version: 9,
		DenseParameters: []*pserverpb.Tensor{{Name: "other/kernel", Dims: []int64{1}, Content: make([]byte, 4)}}}
	if c.adopt(s, resp, l) {
		t.Fatal("adopted a parameter this worker does not have")
	}
	if !s.refetch || s.version != 7 || m[0].Value.Data[0] != 1 {
		t.Errorf("refetch %v version %d value %v: want a full pull next, nothing written", s.refetch, s.version, m[0].Value.Data[0])
	}
}

// TestBFloat16Transport: with bfloat16 transport the gradients reach the
// shard rounded to 8 significant bits, the shard keeps float32, and pulls
// and push answers bring its values back rounded the same way.
func TestBFloat16Transport(t *testing.T) {
	procs, addrs := startCluster(t, 1, 1)
	c, err := Dial(context.Background(), addrs, WithTransportDType(pserverpb.DType_BFLOAT16), WithBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t, 10*time.Second)
	m := []*nn.Param{param("w", []int{3}, 1.001, 2, 3)}
	if err := c.PushModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	if got := procs[0].srv.Parameters()["w"]; got[0] != 1.001 {
		t.Fatalf("the initial model travelled rounded: %v", got)
	}
	m[0].Grad.Data[0], m[0].Grad.Data[1], m[0].Grad.Data[2] = 0.0011, 0, 0 // 0.0011 is not a bfloat16
	r, err := c.StartPush(ctx, PushRequest{Params: m, ReturnParameters: true}).Wait()
	if err != nil || !r.Fresh {
		t.Fatalf("push: %+v, %v", r, err)
	}
	// Rounding to bfloat16 (none of these values is a tie).
	bf16 := func(f float32) float32 { return math.Float32frombits((math.Float32bits(f) + 0x8000) & 0xffff0000) }
	want := float32(1.001) - bf16(0.0011) // SGD, lr 1, applied in float32
	if got := procs[0].srv.Parameters()["w"][0]; got != want {
		t.Errorf("shard holds %v, want 1.001 - bf16(0.0011) = %v", got, want)
	}
	wantBF := bf16(want)
	if m[0].Value.Data[0] != wantBF || m[0].Value.Data[1] != 2 {
		t.Errorf("worker holds %v, want the shard's values in bfloat16: %v, 2, 3", m[0].Value.Data, wantBF)
	}
	m2 := []*nn.Param{param("w", []int{3})}
	c2, err := Dial(context.Background(), addrs, WithTransportDType(pserverpb.DType_BFLOAT16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	if _, err := c2.Pull(ctx, m2); err != nil || m2[0].Value.Data[0] != wantBF {
		t.Errorf("bfloat16 pull: %v, %v; want %v", m2[0].Value.Data, err, wantBF)
	}
	if _, err := Dial(context.Background(), addrs, WithTransportDType(9)); err == nil {
		t.Error("Dial accepted an unknown transport type")
	}
}

// The same pushes and pulls give the same values over direct connections
// and over gRPC, and a client of a PS that only serves gRPC falls back to
// it.
func TestTransportsAgree(t *testing.T) {
	_, addrs := startCluster(t, 2, 0.25)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := optimizer.NewSGD("sgd", 0.25, 0, false)
	srv, err := ps.NewServer(ps.Config{Index: 0, NumPS: 1, Optimizer: opt})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(rpc.ServerOptions()...)
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	ctx := ctxT(t, 20*time.Second)
	direct := dial(t, addrs)
	viaGRPC, err := Dial(ctx, addrs, WithGRPCOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer viaGRPC.Close()
	fallback := dial(t, []string{lis.Addr().String()})
	for _, c := range []*Client{direct, fallback} {
		if err := c.PushModel(ctx, testModel()); err != nil {
			t.Fatal(err)
		}
	}
	a, b, f := zeroValues(testModel()), zeroValues(testModel()), zeroValues(testModel())
	pullAll := func() {
		t.Helper()
		for i, c := range []*Client{direct, viaGRPC, fallback} {
			if _, err := c.Pull(ctx, [][]*nn.Param{a, b, f}[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	pullAll()
	for step := range 6 {
		// Pushes alternate between the transports; the fallback client
		// mirrors them on its own PS.
		c, m := direct, a
		if step%2 == 1 {
			c, m = viaGRPC, b
		}
		setGrads(m, float32(step+1))
		setGrads(f, float32(step+1))
		if r, err := c.StartPush(ctx, PushRequest{Params: m, ReturnParameters: step < 4}).Wait(); err != nil || !r.Accepted {
			t.Fatalf("step %d: %+v, %v", step, r, err)
		}
		if r, err := fallback.StartPush(ctx, PushRequest{Params: f, ReturnParameters: step < 4}).Wait(); err != nil || !r.Accepted {
			t.Fatalf("step %d, fallback: %+v, %v", step, r, err)
		}
	}
	pullAll()
	wantValues(t, values(b), values(a))
	wantValues(t, values(f), values(a))
	// 1 - 0.25 × (1+...+6) from each initial value.
	if got, want := a[3].Value.Data[0], float32(10-0.25*21); got != want {
		t.Errorf("out/bias = %v, want %v", got, want)
	}
	for _, s := range fallback.shards {
		if !s.direct.Unsupported() {
			t.Errorf("shard %d: the client did not notice that the PS only serves gRPC", s.index)
		}
	}
}
