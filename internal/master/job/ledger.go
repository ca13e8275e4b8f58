package job

import (
	"elasticdl/internal/spans"
	"fmt"
	"slices"
	"time"
)

// The exactness of an AllReduce job: members commit the records their
// confirmed steps hold (CommitTask), on behalf of workers that left the
// ring too; a lost member's tasks wait until the next ring settles; the
// ring reports what its steps applied (the job's ledger, exact to the
// minibatch); and the model, which lives in the workers, is uploaded at
// the end.

// CommitTask is a worker saying that the first Done records of a training
// task it holds were trained in steps no failure can undo. With OnBehalf,
// the task is Owner's: a worker that left the reporter's ring (lost, or
// left out) whose part of the ring's last steps the reporter knows.
type CommitTask struct {
	Worker   int
	TaskID   int64
	Done     int64
	OnBehalf bool
	Owner    int
}

// SettleRing is a member of ring Version saying the ring agreed on its
// state and committed what it owed the workers it lost: their tasks may go
// back to todo.
type SettleRing struct {
	Worker  int
	Version int64
}

// ModelUploaded is an AllReduce worker's final parameters arriving (the
// shell keeps them): the first is saved; every member's checksum is kept.
type ModelUploaded struct {
	Worker   int
	Version  int64
	Checksum uint64
}

func (CommitTask) isEvent()    {}
func (SettleRing) isEvent()    {}
func (ModelUploaded) isEvent() {}

// WorkerChecksum is the checksum of a worker's uploaded parameters.
type WorkerChecksum struct {
	Worker   int    `json:"worker"`
	Version  int64  `json:"version"`
	Checksum uint64 `json:"checksum"`
}

// settleTimeout bounds how long a lost ring member's tasks wait for the
// survivors to settle (they re-form within a few seconds, or are gone too).
func (j *Job) settleTimeout() time.Duration { return 2*j.cfg.RingGrace + 10*time.Second }

func (j *Job) commitTask(now time.Time, ev CommitTask) (Reply, error) {
	if err := j.seen(ev.Worker, now); err != nil {
		return Reply{}, err
	}
	owner := ev.Worker
	if ev.OnBehalf {
		owner = ev.Owner
		_, alive := j.workers[owner]
		_, unsettled := j.ring.unsettled[owner]
		switch {
		case !j.inRing(ev.Worker):
			return Reply{}, fmt.Errorf("%w: worker %d commits for worker %d but is not in the ring", ErrRejected, ev.Worker, owner)
		case j.inRing(owner) || (!alive && !unsettled):
			return Reply{}, fmt.Errorf("%w: worker %d commits for worker %d, which is in the ring or settled", ErrRejected, ev.Worker, owner)
		}
	}
	if err := j.disp.Commit(owner, ev.TaskID, ev.Done); err != nil {
		return Reply{}, fmt.Errorf("%w: %v", ErrRejected, err)
	}
	return Reply{}, nil
}

func (j *Job) inRing(worker int) bool {
	return !j.ring.forming && slices.ContainsFunc(j.ring.members, func(m RingMember) bool { return m.Worker == worker })
}

func (j *Job) settleRing(now time.Time, ev SettleRing) (Reply, error) {
	if err := j.seen(ev.Worker, now); err != nil {
		return Reply{}, err
	}
	if ev.Version == j.ring.version && j.inRing(ev.Worker) {
		j.requeueUnsettled(now, func(time.Time) bool { return true })
	}
	return Reply{Ring: j.currentRing()}, nil
}

// requeueUnsettled gives the tasks of the lost ring members that due
// selects back to todo.
func (j *Job) requeueUnsettled(now time.Time, due func(deadline time.Time) bool) {
	var lost []int
	for w, deadline := range j.ring.unsettled {
		if due(deadline) {
			lost = append(lost, w)
		}
	}
	slices.Sort(lost)
	for _, w := range lost {
		delete(j.ring.unsettled, w)
		j.requeueLost(now, w)
	}
}

func (j *Job) modelUploaded(now time.Time, ev ModelUploaded) (Reply, error) {
	if err := j.seen(ev.Worker, now); err != nil {
		return Reply{}, err
	}
	switch {
	case !j.cfg.AllReduce || !j.cfg.training():
		return Reply{}, fmt.Errorf("%w: a model upload in a job whose model is not in the workers", ErrRejected)
	case j.phase < Uploading:
		return Reply{}, fmt.Errorf("%w: a model upload before training is done", ErrRejected)
	case !j.ring.everMember[ev.Worker]:
		return Reply{}, fmt.Errorf("%w: worker %d was never in a ring: it holds no trained model", ErrRejected, ev.Worker)
	}
	j.ring.checksums = append(j.ring.checksums, WorkerChecksum{Worker: ev.Worker, Version: ev.Version, Checksum: ev.Checksum})
	if j.phase == Uploading {
		j.save(Save{Model: true, Uploaded: ev.Worker})
		j.setPhase(Saving)
	}
	return Reply{}, nil
}

// uploadOverdue fails an AllReduce job whose model no worker uploaded.
func (j *Job) uploadOverdue(now time.Time) {
	if j.phase == Uploading && j.cfg.UploadTimeout > 0 && now.Sub(j.uploadingSince) > j.cfg.UploadTimeout {
		j.fail(fmt.Errorf("no worker uploaded the trained model within %s of the end of training", j.cfg.UploadTimeout))
	}
}

// ReportApplied is a ring member telling which members' records the
// ring's confirmed steps applied. A step is known by its number (one
// lineage of states: a confirmed step is never undone), so reports are
// idempotent.
type ReportApplied struct {
	Worker int
	Steps  []AppliedStep
	// Lineage is the reporter's state's (Ring.Lineage); Checkpoint, when
	// not 0, a checkpoint of that step the reporter wrote (see restore.go).
	Lineage    int64
	Checkpoint int64
}

