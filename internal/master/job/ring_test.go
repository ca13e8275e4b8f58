package job

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

func ringOf(r *Ring) string {
	if r == nil {
		return "nil"
	}
	if r.Members == nil {
		return fmt.Sprintf("v%d forming", r.Version)
	}
	var ws []string
	for _, m := range r.Members {
		ws = append(ws, fmt.Sprintf("%d@%s", m.Worker, m.Addr))
	}
	return fmt.Sprintf("v%d [%s]", r.Version, strings.Join(ws, " "))
}

func allReduceJob(t *testing.T, workers int, mutate ...func(*Config)) *harness {
	h := newHarness(t, func(c *Config) {
		c.AllReduce, c.RingGrace, c.NumPS, c.NumWorkers = true, 5*time.Second, 0, workers
		c.HeartbeatTimeout = time.Hour
		for _, m := range mutate {
			m(c)
		}
	})
	for w := 0; w < workers; w++ {
		h.running(cluster.Worker, w)
	}
	return h
}

func (h *harness) join(w int) string {
	h.t.Helper()
	return ringOf(h.step(JoinRing{Worker: w, Addr: fmt.Sprintf("a%d", w)}).Ring)
}

func (h *harness) status(w int) string {
	h.t.Helper()
	return ringOf(h.step(RingStatus{Worker: w}).Ring)
}

func wantRing(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("ring %s, want %s", got, want)
	}
}

func TestRingRefusals(t *testing.T) {
	h := newHarness(t, nil)
	if _, err := h.try(JoinRing{Worker: 0, Addr: "a"}); !errors.Is(err, ErrRejected) {
		t.Fatalf("JoinRing in a PS job: %v", err)
	}
	h = allReduceJob(t, 2)
	if _, err := h.try(JoinRing{Worker: 0}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("JoinRing without an address: %v", err)
	}
	h.wantRefused(JoinRing{Worker: 7, Addr: "a7"}, ErrUnknownWorker)
	h.wantRefused(RingStatus{Worker: 7}, ErrUnknownWorker)
	h.wantRefused(RingBroken{Worker: 7, Version: 1}, ErrUnknownWorker)
}

// The first worker forms a ring of one at once (no wait for the others);
// each newcomer makes the ring re-form, which forms as soon as every member
// checked in again; a retried JoinRing changes nothing.
func TestRingGrowsAsWorkersJoin(t *testing.T) {
	h := allReduceJob(t, 3)
	wantRing(t, h.join(0), "v1 [0@a0]")
	wantRing(t, h.join(0), "v1 [0@a0]")
	wantRing(t, h.join(1), "nil") // forming v2: worker 0 must check in
	wantRing(t, h.status(0), "v2 forming")
	wantRing(t, h.join(0), "v2 [0@a0 1@a1]")
	wantRing(t, h.status(1), "v2 [0@a0 1@a1]")
	wantRing(t, h.join(2), "nil")
	wantRing(t, h.join(1), "nil")
	wantRing(t, h.join(0), "v3 [0@a0 1@a1 2@a2]")
	s := h.j.Summary(0)
	if s.Ring == nil || s.Ring.Versions != 3 || s.Ring.MaxWorldSize != 3 || s.Ring.WorldSize != 3 {
		t.Fatalf("ring summary %+v", s.Ring)
	}
	if snap := h.j.Snapshot(); snap.RingVersion != 3 || snap.WorldSize != 3 {
		t.Fatalf("snapshot ring v%d size %d", snap.RingVersion, snap.WorldSize)
	}
}

