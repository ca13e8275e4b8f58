package client

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/nn"
)

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
	procs, addrs, c, ctx, model := pushedCluster(t, 1, 0.5, 30*time.Second)
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
