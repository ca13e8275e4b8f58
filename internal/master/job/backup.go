package job

import (
	"time"

	"elasticdl/internal/master/task"
)

// straggleFactor: a held task running this many times the typical task
// time is backed up even when its worker is not marked slow (MapReduce
// backs up whatever is still running at the end; the bar keeps copies to
// the tasks that hold the job up).
const straggleFactor = 3

// backupsOn: PS training whose pushes name their minibatches, so that a
// minibatch two copies push is applied once (--backup_tasks).
func (j *Job) backupsOn() bool {
	return j.cfg.BackupTasks && j.cfg.CheckApplied && !j.cfg.AllReduce && j.cfg.training() && j.phase == Training
}

// pickBackup chooses the held task to copy for an idle worker: the oldest
// held by a worker marked slow, else the oldest held straggleFactor times
// longer than the typical task time (when one is known); never one the
// worker holds. cands come oldest first (task.BackupCandidates).
func pickBackup(cands []task.Straggler, worker int, slow func(int) bool, typical time.Duration, known bool, now time.Time) (task.Straggler, bool) {
	for _, c := range cands {
		if c.Owner != worker && slow(c.Owner) {
			return c, true
		}
	}
	if !known {
		return task.Straggler{}, false
	}
	for _, c := range cands {
		if held := now.Sub(c.Since); c.Owner != worker && held > 0 && held > straggleFactor*typical {
			return c, true
		}
	}
	return task.Straggler{}, false
}

// backup answers an idle worker that would wait with a copy of a
// straggling task, if there is one to copy. A worker that holds a task
// asks early, while it trains (internal/worker): it waits, and asks again
// once idle, rather than queue a copy behind its own task.
func (j *Job) backup(now time.Time, worker int, a task.Assignment) task.Assignment {
	if a.Kind != task.KindWait || !j.backupsOn() {
		return a
	}
	if _, busy := j.disp.HeldSince(worker); busy {
		return a
	}
	cands := j.disp.BackupCandidates()
	if len(cands) == 0 {
		return a
	}
	typical, known := j.typicalTaskTime()
	slow := func(w int) bool { r := j.slow.workers[w]; return r != nil && r.slow }
	c, ok := pickBackup(cands, worker, slow, typical, known, now)
	if !ok {
		return a
	}
	b, err := j.disp.AssignBackup(worker, c.Task.ID, now)
	if err != nil {
		j.log.Error("backup task refused", "task", c.Task.ID, "worker", worker, "err", err)
		return a
	}
	j.summary.Tasks.Backups++
	j.log.Info("backup task", "task", c.Task.ID, "worker", worker, "holder", c.Owner, "held_for", now.Sub(c.Since),
		"holder_slow", slow(c.Owner), "typical", typical)
	return b
}