// A member lost (process exit, preemption) makes the ring re-form without
// it as soon as the survivors check in; their late reports about the old
// version change nothing.
func TestRingDropsALostMember(t *testing.T) {
	h := allReduceJob(t, 3)
	h.join(0)
	h.join(1)
	h.join(0)
	h.join(2)
	h.join(1)
	wantRing(t, h.join(0), "v3 [0@a0 1@a1 2@a2]")
	h.exit(cluster.Worker, 1, cluster.Killed)
	wantRing(t, h.status(0), "v4 forming")
	h.step(RingBroken{Worker: 2, Version: 3, Err: "EOF"}) // stale: ignored
	wantRing(t, h.join(2), "nil")
	wantRing(t, h.join(0), "v4 [0@a0 2@a2]")
	// The replacement joins later: one more version.
	h.running(cluster.Worker, 3)
	wantRing(t, h.join(3), "nil")
	h.join(0)
	wantRing(t, h.join(2), "v5 [0@a0 2@a2 3@a3]")
}

// A member that freezes (SIGSTOP: the backend still says it runs) holds a
// re-forming ring up for RingGrace at most; then the ring forms without
// it, and it re-joins when it comes back.
func TestRingLeavesOutAFrozenMember(t *testing.T) {
	h := allReduceJob(t, 3)
	for _, w := range []int{0, 1, 0, 2, 1, 0} {
		h.join(w)
	}
	wantRing(t, h.status(2), "v3 [0@a0 1@a1 2@a2]")
	h.step(RingBroken{Worker: 0, Version: 3, Err: "read from worker 2: i/o timeout"})
	h.step(RingBroken{Worker: 1, Version: 3, Err: "i/o timeout"}) // the same break, already known
	wantRing(t, h.join(0), "nil")
	wantRing(t, h.join(1), "nil")
	h.advance(4 * time.Second)
	h.step(Tick{})
	wantRing(t, h.status(0), "v4 forming")
	h.advance(2 * time.Second)
	h.step(Tick{})
	wantRing(t, h.status(0), "v4 [0@a0 1@a1]")
	// SIGCONT: its ring is gone; it re-joins.
	wantRing(t, h.status(2), "v4 [0@a0 1@a1]")
	wantRing(t, h.join(2), "nil")
	h.join(0)
	wantRing(t, h.join(1), "v5 [0@a0 1@a1 2@a2]")
}

// World size 1 works: the last member re-forms alone.
func TestRingOfOne(t *testing.T) {
	h := allReduceJob(t, 2)
	h.join(0)
	h.join(1)
	h.join(0)
	h.exit(cluster.Worker, 0, cluster.Preempted)
	wantRing(t, h.join(1), "v3 [1@a1]")
	h.step(RingBroken{Worker: 1, Version: 3, Err: "spurious"})
	wantRing(t, h.join(1), "v4 [1@a1]")
}

// An AllReduce job's model lives in its workers: when the tasks are done
// the workers are told so, and the first member's upload is saved; every
// member's checksum is kept for the summary. A worker that was never in a
// ring holds no trained model and cannot upload.
func TestAllReduceModelUpload(t *testing.T) {
	h := allReduceJob(t, 3) // worker 2 never joins
	h.join(0)
	h.join(1)
	h.join(0)
	t1, t2 := h.get(0), h.get(1)
	h.train(0, t1, 3)
	h.train(1, t2, 3)
	if rd := h.take(); h.j.Phase() != Uploading || rd.Ended || rd.Save != nil {
		t.Fatalf("phase %v, ready %+v: want uploading, the loop still running", h.j.Phase(), rd)
	}
	if k := h.kind(0); k != task.KindDone {
		t.Fatalf("worker told %v, want done", k)
	}
	h.wantRefused(ModelUploaded{Worker: 2, Checksum: 1}, ErrRejected)
	h.step(ModelUploaded{Worker: 1, Version: 3, Checksum: 77})
	rd := h.take()
	if h.j.Phase() != Saving || !rd.Ended || rd.Save == nil || !rd.Save.Model || rd.Save.Uploaded != 1 {
		t.Fatalf("phase %v, ready %+v: want saving worker 1's model", h.j.Phase(), rd)
	}
	h.step(ModelUploaded{Worker: 0, Version: 3, Checksum: 77})
	h.step(Saved{ModelPath: "m", ModelVersion: 3})
	s := h.j.Summary(0)
	if s.Ring == nil || len(s.Ring.Checksums) != 2 || s.Ring.Checksums[0].Checksum != s.Ring.Checksums[1].Checksum {
		t.Fatalf("ring summary %+v", s.Ring)
	}
}