// AppliedStep is one confirmed step's parts, and the version of the ring
// that applied it.
type AppliedStep struct {
	Step        int64
	Parts       []Part
	RingVersion int64
}

// Part is one member's records [Start,End) of Task in one step, in the
// task's own record order.
type Part struct {
	Worker     int
	Task       int64
	Start, End int64
}

func (ReportApplied) isEvent() {}

// appliedLedger is what an AllReduce job's steps applied, by task.
type appliedLedger struct {
	steps   spans.Set[int64]
	ranges  map[int64][]appliedRange
	corrupt map[int64]int64 // unreadable records of a done task
}

// appliedRange is records [start,end) of a task applied in step.
type appliedRange struct{ start, end, step int64 }

func (j *Job) reportApplied(now time.Time, ev ReportApplied) (Reply, error) {
	if err := j.seen(ev.Worker, now); err != nil {
		return Reply{}, err
	}
	if !j.cfg.AllReduce {
		return Reply{}, fmt.Errorf("%w: applied steps in a job without AllReduce", ErrRejected)
	}
	if ev.Lineage != j.ring.lineage {
		return Reply{}, fmt.Errorf("%w: applied steps of lineage %d, the job's state is of lineage %d (a restore since)", ErrRejected, ev.Lineage, j.ring.lineage)
	}
	for _, st := range ev.Steps {
		for _, p := range st.Parts {
			if info, ok := j.disp.TaskInfo(p.Task); !ok || p.Start < 0 || p.End < p.Start || p.End > info.Records() {
				return Reply{}, fmt.Errorf("%w: step %d: records [%d,%d) of task %d do not exist", ErrInvalid, st.Step, p.Start, p.End, p.Task)
			}
		}
	}
	if err := j.checkCheckpoint(ev); err != nil {
		return Reply{}, err
	}
	a := &j.applied
	parts := map[int]int64{} // each member's records in the new steps
	for _, st := range ev.Steps {
		if a.steps.Has(st.Step) {
			continue
		}
		a.steps.Add(st.Step)
		for _, p := range st.Parts {
			parts[p.Worker] += p.End - p.Start
			j.addApplied(p.Task, appliedRange{p.Start, p.End, st.Step})
			// The state holds the task's records up to End (a prefix):
			// should the task change hands, they are not trained again.
			_ = j.disp.Advance(p.Task, p.End)
			j.noteApplied(now, st.RingVersion, p.Worker)
		}
	}
	if len(parts) > 0 {
		j.noteRingParts(now, parts)
	}
	j.checkpointWritten(ev.Checkpoint)
	return Reply{}, nil
}

// addApplied adds r to its task's ranges, merged into the last one when it
// continues it and no rewind can tell them apart (the ledger then grows with
// the tasks, not the steps).
func (j *Job) addApplied(task int64, r appliedRange) {
	rs := j.applied.ranges[task]
	if n := len(rs); n > 0 && rs[n-1].end == r.start && j.neverUndone(rs[n-1].step, r.step) {
		rs[n-1].end, rs[n-1].step = r.end, max(rs[n-1].step, r.step)
		return
	}
	j.applied.ranges[task] = append(rs, r)
}

// neverUndone: steps a and b are in no rewind's way — both at or before
// the restore point (a rewind keeps them), or, in a job without
// checkpoints, anywhere (the restore point never moves, so a rewind drops
// every step after it together).
func (j *Job) neverUndone(a, b int64) bool {
	at := j.ring.restore.Version
	return j.cfg.CheckpointDir == "" || a <= at && b <= at
}

// compactApplied merges each task's adjacent ranges that no rewind can
// tell apart any more (after the restore point moved).
func (j *Job) compactApplied() {
	for id, rs := range j.applied.ranges {
		out := rs[:0]
		for _, r := range rs {
			if n := len(out); n > 0 && out[n-1].end == r.start && j.neverUndone(out[n-1].step, r.step) {
				out[n-1].end, out[n-1].step = r.end, max(out[n-1].step, r.step)
				continue
			}
			out = append(out, r)
		}
		j.applied.ranges[id] = out
	}
}

// appliedEpochs is the per-epoch ledger of what the steps applied: each
// record of a task counted as often as a confirmed step held it (an
// unreadable record counts once, as the task's report says).
func (j *Job) appliedEpochs(epochs []EpochSummary) {
	type counts struct{ trained, twice int64 }
	by := map[int]*counts{}
	for id, rs := range j.applied.ranges {
		info, _ := j.disp.TaskInfo(id)
		cover := make([]int8, info.Records())
		for _, r := range rs {
			for i := r.start; i < r.end; i++ {
				cover[i] = min(cover[i]+1, 2)
			}
		}
		c := by[info.Epoch]
		if c == nil {
			c = &counts{}
			by[info.Epoch] = c
		}
		for _, n := range cover {
			if n > 0 {
				c.trained++
			}
			if n > 1 {
				c.twice++
			}
		}
		c.trained += j.applied.corrupt[id]
	}
	for i := range epochs {
		e := &epochs[i]
		c := by[e.Epoch]
		if c == nil {
			c = &counts{}
		}
		cov, _ := j.disp.EpochCoverage(e.Epoch)
		finished := cov.Finished
		e.RecordsTrained, e.RecordsTrainedTwice, e.RecordsMissed = c.trained, c.twice, 0
		if finished {
			e.RecordsMissed = e.Records - c.trained
		}
	}
}
