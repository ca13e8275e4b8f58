package task

import (
	"fmt"
	"slices"
	"time"
)

// requeue takes the doing tasks ids away from their owners and puts them at
// the front of todo in ascending ID order (so the oldest work goes out
// first). Requeues do not count toward MaxAttempts, but a task requeued
// MaxRequeues times fails the job. It returns the tasks put back in todo.
func (d *Dispatcher) requeue(ids []int64, why string) []Task {
	slices.Sort(ids)
	var out []Task
	for _, id := range slices.Backward(ids) {
		e := d.lookup(id)
		e.former = append(e.former, e.holders()...)
		d.release(e)
		d.requeues++
		e.requeues++
		if e.requeues >= d.maxRequeues {
			d.fail(e, fmt.Sprintf("taken back from workers %d times (last: %s; MaxRequeues %d); it may be killing every worker that runs it",
				e.requeues, why, d.maxRequeues))
			continue
		}
		e.state = Todo
		d.queueFor(e.task).pushFront(id)
		out = append(out, e.task)
	}
	slices.Reverse(out)
	return out
}

// WorkerLost puts every task held by worker back at the front of todo (it
// died, was preempted, or was removed) and returns them for logging. It does
// not count toward the tasks' MaxAttempts. Should the worker still report
// later, see Report. now is unused today; it keeps the time-taking
// signature uniform for the master.
func (d *Dispatcher) WorkerLost(worker int, now time.Time) []Task {
	// A backed-up task goes on with its other copy.
	back := d.requeue(d.lostCopies(worker), fmt.Sprintf("worker %d lost", worker))
	delete(d.byWorker, worker)
	return back
}

// Tick puts back at the front of todo every task held for longer than
// TaskTimeout at time now, and returns them. The master must call it
// periodically: it is what keeps a job from hanging on a task whose worker
// vanished without a WorkerLost. It does nothing when TaskTimeout is 0.
func (d *Dispatcher) Tick(now time.Time) []Task {
	if d.cfg.TaskTimeout <= 0 {
		return nil
	}
	ids := d.timedOut(now)
	if len(ids) == 0 {
		return nil
	}
	return d.requeue(ids, fmt.Sprintf("timed out after %v", d.cfg.TaskTimeout))
}

// RestartClocks starts every held task's timeout over at now: a master
// that took over from a dead one heard no report meanwhile.
func (d *Dispatcher) RestartClocks(now time.Time) {
	for id := range d.doing {
		e := d.lookup(id)
		e.since = now
		if e.hasBackup {
			e.backupSince = now
		}
	}
}
