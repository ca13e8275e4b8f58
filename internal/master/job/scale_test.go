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

func launchedWorkers(rd Ready) []Launch { return launchesOf(rd, cluster.Worker) }

func launchesOf(rd Ready, role cluster.Role) []Launch {
	var ls []Launch
	for _, l := range rd.Launch {
		if l.Role == role {
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
	// It may call again before its stop lands (a heartbeat, a request
	// sent early): it is told to stop, not refused as unknown.
	wantReleased(h, 0)
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
	h.failover(running(cluster.PS, 0), running(cluster.Worker, 1))
	wantReleased(h, 0, 2, 3)
}

// wantReleased checks that workers let go are told to stop when they call,
// and that a worker the job never had is still refused.
func wantReleased(h *harness, ids ...int) {
	h.t.Helper()
	for _, id := range ids {
		if r := h.step(Heartbeat{Worker: id}); !r.Stop || !r.LetGo {
			h.t.Fatalf("worker %d let go: heartbeat answered %+v, want Stop", id, r)
		}
		if k := h.kind(id); k != task.KindDone {
			h.t.Fatalf("worker %d let go: GetTask answered %v, want DONE", id, k)
		}
	}
	h.wantRefused(Heartbeat{Worker: 99}, ErrUnknownWorker)
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

// plannedLeave forms a 3-member ring whose members each hold a task
// (worker 0's the oldest) and lowers the target to 2: worker 0 is to leave
// at a step boundary.
func plannedLeave(t *testing.T) (*harness, task.Task) {
	h := allReduceJob(t, 3, func(c *Config) { c.RecordsPerTask, c.Tasks.RecordsPerTask = 100, 100 })
	for _, w := range []int{0, 1, 0, 2, 1, 0} {
		h.join(w)
	}
	wantRing(t, h.status(2), "v3 [0@a0 1@a1 2@a2]")
	t0 := h.get(0)
	h.advance(time.Second)
	h.get(1)
	h.get(2)
	h.take()
	h.step(SetTarget{Workers: 2, Source: "test"})
	return h, t0
}

// TestPlannedLeave: a member of an AllReduce ring let go is not stopped
// mid-step. The version moves as a planned change (the members finish
// their step and leave together: RingStatus says Planned), the ring forms
// without the leaver as soon as the others check in, and the leaver,
// checking in at the boundary, is told to stop (LetGo) and is stopped.
// Its task waits for the new ring to settle (the ring's state may hold
// records of it the ledger lacks), then goes out again. No loss, no
// broken ring.
func TestPlannedLeave(t *testing.T) {
	h, t0 := plannedLeave(t)
	if rd := h.take(); len(rd.Stop) != 0 {
		t.Fatalf("stopped %v before it left its ring", rd.Stop)
	}
	if r := h.step(RingStatus{Worker: 1}).Ring; r.Version != 4 || r.Members != nil || !r.Planned {
		t.Fatalf("ring %+v, want v4 forming as a planned change", r)
	}
	// Still stepping: no new task, and no DONE (that would stop it between
	// two steps of the live ring).
	if k := h.kind(0); k != task.KindWait {
		t.Fatalf("the leaver asking for work got %v, want WAIT", k)
	}
	wantRing(t, h.join(1), "nil")
	wantRing(t, h.join(2), "v4 [1@a1 2@a2]") // no wait for the leaver
	if r := h.step(JoinRing{Worker: 0, Addr: "a0"}); !r.LetGo || r.Ring != nil {
		t.Fatalf("the leaver's check-in: %+v, want LetGo", r)
	}
	if got := stoppedIDs(h.take()); !slices.Equal(got, []int{0}) {
		t.Fatalf("stopped %v, want the leaver 0", got)
	}
	h.wantRefused(RingStatus{Worker: 0}, ErrUnknownWorker)
	if got := h.get(1); got.ID == t0.ID {
		t.Fatal("the leaver's task went out before the new ring settled")
	}
	h.step(SettleRing{Worker: 1, Version: 4})
	var again task.Task
	for again.ID != t0.ID {
		again = h.get(2)
	}
	s := h.summary()
	if w := s.Workers; w.ScaledDown != 1 || w.Lost != 0 || w.Relaunched != 0 {
		t.Fatalf("workers %+v: want 1 scaled down, none lost", w)
	}
	if s.Ring.Broken != 0 || s.Ring.WorldSize != 2 {
		t.Fatalf("ring %+v: want none broken, world size 2", s.Ring)
	}
}

// TestPlannedLeaveSurvivesFailover: a master that takes over while a
// member is leaving keeps the planned change and the leaver.
func TestPlannedLeaveSurvivesFailover(t *testing.T) {
	h, _ := plannedLeave(t)
	h.failover(running(cluster.Worker, 0), running(cluster.Worker, 1), running(cluster.Worker, 2))
	if r := h.step(RingStatus{Worker: 1}).Ring; !r.Planned {
		t.Fatalf("ring %+v after the failover, want the planned change kept", r)
	}
	h.join(1)
	wantRing(t, h.join(2), "v4 [1@a1 2@a2]")
	if r := h.step(JoinRing{Worker: 0, Addr: "a0"}); !r.LetGo {
		t.Fatalf("the leaver's check-in after the failover: %+v, want LetGo", r)
	}
}

// TestPlannedChangeBecomesUnplanned: while the members step towards the
// boundary, a break of their ring or the loss of one of them makes the
// change unplanned — they must leave the ring now — and counts as broken.
func TestPlannedChangeBecomesUnplanned(t *testing.T) {
	h, _ := plannedLeave(t)
	h.step(RingBroken{Worker: 2, Version: 3, Err: "EOF"})
	if r := h.step(RingStatus{Worker: 1}).Ring; r.Planned || r.Version != 4 {
		t.Fatalf("ring %+v after its live ring broke, want v4 unplanned", r)
	}
	if b := h.summary().Ring.Broken; b != 1 {
		t.Fatalf("%d broken, want 1", b)
	}

	h, _ = plannedLeave(t)
	h.exit(cluster.Worker, 2, cluster.Killed)
	if r := h.step(RingStatus{Worker: 1}).Ring; r.Planned {
		t.Fatalf("ring %+v after a stepping member was lost, want unplanned", r)
	}
	h.join(1)
	if r := h.step(JoinRing{Worker: 0, Addr: "a0"}); !r.LetGo {
		t.Fatalf("the leaver's check-in: %+v, want LetGo", r)
	}
	wantRing(t, h.status(1), "v4 [1@a1]")
}

// TestPlannedLeaverKeptOnScaleUp: a target raised again before the leaver
// reached its boundary keeps it; it re-joins as any member.
func TestPlannedLeaverKeptOnScaleUp(t *testing.T) {
	h, _ := plannedLeave(t)
	h.step(SetTarget{Workers: 3, Source: "test"})
	h.join(1)
	wantRing(t, h.join(2), "nil") // waits for 0 again
	wantRing(t, h.join(0), "v4 [0@a0 1@a1 2@a2]")
	if rd := h.take(); len(rd.Stop) != 0 || len(launchedWorkers(rd)) != 0 {
		t.Fatalf("stopped %v, launched %v: want neither", rd.Stop, rd.Launch)
	}
}

// TestPlannedJoinWaitsForTheBoundary: a newcomer's version is planned, so
// the ring waits for its members to finish their step — longer than the
// grace for a member that does not check in — then forms once one of
// them checks in and the rest follow (or the grace passes).
func TestPlannedJoinWaitsForTheBoundary(t *testing.T) {
	h := allReduceJob(t, 3)
	h.join(0)
	h.join(1)
	wantRing(t, h.join(0), "v2 [0@a0 1@a1]")
	wantRing(t, h.join(2), "nil")
	if r := h.step(RingStatus{Worker: 0}).Ring; !r.Planned {
		t.Fatalf("ring %+v: a join is a planned change", r)
	}
	h.advance(6 * time.Second) // past RingGrace (5 s), not past the boundary wait
	wantRing(t, h.join(2), "nil")
	wantRing(t, h.join(0), "nil") // 0 reached the boundary; 1 is due within the grace
	h.advance(6 * time.Second)
	wantRing(t, h.join(2), "v3 [0@a0 2@a2]") // 1 did not follow: left out
}

// TestAllReduceIdleOutsideTheRingGoesAtOnce: an AllReduce worker that is
// not stepping in a live ring (it never joined) is stopped at once.
func TestAllReduceIdleOutsideTheRingGoesAtOnce(t *testing.T) {
	h := allReduceJob(t, 3)
	h.join(0)
	h.join(1)
	wantRing(t, h.join(0), "v2 [0@a0 1@a1]")
	h.take()
	h.step(SetTarget{Workers: 2, Source: "test"})
	if got := stoppedIDs(h.take()); !slices.Equal(got, []int{2}) {
		t.Fatalf("stopped %v, want worker 2 (never in a ring) at once", got)
	}
	if r := h.step(RingStatus{Worker: 0}).Ring; r.Version != 2 || r.Members == nil {
		t.Fatalf("ring %+v: want v2 still formed", r)
	}
}
