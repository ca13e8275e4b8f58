package client

import (
	"context"
	"testing"
	"time"
)

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