func TestAllReduceUploadTimeout(t *testing.T) {
	h := allReduceJob(t, 1)
	h.join(0)
	h.train(0, h.get(0), 1)
	h.train(0, h.get(0), 2)
	h.j.cfg.UploadTimeout = time.Minute
	h.advance(2 * time.Minute)
	h.step(Tick{})
	if h.j.Phase() != Failed || !strings.Contains(h.j.Err().Error(), "no worker uploaded") {
		t.Fatalf("phase %v err %v", h.j.Phase(), h.j.Err())
	}
}

// Records committed by a worker lost mid-task are not trained again: its
// replacement gets the task with them done.
func TestCommittedRecordsSurviveALoss(t *testing.T) {
	h := allReduceJob(t, 2)
	tk := h.get(0)
	h.step(CommitTask{Worker: 0, TaskID: tk.ID, Done: 128})
	h.wantRefused(CommitTask{Worker: 1, TaskID: tk.ID, Done: 256}, ErrRejected)
	h.step(CommitTask{Worker: 0, TaskID: tk.ID, Done: 64}) // behind: changes nothing
	h.exit(cluster.Worker, 0, cluster.Killed)
	again := h.get(1)
	if again.ID != tk.ID || again.Done != 128 {
		t.Fatalf("got %+v, want task %d with 128 records done", again, tk.ID)
	}
}

// A ring member lost while holding a task: its task waits for the new ring
// to settle, whose members commit what of it their agreed state includes;
// then it goes back to todo with those records done.
func TestLostMemberSettles(t *testing.T) {
	h := allReduceJob(t, 3)
	for _, w := range []int{0, 1, 0, 2, 1, 0} {
		h.join(w)
	}
	tk := h.get(2)
	h.step(CommitTask{Worker: 2, TaskID: tk.ID, Done: 64})
	h.exit(cluster.Worker, 2, cluster.Killed)
	if got := h.get(0); got.ID == tk.ID {
		t.Fatalf("the lost member's task went out before the ring settled: %+v", got)
	}
	// A worker outside the ring cannot commit for it; a member can, once
	// the new ring formed.
	h.wantRefused(CommitTask{Worker: 1, TaskID: tk.ID, Done: 128, OnBehalf: true, Owner: 2}, ErrRejected) // forming
	h.join(0)
	wantRing(t, h.join(1), "v4 [0@a0 1@a1]")
	h.wantRefused(CommitTask{Worker: 1, TaskID: tk.ID, Done: 128, OnBehalf: true, Owner: 0}, ErrRejected) // 0 is in the ring
	h.step(CommitTask{Worker: 1, TaskID: tk.ID, Done: 128, OnBehalf: true, Owner: 2})
	h.step(SettleRing{Worker: 0, Version: 4})
	h.take()
	var again task.Task
	for again.ID != tk.ID {
		again = h.get(1)
	}
	if again.Done != 128 {
		t.Fatalf("task %+v, want 128 records done", again)
	}
	h.wantRefused(CommitTask{Worker: 0, TaskID: tk.ID, Done: 200, OnBehalf: true, Owner: 2}, ErrRejected) // settled
}

