package task

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Backup tasks (MapReduce's): once nothing is left to hand out, a held
// training task may go to a second worker as well. Both copies train the
// same records under the same task ID, so the PS, which apply a minibatch
// of a task at most once, apply each minibatch once whoever pushes it. The
// first successful report wins: the task is done, counted once, and the
// other copy's report is taken and dropped (ErrSuperseded). A copy that
// fails or is lost leaves the task to the other one.

// ErrSuperseded: the report is of a copy of a task whose other copy was
// reported first; it is dropped and counts nowhere.
var ErrSuperseded = errors.New("another copy of the task was reported first")

// Straggler is a held training task that may be backed up.
type Straggler struct {
	Task  Task
	Owner int
	Since time.Time // when Owner got it
}

// BackupCandidates returns, once every training task of the last epoch
// has gone out and no evaluation waits (Get would say KindWait), the held
// training tasks without a backup, oldest hold first; nil otherwise.
func (d *Dispatcher) BackupCandidates() []Straggler {
	if !d.drained() {
		return nil
	}
	var out []Straggler
	for id := range d.doing {
		e := d.lookup(id)
		if e.task.Type == Training && !e.hasBackup {
			out = append(out, Straggler{Task: e.task, Owner: e.owner, Since: e.since})
		}
	}
	slices.SortFunc(out, func(a, b Straggler) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Task.ID, b.Task.ID))
	})
	return out
}

// drained: nothing is left to hand out, nor to create.
func (d *Dispatcher) drained() bool {
	return d.err == nil && d.epoch == d.cfg.NumEpochs && d.trainTodo.len() == 0 && d.evalTodo.len() == 0
}

// AssignBackup hands worker a copy of held training task taskID (one of
// BackupCandidates): worker holds it too until one copy is reported.
func (d *Dispatcher) AssignBackup(worker int, taskID int64, now time.Time) (Assignment, error) {
	e := d.lookup(taskID)
	switch {
	case e == nil:
		return Assignment{}, fmt.Errorf("backup of task %d for worker %d: %w", taskID, worker, ErrUnknownTask)
	case !d.drained() || e.task.Type != Training || e.state != Doing || e.hasBackup || e.owner == worker:
		return Assignment{}, fmt.Errorf("backup of %s for worker %d: %w: not a held training task without a backup, or tasks are still queued",
			e.task, worker, ErrInvalidResult)
	}
	d.setBackup(e, worker, now)
	return Assignment{Kind: KindTask, Task: e.task}, nil
}

func (d *Dispatcher) setBackup(e *entry, worker int, now time.Time) {
	e.hasBackup, e.backup, e.backupSince = true, worker, now
	e.former = slices.DeleteFunc(e.former, func(w int) bool { return w == worker })
	e.superseded = slices.DeleteFunc(e.superseded, func(w int) bool { return w == worker })
	d.byWorker[worker] = append(d.byWorker[worker], e.task.ID)
}

// HeldBy reports whether worker holds task taskID, since when, and
// whether its copy is the backup.
func (d *Dispatcher) HeldBy(worker int, taskID int64) (since time.Time, backup, ok bool) {
	e := d.lookup(taskID)
	switch {
	case e == nil || e.state != Doing:
		return time.Time{}, false, false
	case e.owner == worker:
		return e.since, false, true
	case e.hasBackup && e.backup == worker:
		return e.backupSince, true, true
	}
	return time.Time{}, false, false
}

// holds reports whether worker holds doing task e (either copy).
func (e *entry) holds(worker int) bool {
	return e.owner == worker || e.hasBackup && e.backup == worker
}

// holders are the workers holding doing task e.
func (e *entry) holders() []int {
	if e.hasBackup {
		return []int{e.owner, e.backup}
	}
	return []int{e.owner}
}

// sinceFor is when worker got its copy of e.
func (e *entry) sinceFor(worker int) time.Time {
	if e.hasBackup && e.backup == worker {
		return e.backupSince
	}
	return e.since
}

// unhold takes task id from worker's held list.
func (d *Dispatcher) unhold(worker int, id int64) {
	// An emptied slice is kept for the worker's next task (no allocation
	// per task); WorkerLost drops it.
	d.byWorker[worker] = slices.DeleteFunc(d.byWorker[worker], func(x int64) bool { return x == id })
}

// dropCopy takes worker's copy of backed-up task e away; the other copy
// goes on as the only one.
func (d *Dispatcher) dropCopy(e *entry, worker int) {
	d.unhold(worker, e.task.ID)
	if e.owner == worker {
		e.owner, e.since = e.backup, e.backupSince
	}
	e.hasBackup, e.backup, e.backupSince = false, 0, time.Time{}
}

// reportBackedUp applies a report of backed-up task e from one of its
// holders. A failure drops that copy (it counts toward MaxAttempts); a
// success is the task's: the other copy's report is dropped when it comes.
// It returns false when the caller goes on as for a task without backup.
func (d *Dispatcher) reportBackedUp(worker int, e *entry, r Result) bool {
	if r.Err == "" {
		if worker == e.backup { // the reporter's copy is the task's
			e.owner, e.backup = e.backup, e.owner
			e.since, e.backupSince = e.backupSince, e.since
		}
		e.superseded = append(e.superseded, e.backup)
		return false
	}
	d.failures++
	e.lastErr = r.Err
	e.task.Attempt++
	if e.task.Attempt >= d.cfg.MaxAttempts {
		d.release(e)
		d.fail(e, fmt.Sprintf("failed %d times (MaxAttempts %d)", e.task.Attempt, d.cfg.MaxAttempts))
		return true
	}
	d.dropCopy(e, worker)
	return true
}

// lostCopies drops worker's copies of the backed-up tasks it holds (it
// was lost) and returns the IDs of the other tasks it held.
func (d *Dispatcher) lostCopies(worker int) []int64 {
	var alone []int64
	for _, id := range slices.Clone(d.byWorker[worker]) {
		e := d.lookup(id)
		if !e.hasBackup {
			alone = append(alone, id)
			continue
		}
		d.dropCopy(e, worker)
		e.former = append(e.former, worker)
	}
	return alone
}

// timedOut returns the held tasks every copy of which is held longer
// than the timeout at now; a backed-up task one copy of which timed out
// goes on with the other.
func (d *Dispatcher) timedOut(now time.Time) []int64 {
	var ids []int64
	for id := range d.doing {
		e := d.lookup(id)
		ownerOut := now.Sub(e.since) > d.cfg.TaskTimeout
		backupOut := e.hasBackup && now.Sub(e.backupSince) > d.cfg.TaskTimeout
		switch {
		case ownerOut && (!e.hasBackup || backupOut):
			ids = append(ids, id)
		case ownerOut || backupOut:
			w := e.owner
			if backupOut {
				w = e.backup
			}
			d.dropCopy(e, w)
			e.former = append(e.former, w)
		}
	}
	return ids
}
