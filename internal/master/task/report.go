package task

import (
	"fmt"
	"slices"
	"time"
)

// Report records worker's result for task taskID.
//
// It returns an error, and leaves the state machine unchanged, if the task is
// unknown (ErrUnknownTask), the result is invalid (ErrInvalidResult), or the
// worker does not currently hold the task (ErrNotOwner). One exception: a
// late successful report of a training task from a worker that held it
// before losing it to a timeout or WorkerLost is still counted in Coverage,
// since that worker's gradients were already applied; the report itself is
// rejected (the task stays with its new owner or in todo). A task with a
// backup copy (backup.go) has two holders: the first success is the
// task's, and the other holder's report then fails with ErrSuperseded
// (dropped, counted nowhere); a failure drops the reporter's copy only.
//
// A nil error means the result was accepted: on success the task is done
// (and, for evaluation tasks, its Result is added to Evaluation's stats; use
// TaskInfo to learn a task's type and model version when aggregating custom
// metrics, and aggregate only reports that returned nil); on failure
// (r.Err != "") the task goes back to the front of todo with Attempt+1, or,
// on its MaxAttempts-th failure, is marked Failed and Err becomes non-nil.
// now is the report time, kept for Progress.LastAccepted.
func (d *Dispatcher) Report(worker int, taskID int64, r Result, now time.Time) error {
	e := d.lookup(taskID)
	if e == nil {
		return fmt.Errorf("report from worker %d for task %d: %w", worker, taskID, ErrUnknownTask)
	}
	if r.Records < 0 || r.Corrupt < 0 || r.Steps < 0 {
		return fmt.Errorf("report from worker %d for %s: %w: negative count in %+v", worker, e.task, ErrInvalidResult, r)
	}
	if e.state != Doing || !e.holds(worker) {
		return d.rejectReport(worker, e, r)
	}
	if e.hasBackup && d.reportBackedUp(worker, e, r) {
		d.lastAccepted = now
		return nil
	}
	d.release(e)
	d.lastAccepted = now
	if r.Err != "" {
		d.failures++
		e.lastErr = r.Err
		e.task.Attempt++
		if e.task.Attempt >= d.cfg.MaxAttempts {
			d.fail(e, fmt.Sprintf("failed %d times (MaxAttempts %d)", e.task.Attempt, d.cfg.MaxAttempts))
			return nil
		}
		e.state = Todo
		d.queueFor(e.task).pushFront(e.task.ID)
		return nil
	}
	e.state = Done
	d.tasksDone++
	switch e.task.Type {
	case Training:
		ep := &d.epochs[e.task.Epoch-1]
		ep.tasksDone++
		ep.recordsDone += e.task.Records()
		ep.addCov(e.task)
		d.recordsReported += r.Records
		d.corrupt += r.Corrupt
		d.lossSum += r.LossSum
		d.steps += r.Steps
	case Prediction:
		s := d.preds[e.task.ModelVersion]
		s.TasksDone++
		s.Complete = s.TasksDone == s.Tasks
		s.Records += r.Records
		s.Corrupt += r.Corrupt
	default:
		s := d.evals[e.task.ModelVersion]
		s.TasksDone++
		s.Complete = s.TasksDone == s.Tasks
		s.Records += r.Records
		s.Corrupt += r.Corrupt
		s.LossSum += r.LossSum
		s.Steps += r.Steps
	}
	return nil
}

func (d *Dispatcher) rejectReport(worker int, e *entry, r Result) error {
	if i := slices.Index(e.superseded, worker); i >= 0 {
		e.superseded = slices.Delete(e.superseded, i, i+1)
		return fmt.Errorf("report from worker %d for %s: %w", worker, e.task, ErrSuperseded)
	}
	i := slices.Index(e.former, worker)
	if i < 0 {
		if e.state == Doing {
			return fmt.Errorf("report from worker %d for %s: %w (held by worker %d)", worker, e.task, ErrNotOwner, e.owner)
		}
		return fmt.Errorf("report from worker %d for %s: %w (task is %s)", worker, e.task, ErrNotOwner, e.state)
	}
	// A former holder reporting late: its work is not accepted (someone
	// else may be redoing it) but if it succeeded, the records were trained.
	e.former = slices.Delete(e.former, i, i+1)
	d.lateReports++
	counted := ""
	if r.Err == "" && e.task.Type == Training {
		d.epochs[e.task.Epoch-1].addCov(e.task)
		counted = "; its records are counted in coverage"
	}
	return fmt.Errorf("late report from worker %d for %s: %w (task is %s; worker lost it to a timeout or was declared lost)%s",
		worker, e.task, ErrNotOwner, e.state, counted)
}

// fail marks e Failed and fails the job; the first failure wins.
func (d *Dispatcher) fail(e *entry, why string) {
	e.state = Failed
	d.tasksFailed++
	if d.err == nil {
		d.err = &FailedError{Task: e.task, Failures: e.task.Attempt, Requeues: e.requeues, LastErr: e.lastErr, Why: why}
	}
}