// Without a settling ring (every member gone), the lost members' tasks go
// back after the settle timeout.
func TestLostMemberSettlesByTimeout(t *testing.T) {
	h := allReduceJob(t, 1)
	h.join(0)
	tk := h.get(0)
	h.exit(cluster.Worker, 0, cluster.Killed)
	h.running(cluster.Worker, 1)
	if other := h.get(1); other.ID == tk.ID {
		t.Fatal("the lost member's task went out before the settle timeout")
	}
	if k := h.kind(1); k != task.KindWait {
		t.Fatalf("got %v, want wait", k)
	}
	h.advance(30 * time.Second) // past the settle timeout, not the task timeout
	h.step(Tick{})
	if got := h.get(1); got.ID != tk.ID {
		t.Fatalf("got %+v, want the lost member's task %d", got, tk.ID)
	}
}

// A worker back in a ring learns what the master knows of its tasks:
// others may have committed on its behalf while it was left out.
func TestJoinRingTellsHeldTasks(t *testing.T) {
	h := allReduceJob(t, 2)
	h.join(0)
	h.join(1)
	h.join(0)
	tk := h.get(1)
	h.step(CommitTask{Worker: 1, TaskID: tk.ID, Done: 64})
	h.step(RingBroken{Worker: 0, Version: 2})
	h.join(0)
	r := h.step(JoinRing{Worker: 1, Addr: "a1"})
	if r.Ring == nil || len(r.Held) != 1 || r.Held[0].ID != tk.ID || r.Held[0].Done != 64 {
		t.Fatalf("reply %+v, want task %d with 64 done", r, tk.ID)
	}
}

// The ledger of an AllReduce job counts what the steps applied: a step
// reported twice counts once, records applied in two steps count twice,
// and records no step applied are missed.
func TestAppliedLedger(t *testing.T) {
	h := allReduceJob(t, 2)
	h.join(0)
	t1, t2 := h.get(0), h.get(1)
	part := func(w int, tk task.Task, start, end int64) Part {
		return Part{Worker: w, Task: tk.ID, Start: start, End: end}
	}
	h.step(ReportApplied{Worker: 0, Lineage: 1, Steps: []AppliedStep{
		{Step: 1, Parts: []Part{part(0, t1, 0, 256), part(1, t2, 0, 200)}},
		{Step: 2, Parts: []Part{part(0, t1, 256, t1.Records())}},
	}})
	// Step 2 again (a new rank 0 reporting the agreed state): ignored.
	h.step(ReportApplied{Worker: 1, Lineage: 1, Steps: []AppliedStep{{Step: 2, Parts: []Part{part(0, t1, 256, t1.Records())}}}})
	h.wantRefused(ReportApplied{Worker: 1, Lineage: 1, Steps: []AppliedStep{{Step: 9, Parts: []Part{part(1, t2, 0, t2.Records()+1)}}}}, ErrInvalid)
	// Records 150..200 of t2 applied again in another step: twice.
	h.step(ReportApplied{Worker: 1, Lineage: 1, Steps: []AppliedStep{{Step: 3, Parts: []Part{part(1, t2, 150, t2.Records())}}}})
	h.train(0, t1, 3)
	h.train(1, t2, 3)
	e := h.summary().Epochs[0]
	if e.RecordsTrained != 1000 || e.RecordsTrainedTwice != 50 || e.RecordsMissed != 0 {
		t.Fatalf("ledger %+v, want 1000 trained, 50 twice", e)
	}
}

// A new ring must include a member of the last one while any is alive:
// otherwise it would train on from an older state (a newcomer's initial
// model) and the steps the last ring confirmed would be lost.
func TestRingWaitsForAHolderOfTheState(t *testing.T) {
	h := allReduceJob(t, 3)
	h.join(0)
	h.join(1)
	wantRing(t, h.join(0), "v2 [0@a0 1@a1]")
	h.step(RingBroken{Worker: 0, Version: 2}) // both members busy elsewhere
	wantRing(t, h.join(2), "nil")
	h.advance(time.Minute) // far past the grace
	h.step(Tick{})
	wantRing(t, h.status(2), "v3 forming")
	// A holder checks in; the grace is over: the frozen one is left out.
	wantRing(t, h.join(1), "v3 [1@a1 2@a2]")
	// When every holder is gone, the state is lost: the ring forms anyway.
	h.exit(cluster.Worker, 1, cluster.Killed)
	h.exit(cluster.Worker, 0, cluster.Killed)
	wantRing(t, h.join(2), "v4 [2@a2]")
}

