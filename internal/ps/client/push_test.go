package client

import (
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/ps/shard"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

func TestInvalidPush(t *testing.T) {
	procs, addrs, c, ctx, model := pushedCluster(t, 1, 0.5, 10*time.Second)
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
	_, _, c, ctx, m := pushedCluster(t, 1, 0.1, 10*time.Second)
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
