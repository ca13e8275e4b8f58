package client

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"elasticdl/nn"
)

func TestOneShard(t *testing.T) {
	procs, addrs, c, ctx, model := pushedCluster(t, 1, 0.5, 10*time.Second)
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
	procs, addrs, c, ctx, model := pushedCluster(t, 2, 0.25, 10*time.Second)
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