// When every member of a ring is lost, the job goes on from the newest
// checkpoint a member reported: a ring of the new workers starts a new
// lineage from it, the steps after it are undone in the ledger, and their
// records go back to their tasks, so the epoch is still trained once.
func TestRingRestoresFromCheckpoint(t *testing.T) {
	h := allReduceJob(t, 2)
	h.j.cfg.CheckpointDir = "ckpt"
	h.join(0)
	h.join(1)
	r := h.step(JoinRing{Worker: 0, Addr: "a0"}).Ring
	if r == nil || r.Lineage != 1 || r.Restore != (RestorePoint{}) {
		t.Fatalf("first ring %+v, want lineage 1 from the initial model", r)
	}
	t1, t2 := h.get(0), h.get(1)
	part := func(w int, tk task.Task, start, end int64) Part {
		return Part{Worker: w, Task: tk.ID, Start: start, End: end}
	}
	// A checkpoint of a step the master was never told of is refused.
	h.wantRefused(ReportApplied{Worker: 0, Lineage: 1, Checkpoint: 2,
		Steps: []AppliedStep{{Step: 1, Parts: []Part{part(0, t1, 0, 100), part(1, t2, 0, 100)}}}}, ErrInvalid)
	h.step(ReportApplied{Worker: 0, Lineage: 1, Checkpoint: 2, Steps: []AppliedStep{
		{Step: 1, Parts: []Part{part(0, t1, 0, 100), part(1, t2, 0, 100)}},
		{Step: 2, Parts: []Part{part(0, t1, 100, 200), part(1, t2, 100, 200)}},
	}})
	h.step(ReportApplied{Worker: 0, Lineage: 1, Steps: []AppliedStep{{Step: 3, Parts: []Part{part(0, t1, 200, 300)}}}})
	h.step(CommitTask{Worker: 0, TaskID: t1.ID, Done: 300})
	h.step(CommitTask{Worker: 1, TaskID: t2.ID, Done: 200})
	// Both members die at once; their replacements form the next ring.
	h.exit(cluster.Worker, 0, cluster.Killed)
	h.exit(cluster.Worker, 1, cluster.Killed)
	h.running(cluster.Worker, 2)
	r = h.step(JoinRing{Worker: 2, Addr: "a2"}).Ring
	if r == nil || r.Members == nil || r.Lineage != 2 || r.Restore != (RestorePoint{Dir: "ckpt", Version: 2}) {
		t.Fatalf("ring after the loss %+v, want lineage 2 from checkpoint 2", r)
	}
	if s := h.summary().Ring; s.Restores != 1 || s.StepsLost != 1 || s.Checkpoint != 2 {
		t.Fatalf("ring summary %+v, want 1 restore, 1 step lost", s)
	}
	// The old lineage's reports are refused; the tasks resume where the
	// checkpoint left them.
	h.wantRefused(ReportApplied{Worker: 2, Lineage: 1, Steps: []AppliedStep{{Step: 4, Parts: []Part{part(2, t1, 300, 400)}}}}, ErrRejected)
	a, b := h.get(2), h.get(2)
	if a.ID == b.ID || (a.ID != t1.ID && a.ID != t2.ID) || (b.ID != t1.ID && b.ID != t2.ID) || a.Done != 200 || b.Done != 200 {
		t.Fatalf("tasks after the restore %+v (done %d), %+v (done %d), want both with 200 done", a, a.Done, b, b.Done)
	}
	h.step(ReportApplied{Worker: 2, Lineage: 2, Steps: []AppliedStep{
		{Step: 3, Parts: []Part{part(2, t1, 200, t1.Records())}},
		{Step: 4, Parts: []Part{part(2, t2, 200, t2.Records())}},
	}})
	h.train(2, a, 4)
	h.train(2, b, 4)
	e := h.summary().Epochs[0]
	if e.RecordsTrained != 1000 || e.RecordsTrainedTwice != 0 || e.RecordsMissed != 0 {
		t.Fatalf("ledger %+v, want 1000 trained once", e)
	}
}

