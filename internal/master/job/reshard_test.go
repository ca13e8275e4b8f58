package job

import (
	"errors"
	"slices"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

// psJob is a PS job of 1 shard and 2 workers, all running, with 10
// training tasks of 100 records (minibatch 100: one minibatch a task).
func psJob(t *testing.T, mutate ...func(*Config)) *harness {
	h := newHarness(t, func(c *Config) {
		c.RecordsPerTask, c.Tasks.RecordsPerTask, c.MinibatchSize = 100, 100, 100
		for _, m := range mutate {
			m(c)
		}
	})
	h.runAll()
	return h
}

// shardsHolding is what every shard holds when tasks are wholly applied.
func shardsHolding(shards int, tasks ...task.Task) AppliedFound {
	sh := ShardMinibatches{Tasks: map[int64][][2]int32{}}
	for _, t := range tasks {
		sh.Tasks[t.ID] = [][2]int32{{0, 1}}
	}
	f := AppliedFound{Reshard: true}
	for range shards {
		f.Shards = append(f.Shards, sh)
	}
	return f
}

func psLaunches(rd Ready) []Launch { return launchesOf(rd, cluster.PS) }

// TestReshardGrowsAndShrinks: a PS target pauses new tasks until the held
// ones are in, checks that the shards agree, launches the new shard (of
// the new layout) and waits for it to run, moves the layout, and resumes;
// shrinking stops the shard no longer in the layout. Nothing is counted
// lost, and the summary keeps both re-shards.
func TestReshardGrowsAndShrinks(t *testing.T) {
	h := psJob(t)
	t0 := h.get(0)
	h.step(SetPSTarget{PS: 2, Source: "test"})
	if k := h.kind(1); k != task.KindWait {
		t.Fatalf("a worker asking while re-sharding got %v, want WAIT", k)
	}
	h.step(Tick{})
	if rd := h.take(); rd.CheckApplied != nil {
		t.Fatal("asked the shards while a task is held")
	}
	h.train(0, t0, 1)
	rd := h.take()
	if rd.CheckApplied == nil || !rd.CheckApplied.Reshard {
		t.Fatalf("no check of the shards once nothing is held: %+v", rd.CheckApplied)
	}
	f := shardsHolding(1, t0)
	f.Gen = rd.CheckApplied.Gen
	h.step(f)
	rd = h.take()
	ls := psLaunches(rd)
	if len(ls) != 1 || ls[0].Index != 1 || ls[0].Shards != 2 {
		t.Fatalf("launched %+v, want PS 1 of a 2-shard layout", ls)
	}
	if rd.Reshard != nil {
		t.Fatal("moved the layout before the new shard runs")
	}
	h.running(cluster.PS, ls[0].ID)
	rd = h.take()
	if rd.Reshard == nil || *rd.Reshard != (Reshard{Layout: 1, From: 1, To: 2}) {
		t.Fatalf("reshard %+v, want layout 1: 1 → 2", rd.Reshard)
	}
	if k := h.kind(1); k != task.KindWait {
		t.Fatalf("a task handed out while the layout moves: %v", k)
	}
	h.advance(2 * time.Second)
	h.step(ReshardDone{Layout: 1})
	if n, l := h.j.NumPS(); n != 2 || l != 1 {
		t.Fatalf("NumPS %d layout %d, want 2 and 1", n, l)
	}
	t1 := h.get(1)

	// 2 → 1: PS 1 stops once the layout moved.
	h.step(SetPSTarget{PS: 1, Source: "test"})
	h.train(1, t1, 2)
	rd = h.take()
	f = shardsHolding(2, t0, t1)
	f.Gen = rd.CheckApplied.Gen
	h.step(f)
	rd = h.take()
	if rd.Reshard == nil || *rd.Reshard != (Reshard{Layout: 2, From: 2, To: 1}) || len(psLaunches(rd)) != 0 {
		t.Fatalf("reshard %+v, launches %+v: want layout 2: 2 → 1 and no launch", rd.Reshard, rd.Launch)
	}
	h.step(ReshardDone{Layout: 2})
	rd = h.take()
	if len(rd.Stop) != 1 || rd.Stop[0] != (StopInstance{Role: cluster.PS, ID: ls[0].ID}) {
		t.Fatalf("stopped %+v, want PS 1", rd.Stop)
	}
	h.exit(cluster.PS, ls[0].ID, cluster.Deleted) // its exit is no loss
	s := h.summary()
	if s.PS.Lost != 0 || len(s.PS.Reshards) != 2 || s.PS.Reshards[0].To != 2 || s.PS.Reshards[1].To != 1 || s.PS.Reshards[0].Seconds < 2 {
		t.Fatalf("PS %+v", s.PS)
	}
	h.get(0)
}

// TestReshardFinishesTakenBackWorkFirst: while the job re-shards, a task
// taken back from a lost worker (the shards may hold part of it) still
// goes out, and fresh ones do not; a done task a shard lacks (it restored
// an older checkpoint) is reopened and trained before the layout moves.
func TestReshardFinishesTakenBackWorkFirst(t *testing.T) {
	h := psJob(t)
	t0 := h.get(0)
	h.train(0, t0, 1)
	t1 := h.get(1)
	h.step(SetPSTarget{PS: 2, Source: "test"})
	h.exit(cluster.Worker, 1, cluster.Killed)
	if again := h.get(0); again.ID != t1.ID {
		t.Fatalf("got task %d while re-sharding, want the taken-back %d", again.ID, t1.ID)
	}
	if k := h.kind(0); k != task.KindWait {
		t.Fatalf("a fresh task went out while re-sharding: %v", k)
	}
	h.train(0, t1, 2)
	rd := h.take()
	// Shard 0 lacks t0: it restored an older checkpoint.
	f := AppliedFound{Gen: rd.CheckApplied.Gen, Reshard: true, Shards: []ShardMinibatches{{Tasks: map[int64][][2]int32{t1.ID: {{0, 1}}}}}}
	h.step(f)
	if rd := h.take(); len(psLaunches(rd)) != 0 {
		t.Fatal("launched the new shard while a shard lacks a done task")
	}
	if again := h.get(0); again.ID != t0.ID {
		t.Fatalf("got task %d, want the reopened %d", again.ID, t0.ID)
	}
	h.train(0, t0, 3)
	rd = h.take()
	f = shardsHolding(1, t0, t1)
	f.Gen = rd.CheckApplied.Gen
	h.step(f)
	if ls := psLaunches(h.take()); len(ls) != 1 {
		t.Fatalf("launched %+v, want the new shard", ls)
	}
	if s := h.summary(); s.Tasks.Reopened != 1 || s.RecordsRequeuedForRollback != 100 {
		t.Fatalf("reopened %d, requeued for rollback %d: want 1 and 100", s.Tasks.Reopened, s.RecordsRequeuedForRollback)
	}
}

// toMoving takes an idle 1-PS job to a re-shard to 2 that the shell is
// asked to carry out, and returns the new shard's launch.
func toMoving(t *testing.T, h *harness) Launch {
	t.Helper()
	h.step(SetPSTarget{PS: 2, Source: "test"})
	rd := h.take()
	f := shardsHolding(1)
	f.Gen = rd.CheckApplied.Gen
	h.step(f)
	l := psLaunches(h.take())[0]
	h.running(cluster.PS, l.ID)
	if h.take().Reshard == nil {
		t.Fatal("no reshard asked")
	}
	return l
}

// TestReshardFailures: a failure to stage is tried again after a while
// (the old layout still serves), and given up after maxReshardFailures
// (the new shard stops, training goes on with the old layout); a failure
// after a shard committed fails the job.
func TestReshardFailures(t *testing.T) {
	h := psJob(t)
	l := toMoving(t, h)
	for i := range maxReshardFailures {
		h.step(ReshardDone{Layout: 1, Err: errors.New("PS 1 unreachable")})
		if i == maxReshardFailures-1 {
			break
		}
		h.step(Tick{})
		if h.take().Reshard != nil {
			t.Fatal("tried again at once")
		}
		h.advance(checkRetry)
		h.step(Tick{})
		if h.take().Reshard == nil {
			t.Fatalf("try %d: not tried again", i+2)
		}
	}
	rd := h.take()
	if len(rd.Stop) != 1 || rd.Stop[0].ID != l.ID || !slices.ContainsFunc(rd.Notices, func(n Notice) bool { return n.Reason == "ReshardFailed" }) {
		t.Fatalf("after giving up: stopped %+v, notices %+v", rd.Stop, rd.Notices)
	}
	if n, _ := h.j.NumPS(); n != 1 || h.kind(0) != task.KindTask {
		t.Fatal("training does not go on with the old layout")
	}

	h = psJob(t)
	toMoving(t, h)
	h.step(ReshardDone{Layout: 1, Err: errors.New("commit on PS 1: unavailable"), Committed: true})
	if h.j.Err() == nil {
		t.Fatal("a re-shard that failed half-committed did not fail the job")
	}
}

// TestReshardRefusedTargets: no PS, sync SGD, out of bounds: a Warning,
// and training goes on.
func TestReshardRefusedTargets(t *testing.T) {
	for _, c := range []struct {
		what   string
		mutate func(*Config)
		ps     int
	}{
		{"sync SGD", func(c *Config) { c.SyncSGD = true }, 2},
		{"zero", nil, -1},
		{"too many", nil, MaxPS + 1},
	} {
		var muts []func(*Config)
		if c.mutate != nil {
			muts = append(muts, c.mutate)
		}
		h := psJob(t, muts...)
		h.take()
		h.step(SetPSTarget{PS: c.ps, Source: "test"})
		rd := h.take()
		if !slices.ContainsFunc(rd.Notices, func(n Notice) bool { return n.Warning && n.Reason == "PSTargetInvalid" }) {
			t.Errorf("%s: notices %+v, want PSTargetInvalid", c.what, rd.Notices)
		}
		if h.kind(0) != task.KindTask {
			t.Errorf("%s: training paused", c.what)
		}
	}
	h := allReduceJob(t, 2)
	h.step(SetPSTarget{PS: 2, Source: "test"})
	if !slices.ContainsFunc(h.take().Notices, func(n Notice) bool { return n.Reason == "PSTargetInvalid" }) {
		t.Error("AllReduce: no PSTargetInvalid")
	}
}

// TestReshardSurvivesFailover: a master that takes over while the layout
// moves asks the shell again (staging is idempotent by layout), and keeps
// the new layout after it is done.
func TestReshardSurvivesFailover(t *testing.T) {
	h := psJob(t)
	l := toMoving(t, h)
	h.failover(running(cluster.PS, 0), running(cluster.PS, l.ID), running(cluster.Worker, 0), running(cluster.Worker, 1))
	h.step(Tick{})
	if rd := h.take(); rd.Reshard == nil || rd.Reshard.Layout != 1 {
		t.Fatalf("after the failover: reshard %+v, want layout 1 asked again", rd.Reshard)
	}
	h.step(ReshardDone{Layout: 1})
	h.failover(running(cluster.PS, 0), running(cluster.PS, l.ID), running(cluster.Worker, 0), running(cluster.Worker, 1))
	if n, layout := h.j.NumPS(); n != 2 || layout != 1 {
		t.Fatalf("after a second failover: %d PS, layout %d", n, layout)
	}
	if h.kind(0) != task.KindTask {
		t.Fatal("no task after the re-shard")
	}
}

// TestReshardDroppedWhenTrainingEnds: a target that arrives with the last
// tasks held is dropped once they are in (nothing left to train faster).
func TestReshardDroppedWhenTrainingEnds(t *testing.T) {
	h := psJob(t, func(c *Config) { c.Tasks.Training[0].Records = 200 })
	a, b := h.get(0), h.get(1)
	h.step(SetPSTarget{PS: 2, Source: "test"})
	h.train(0, a, 1)
	h.train(1, b, 2)
	rd := h.take()
	if rd.Reshard != nil || len(psLaunches(rd)) != 0 {
		t.Fatalf("re-sharded after training ended: %+v", rd)
	}
	if h.j.resharding() {
		t.Fatal("still re-sharding")
	}
}
