package job

import (
	"fmt"
	"slices"
	"time"

	"elasticdl/internal/master/task"
)

// Restore points of an AllReduce job. The model lives only in the ring's
// members; should every member of a ring be lost at once, its state is
// gone, and the next ring starts a new lineage from the newest checkpoint a
// member wrote (or from the checkpoint the job started from, or the
// initial model). The core then rewinds the ledger to that checkpoint:
// the applied steps after it are undone and the records they held go back
// to their tasks, so that every record is still trained once in the state
// the job goes on with.
//
// A member writes a checkpoint of a confirmed step and reports it with the
// applied steps up to it (ReportApplied.Checkpoint): the ledger then holds
// every step the checkpoint holds, and no other step is undone.

// RestorePoint is where a ring of a new lineage starts: checkpoint Version
// under Dir, or the initial model when Dir is empty.
type RestorePoint struct {
	Dir     string
	Version int64
}

func newRendezvous(cfg Config) rendezvous {
	r := rendezvous{addrs: map[int]string{}, everMember: map[int]bool{}, unsettled: map[int]time.Time{}}
	if cfg.InitDir != "" && cfg.InitVersion >= 0 {
		r.restore = RestorePoint{Dir: cfg.InitDir, Version: cfg.InitVersion}
	}
	return r
}

// checkCheckpoint refuses a checkpoint report whose steps the ledger would
// not hold after ev: every step from the restore point to the checkpoint
// must be reported.
func (j *Job) checkCheckpoint(ev ReportApplied) error {
	c, from := ev.Checkpoint, j.ring.restore.Version
	switch {
	case c == 0:
		return nil
	case j.cfg.CheckpointDir == "":
		return fmt.Errorf("%w: a checkpoint of step %d in a job without --checkpoint_dir", ErrInvalid, c)
	case c < 0:
		return fmt.Errorf("%w: a checkpoint of step %d", ErrInvalid, c)
	case c <= from:
		return nil // older than the restore point: nothing to do
	}
	inReport := map[int64]bool{}
	for _, st := range ev.Steps {
		inReport[st.Step] = true
	}
	for s := from + 1; s <= c; s++ {
		if !j.applied.steps.Has(s) && !inReport[s] {
			return fmt.Errorf("%w: a checkpoint of step %d, but step %d was never reported applied", ErrInvalid, c, s)
		}
	}
	return nil
}

// checkpointWritten makes checkpoint c (checked) the restore point.
func (j *Job) checkpointWritten(c int64) {
	if c > j.ring.restore.Version {
		j.ring.restore = RestorePoint{Dir: j.cfg.CheckpointDir, Version: c}
		j.compactApplied()
	}
}

// newLineage starts the lineage of the ring being formed. lost: every
// member of the last ring was lost, so the ledger goes back to the restore
// point.
func (j *Job) newLineage(now time.Time, lost bool) {
	r := &j.ring
	r.lineage++
	if !lost {
		return
	}
	at := r.restore.Version
	undone := j.rewindLedger(at)
	// No survivor can settle for the lost members: their tasks go back
	// now (and are rewound below with every other task).
	j.requeueUnsettled(now, func(time.Time) bool { return true })
	kept := map[int64]int64{}
	for id, rs := range j.applied.ranges {
		for _, rg := range rs {
			kept[id] = max(kept[id], rg.end)
		}
	}
	back := j.disp.Rewind(func(t task.Task) int64 { return kept[t.ID] })
	for _, t := range back {
		delete(j.applied.corrupt, t.ID)
	}
	r.restores++
	r.stepsLost += undone
	j.log.Warn("every member of the last ring was lost: the job goes on from its restore point",
		"lineage", r.lineage, "restore_dir", r.restore.Dir, "restore_version", at, "steps_undone", undone, "tasks_rewound", len(back))
	j.noticeOccur(true, "RingStateLost", fmt.Sprintf("every AllReduce worker holding the model was lost: training goes on from step %d (%s); %d steps are redone",
		at, restoreName(r.restore), undone))
	if j.phase == Uploading && !j.disp.Finished() {
		j.setPhase(Training)
	}
}

// rewindLedger drops the applied steps after step at, and returns how
// many there were.
func (j *Job) rewindLedger(at int64) int64 {
	a := &j.applied
	undone := a.steps.DropAbove(at)
	for id, rs := range a.ranges {
		a.ranges[id] = slices.DeleteFunc(rs, func(rg appliedRange) bool { return rg.step > at })
	}
	return undone
}

func restoreName(p RestorePoint) string {
	if p.Dir == "" {
		return "the initial model"
	}
	return fmt.Sprintf("checkpoint %d in %s", p.Version, p.Dir)
}