// A job that starts from a checkpoint (--checkpoint_dir_for_init, or a
// checkpoint already in --checkpoint_dir) gives its first ring that
// restore point.
func TestFirstRingStartsFromInitCheckpoint(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.AllReduce, c.RingGrace, c.NumPS, c.NumWorkers = true, 5*time.Second, 0, 1
		c.InitDir, c.InitVersion = "init", 40
	})
	h.running(cluster.Worker, 0)
	r := h.step(JoinRing{Worker: 0, Addr: "a0"}).Ring
	if r == nil || r.Members == nil || r.Lineage != 1 || r.Restore != (RestorePoint{Dir: "init", Version: 40}) {
		t.Fatalf("first ring %+v, want lineage 1 from checkpoint 40 in init", r)
	}
}

// The summary times each membership change to the next step a ring of a
// later version applied, and each worker's first applied step from its
// start; the workers' collective counters add up, and a lost worker's
// stay counted. The applied steps are also what a task resumes from when
// it changes hands.
func TestRingTimings(t *testing.T) {
	h := allReduceJob(t, 2)
	h.join(0) // a ring of worker 0 alone forms (v1)
	h.join(1) // worker 1 joins: v2
	h.join(0)
	t0, t1 := h.get(0), h.get(1)
	h.advance(1500 * time.Millisecond)
	applied := func(step, version int64, parts ...Part) {
		h.t.Helper()
		h.step(ReportApplied{Worker: 0, Lineage: 1, Steps: []AppliedStep{{Step: step, RingVersion: version, Parts: parts}}})
	}
	applied(1, 2, Part{Worker: 0, Task: t0.ID, Start: 0, End: 64}, Part{Worker: 1, Task: t1.ID, Start: 0, End: 64})
	h.step(Heartbeat{Worker: 1, Collective: CollectiveStats{Ops: 3, Bytes: 300, Seconds: 0.5}})
	h.step(Heartbeat{Worker: 1, Collective: CollectiveStats{Ops: 2, Bytes: 200, Seconds: 0.25}}) // out of order: kept at the most
	h.advance(500 * time.Millisecond)
	h.exit(cluster.Worker, 1, cluster.Killed) // v3
	h.advance(300 * time.Millisecond)
	h.join(0)
	h.take()
	applied(2, 2, Part{Worker: 0, Task: t0.ID, Start: 64, End: 128}, Part{Worker: 1, Task: t1.ID, Start: 64, End: 100}) // the old ring's, late
	h.step(SettleRing{Worker: 0, Version: 3})
	h.advance(500 * time.Millisecond)
	if rd := h.take(); len(rd.RingRecovered) != 0 {
		t.Fatalf("recovered %v by a step of the old ring", rd.RingRecovered)
	}
	applied(3, 3, Part{Worker: 0, Task: t0.ID, Start: 128, End: 192})
	if rd := h.take(); len(rd.RingRecovered) != 1 || rd.RingRecovered[0] != 800*time.Millisecond {
		t.Fatalf("ready %+v, want one recovery of 800ms", rd.RingRecovered)
	}
	// The lost worker's task resumes after what the steps applied of it.
	if got := h.get(0); got.ID != t1.ID || got.Done != 100 {
		t.Fatalf("got %+v with %d done, want task %d with 100 done", got, got.Done, t1.ID)
	}
	h.step(Heartbeat{Worker: 0, Collective: CollectiveStats{Ops: 5, Bytes: 500, Seconds: 1}})
	s := h.summary().Ring
	start := time.Unix(1000, 0).UTC()
	want := []RingRecovery{{Version: 2, Cause: "worker 1 joins", At: start, Seconds: 1.5},
		{Version: 3, Cause: "worker-1 lost", At: start.Add(2 * time.Second), Seconds: 0.8}}
	if !slices.EqualFunc(s.Recoveries, want, func(a, b RingRecovery) bool {
		return a.Version == b.Version && a.Cause == b.Cause && a.At.Equal(b.At) && a.Seconds == b.Seconds
	}) {
		t.Errorf("recoveries %+v, want %+v", s.Recoveries, want)
	}
	if len(s.Joins) != 2 || s.Joins[0] != (RingJoin{Worker: 0, Seconds: 1.5}) || s.Joins[1] != (RingJoin{Worker: 1, Seconds: 1.5}) {
		t.Errorf("joins %+v", s.Joins)
	}
	if s.Allreduce != (CollectiveStats{Ops: 8, Bytes: 800, Seconds: 1.5}) {
		t.Errorf("allreduce %+v, want the sum of both workers' latest", s.Allreduce)
	}
}

