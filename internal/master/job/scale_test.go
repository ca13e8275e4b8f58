package job

import (
	"slices"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

// scaleConfig: 4 workers at most, 10 tasks of 100 records.
func scaleConfig(c *Config) {
	c.NumWorkers = 4
	c.RecordsPerTask, c.Tasks.RecordsPerTask = 100, 100
}

func stoppedIDs(rd Ready) []int {
	var ids []int
	for _, s := range rd.Stop {
		if s.Role == cluster.Worker {
			ids = append(ids, s.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func launchedWorkers(rd Ready) []Launch {
	var ls []Launch
	for _, l := range rd.Launch {
		if l.Role == cluster.Worker {
			ls = append(ls, l)
		}
	}
	return ls
}

// TestScaleDownLetsGoTheLeastUnfinishedWork: a lower target lets go of
// the pending worker and the idle one at once, then of the worker whose
// task is closest to done once it has reported it; the worker that just
// took a task keeps it. Nothing is lost, nothing relaunched, and the
// ledger stays exact.
func TestScaleDownLetsGoTheLeastUnfinishedWork(t *testing.T) {
	h := newHarness(t, scaleConfig)
	h.take()
	for _, id := range []int{0, 1, 2} { // worker 3 stays pending
		h.running(cluster.Worker, id)
	}
	t0 := h.get(0)
	h.advance(time.Second)
	t1 := h.get(1)
	h.step(SetTarget{Workers: 1, Source: "test"})
	if got := stoppedIDs(h.take()); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("stopped %v at once, want the pending worker 3 and the idle worker 2", got)
	}
	// Worker 0's task is the older: it goes once it has reported it.
	if k := h.kind(0); k != task.KindWait {
		t.Fatalf("a leaving worker that holds a task got %v, want WAIT", k)
	}
	h.train(0, t0, 1)
	if k := h.kind(0); k != task.KindDone {
		t.Fatalf("a leaving worker that reported its task got %v, want DONE", k)
	}
	if got := stoppedIDs(h.take()); !slices.Equal(got, []int{0}) {
		t.Fatalf("stopped %v, want worker 0 once its task was reported", got)
	}
	h.train(1, t1, 2)
	for v := int64(3); ; v++ {
		a := h.step(GetTask{Worker: 1}).Assignment
		if a.Kind == task.KindDone {
			break
		}
		h.train(1, a.Task, v)
	}
	rd := h.take()
	if len(rd.Launch) != 0 {
		t.Fatalf("launched %v: a job at its target replaces nobody", rd.Launch)
	}
	s := h.summary()
	if s.Workers.ScaledDown != 3 || s.Workers.Lost != 0 || s.Workers.Relaunched != 0 || s.Tasks.Requeued != 0 {
		t.Fatalf("workers %+v tasks %+v: want 3 let go, none lost, relaunched or requeued", s.Workers, s.Tasks)
	}
	assertEpochExact(t, s, 1000)
}

// leavingAfterTask is a 4-worker job scaled to 1: workers 2 and 3 (idle)
// stopped, worker 0 (the older task, t0) leaving once it reports it,
// worker 1 kept.
func leavingAfterTask(t *testing.T) (*harness, task.Task) {
	t.Helper()
	h := newHarness(t, scaleConfig)
	h.runAll()
	t0 := h.get(0)
	h.advance(time.Second)
	h.get(1)
	h.step(SetTarget{Workers: 1, Source: "test"})
	if got := stoppedIDs(h.take()); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("stopped %v, want the idle workers 2 and 3", got)
	}
	return h, t0
}

// TestScaleUpKeepsLeavingWorkersFirst: a target raised while workers are
// leaving keeps them (they run) before it launches new ones, into the
// lowest free slots.
func TestScaleUpKeepsLeavingWorkersFirst(t *testing.T) {
	h, _ := leavingAfterTask(t)
	h.step(SetTarget{Workers: 3, Source: "test"})
	rd := h.take()
	ls := launchedWorkers(rd)
	if len(ls) != 1 || ls[0].Index != 2 || len(rd.Stop) != 0 {
		t.Fatalf("launched %+v stopped %v: want worker 0 kept and one launched in slot 2", ls, rd.Stop)
	}
	if k := h.kind(0); k != task.KindTask && k != task.KindWait {
		t.Fatalf("worker 0, kept, got %v", k)
	}
	if _, leaving := h.j.draining[0]; leaving {
		t.Fatal("worker 0 still leaving")
	}
}

// TestLostWorkersAndTheTarget: a worker lost while the job runs fewer than
// its target is replaced; one lost while it runs its target (a leaving
// worker) is not.
func TestLostWorkersAndTheTarget(t *testing.T) {
	h := newHarness(t, scaleConfig)
	h.runAll()
	h.get(0)
	h.get(1)
	h.step(SetTarget{Workers: 2, Source: "test"}) // 2, 3 go at once
	h.take()
	h.exit(cluster.Worker, 1, cluster.Preempted)
	if ls := launchedWorkers(h.take()); len(ls) != 1 || ls[0].Index != 1 {
		t.Fatalf("launched %+v after a loss below the target, want a relaunch in slot 1", ls)
	}
	h.step(SetTarget{Workers: 1, Source: "test"}) // the relaunched worker, pending, goes
	if got := stoppedIDs(h.take()); !slices.Equal(got, []int{4}) {
		t.Fatalf("stopped %v, want the pending relaunched worker 4", got)
	}
	h.exit(cluster.Worker, 0, cluster.Preempted)
	if ls := launchedWorkers(h.take()); len(ls) != 1 {
		t.Fatalf("launched %+v after the last worker was lost below the target of 1, want one", ls)
	}
	if s := h.summary(); s.Workers.Lost != 2 || s.Workers.Relaunched != 2 {
		t.Fatalf("workers %+v", s.Workers)
	}
}

// TestLeavingWorkerLostIsNotReplaced: a worker lost while it was leaving
// is not replaced when the job runs its target without it; its task goes
// back to the queue.
func TestLeavingWorkerLostIsNotReplaced(t *testing.T) {
	h, _ := leavingAfterTask(t)
	h.exit(cluster.Worker, 0, cluster.Preempted)
	rd := h.take()
	if len(launchedWorkers(rd)) != 0 {
		t.Fatalf("launched %+v: the job runs its target of 1", rd.Launch)
	}
	if s := h.summary(); s.Workers.Lost != 1 || s.Workers.Relaunched != 0 || s.Tasks.Requeued != 1 {
		t.Fatalf("workers %+v tasks %+v: want the leaving worker lost, not relaunched, its task requeued", s.Workers, s.Tasks)
	}
}

// TestMinWorkersGateTheStart: training starts once MinWorkers run.
func TestMinWorkersGateTheStart(t *testing.T) {
	h := newHarness(t, func(c *Config) { scaleConfig(c); c.MinWorkers = 2 })
	h.take()
	h.running(cluster.Worker, 0)
	if k := h.kind(0); k != task.KindWait {
		t.Fatalf("one worker of MinWorkers 2 got %v, want WAIT", k)
	}
	h.running(cluster.Worker, 1)
	h.get(0)
	// Once started, training goes on below the bound (workers lost).
	h.exit(cluster.Worker, 1, cluster.Preempted)
	h.get(0)
}

// TestScaleStateSurvivesFailover: the target and the leaving workers are
// part of the persisted state.
func TestScaleStateSurvivesFailover(t *testing.T) {
	h, t0 := leavingAfterTask(t)
	h.failover(running(cluster.PS, 0), running(cluster.Worker, 0), running(cluster.Worker, 1))
	if h.j.Target() != 1 || h.j.resize.cause != "target" {
		t.Fatalf("target %d, resize %+v after the failover, want 1 and the target change still timed", h.j.Target(), h.j.resize)
	}
	h.train(0, t0, 1)
	if k := h.kind(0); k != task.KindDone {
		t.Fatalf("the leaving worker got %v after the failover, want DONE", k)
	}
	if rd := h.take(); len(launchedWorkers(rd)) != 0 || !slices.Equal(stoppedIDs(rd), []int{0}) {
		t.Fatalf("after the failover: launched %v stopped %v", rd.Launch, rd.Stop)
	}
}

// TestSetTargetClampsToTheBounds: a target is kept within [MinWorkers,
// NumWorkers], and an unchanged one decides nothing.
func TestSetTargetClampsToTheBounds(t *testing.T) {
	h := newHarness(t, func(c *Config) { scaleConfig(c); c.MinWorkers = 2 })
	h.runAll()
	h.step(SetTarget{Workers: 0, Source: "test"})
	if h.j.Target() != 2 {
		t.Fatalf("target %d after asking 0, want MinWorkers 2", h.j.Target())
	}
	if got := stoppedIDs(h.take()); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("stopped %v, want the 2 newest idle workers", got)
	}
	h.step(SetTarget{Workers: 99, Source: "test"})
	rd := h.take()
	if h.j.Target() != 4 || len(launchedWorkers(rd)) != 2 {
		t.Fatalf("target %d, launched %v after asking 99: want NumWorkers 4, 2 launched", h.j.Target(), rd.Launch)
	}
	h.step(SetTarget{Workers: 7, Source: "test"})
	if rd := h.take(); len(rd.Launch)+len(rd.Stop)+len(rd.Notices) != 0 {
		t.Fatalf("an unchanged target decided %+v", rd)
	}
	if s := h.summary(); s.Workers.ScaledDown != 2 || s.Workers.ScaledUp != 2 || s.Workers.Lost != 0 {
		t.Fatalf("workers %+v", s.Workers)
	}
}

// TestMinWorkersOutOfReachFailsTheJob: a job whose workers, lost before
// training started, leave fewer than MinWorkers fails with a clear error
// rather than wait for ever.
func TestMinWorkersOutOfReachFailsTheJob(t *testing.T) {
	h := newHarness(t, func(c *Config) { scaleConfig(c); c.MinWorkers = 4; c.Policy = policyConfig(0, 4) })
	h.runAll()
	h.exit(cluster.Worker, 3, cluster.Failed) // not relaunched: no failure relaunches
	if h.j.Phase() != Failed || h.j.Err() == nil || !strings.Contains(h.j.Err().Error(), "--min_workers") {
		t.Fatalf("phase %v, err %v: want the job failed naming --min_workers", h.j.Phase(), h.j.Err())
	}
}

// TestResizeTiming: a loss opens a resize, and so does a target change;
// changes that follow before the job trains at its size count as one; a
// resize ends on the first training report with every worker the job aims
// for running and none leaving — not while the replacement is pending.
func TestResizeTiming(t *testing.T) {
	h := newHarness(t, scaleConfig)
	h.runAll()
	t0, t1 := h.get(0), h.get(1)
	h.get(2)
	h.get(3)
	h.exit(cluster.Worker, 3, cluster.Preempted) // relaunched as worker 4, pending
	h.take()
	h.advance(2 * time.Second)
	h.train(0, t0, 1) // worker 4 pending: not at size yet
	if rd := h.take(); len(rd.Resized) != 0 {
		t.Fatalf("resize ended with the replacement pending: %+v", rd.Resized)
	}
	h.advance(time.Second)
	h.step(SetTarget{Workers: 3, Source: "test"}) // the pending replacement goes: one resize still
	h.take()
	h.advance(time.Second)
	h.train(1, t1, 2)
	rd := h.take()
	if len(rd.Resized) != 1 || rd.Resized[0].Cause != "lost" || rd.Resized[0].Duration != 4*time.Second {
		t.Fatalf("resized %+v, want one, caused by the loss, of 4 s", rd.Resized)
	}
	h.step(SetTarget{Workers: 4, Source: "test"}) // a new worker, pending
	h.take()
	h.running(cluster.Worker, 5)
	h.advance(1500 * time.Millisecond)
	h.train(0, h.get(0), 3)
	rd = h.take()
	if len(rd.Resized) != 1 || rd.Resized[0].Cause != "target" || rd.Resized[0].Duration != 1500*time.Millisecond {
		t.Fatalf("resized %+v, want one, caused by the target, of 1.5 s", rd.Resized)
	}
	if s := h.summary(); len(s.Resizes) != 2 || s.Resizes[0].Seconds != 4 || s.Resizes[1].Cause != "target" {
		t.Fatalf("summary resizes %+v", s.Resizes)
	}
}
