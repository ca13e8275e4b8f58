package client

import (
	"net"
	"slices"
	"testing"
	"time"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/optimizer"
)

// startSyncPS serves shard index of numPS in sync SGD (one gradient an
// update, no staleness tolerated).
func startSyncPS(t *testing.T, index, numPS int) *psProc {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optimizer.NewSGD("sgd", 0.25, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ps.NewServer(ps.Config{Index: index, NumPS: numPS, Optimizer: opt, Sync: true, GradsToWait: 1, LiveWorkers: -1})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv, lis)
}

// A push rejected by one shard only is redone on that shard only: the
// shard that accepted it must not count the minibatch twice, neither its
// dense gradients nor its embedding rows.
func TestPushRejectedGoesToRejectingShardsOnly(t *testing.T) {
	for _, withRows := range []bool{false, true} {
		t.Run(map[bool]string{false: "dense", true: "with embedding rows"}[withRows], func(t *testing.T) {
			testPushRejected(t, withRows)
		})
	}
}

func testPushRejected(t *testing.T, withRows bool) {
	procs := []*psProc{startSyncPS(t, 0, 2), startSyncPS(t, 1, 2)}
	addrs := []string{procs[0].addr, procs[1].addr}
	ctx := ctxT(t, 10*time.Second)
	a, b := dial(t, addrs), dial(t, addrs)
	model := testModel()
	var tables []EmbeddingTable
	var rows []SparseGrad
	if withRows {
		// Ids 0 and 1: one row on each shard, starting at zero.
		tables = []EmbeddingTable{{Name: "tag", Dim: 2, Initializer: "zeros"}}
		rows = []SparseGrad{{Table: "tag", IDs: []int64{0, 1}, Values: []float32{1, 1, 1, 1}}}
	}
	if err := a.PushModel(ctx, model, tables...); err != nil {
		t.Fatal(err)
	}
	other := zeroValues(model)
	if _, err := b.Pull(ctx, other); err != nil {
		t.Fatal(err)
	}
	// b moves shard 1 (out/*) on: a's values of it become stale.
	if ok, err := b.Push(ctx, other[2:], nil, 1, AllShards); err != nil || !ok {
		t.Fatalf("b's push: %v %v", ok, err)
	}
	setGrads(model, 1)
	ok, err := a.Push(ctx, model, rows, 0, AllShards)
	if err != nil || ok {
		t.Fatalf("a's stale push: accepted=%v err=%v, want rejected", ok, err)
	}
	if v0, v1 := procs[0].srv.Version(), procs[1].srv.Version(); v0 != 1 || v1 != 1 {
		t.Fatalf("versions %d %d, want 1 (a applied) 1 (b only)", v0, v1)
	}
	// The worker re-pulls and redoes the minibatch.
	if _, err := a.Pull(ctx, model); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.Push(ctx, model, rows, 0, RejectedShards); err != nil || !ok {
		t.Fatalf("redo: accepted=%v err=%v", ok, err)
	}
	if v0, v1 := procs[0].srv.Version(), procs[1].srv.Version(); v0 != 1 || v1 != 2 {
		t.Fatalf("versions after the redo %d %d, want 1 (not pushed twice) 2", v0, v1)
	}
	if withRows {
		// SGD at 0.25 of a gradient of 1, applied once on each shard.
		for id, p := range procs {
			if got := p.srv.EmbeddingRows("tag")[int64(id)]; !slices.Equal(got, []float32{-0.25, -0.25}) {
				t.Errorf("shard %d: row %d is %v, want [-0.25 -0.25]", id, id, got)
			}
		}
	}
	// Nothing left rejected: a second redo sends nothing.
	if ok, err := a.Push(ctx, model, rows, 0, RejectedShards); err != nil || !ok {
		t.Fatalf("empty redo: %v %v", ok, err)
	}
	if v1 := procs[1].srv.Version(); v1 != 2 {
		t.Fatalf("empty redo pushed (version %d)", v1)
	}
	// SetLiveWorkers reaches every shard.
	if err := a.SetLiveWorkers(ctx, 2, 1, false); err != nil {
		t.Fatal(err)
	}
	for i, p := range procs {
		if live, _ := p.srv.LiveWorkers(); live != 2 {
			t.Errorf("shard %d: live workers %d, want 2", i, live)
		}
	}
}