// A worker that talks before its backend reports it running (a loaded
// machine: the process's start is seen late) still has its first step
// timed, from its first request.
func TestRingJoinTimedBeforeBackendSaysRunning(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.AllReduce, c.RingGrace, c.NumPS, c.NumWorkers = true, 5*time.Second, 0, 1
		c.HeartbeatTimeout = time.Hour
	})
	h.join(0)
	tk := h.get(0)
	h.advance(700 * time.Millisecond)
	h.running(cluster.Worker, 0) // late: it already trains
	h.step(ReportApplied{Worker: 0, Lineage: 1, Steps: []AppliedStep{{Step: 1, RingVersion: 1, Parts: []Part{{Worker: 0, Task: tk.ID, Start: 0, End: 64}}}}})
	if s := h.summary().Ring; len(s.Joins) != 1 || s.Joins[0] != (RingJoin{Worker: 0, Seconds: 0.7}) {
		t.Errorf("joins %+v, want worker 0's first step 0.7 s after its first request", s.Joins)
	}
}

// TestAppliedLedgerStaysSmall: what the master persists of the applied
// ledger grows with the tasks, not the steps — a task's ranges merge once
// no rewind can tell them apart, and the reported steps are spans.
func TestAppliedLedgerStaysSmall(t *testing.T) {
	for _, ckpt := range []string{"", "ckpt"} {
		h := allReduceJob(t, 1)
		h.j.cfg.CheckpointDir = ckpt
		h.join(0)
		t1, t2 := h.get(0), h.get(0)
		step := int64(0)
		for i := int64(0); i < 488; i++ { // one record of each task per step
			step++
			ev := ReportApplied{Worker: 0, Lineage: 1, Steps: []AppliedStep{{Step: step, Parts: []Part{
				{Worker: 0, Task: t1.ID, Start: i, End: i + 1}, {Worker: 0, Task: t2.ID, Start: i, End: i + 1}}}}}
			if ckpt != "" && step%100 == 0 {
				ev.Checkpoint = step
			}
			h.step(ev)
		}
		a := h.j.State().Applied
		if len(a.Steps) != 1 || a.Steps[0] != [2]int64{1, 489} {
			t.Errorf("checkpoints %q: steps %v, want one span", ckpt, a.Steps)
		}
		// Without checkpoints everything merges; with them, what is after
		// the last checkpoint (step 400) stays apart until the next one.
		want := 1
		if ckpt != "" {
			want = 1 + 88
		}
		if len(a.Ranges[t1.ID]) != want || len(a.Ranges[t2.ID]) != want {
			t.Errorf("checkpoints %q: %d and %d ranges, want %d each", ckpt, len(a.Ranges[t1.ID]), len(a.Ranges[t2.ID]), want)
		}
	}
}
