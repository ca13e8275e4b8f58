package client

import (
	"slices"
	"testing"
	"time"

	"elasticdl/internal/ps/shard"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

// TestMinibatchPushes: a named minibatch reaches each shard once; a repeat
// is answered duplicate; Applied says what each shard holds, and a push
// can leave out the shards that hold its minibatch.
func TestMinibatchPushes(t *testing.T) {
	procs, _, c, ctx, model := pushedCluster(t, 2, 0.25, 10*time.Second)
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
