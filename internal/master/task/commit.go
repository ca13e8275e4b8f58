package task

import (
	"fmt"
)

// Commit records that worker, which holds training task taskID, has
// trained its first done records (in the task's own deterministic order)
// in steps that can no longer be undone. Should the task go back to todo
// (worker lost, timeout, failure), the next holder gets it with Task.Done
// set and trains only the rest, so that a record is trained once even when
// its task is not. done is at most the task's records; a smaller done than
// already committed changes nothing (commits are cumulative, and another
// worker may have committed further on the holder's behalf).
func (d *Dispatcher) Commit(worker int, taskID int64, done int64) error {
	e := d.lookup(taskID)
	switch {
	case e == nil:
		return fmt.Errorf("commit from worker %d for task %d: %w", worker, taskID, ErrUnknownTask)
	case e.state != Doing || !e.holds(worker):
		return fmt.Errorf("commit from worker %d for %s: %w", worker, e.task, ErrNotOwner)
	case e.task.Type != Training:
		return fmt.Errorf("commit from worker %d for %s: %w: only training tasks commit progress", worker, e.task, ErrInvalidResult)
	case done < 0 || done > e.task.Records():
		return fmt.Errorf("commit from worker %d for %s: %w: %d records done, want 0..%d",
			worker, e.task, ErrInvalidResult, done, e.task.Records())
	}
	e.task.Done = max(e.task.Done, done)
	return nil
}

// Advance records that the first done records of training task taskID
// were trained in a state the job keeps (AllReduce: the ring's steps the
// master has been told of), whoever holds the task: a queued or held
// task's Done grows to done, so its next holder trains only the rest; a
// done task is left as it is. Like Commit, a smaller done changes nothing.
func (d *Dispatcher) Advance(taskID int64, done int64) error {
	e := d.lookup(taskID)
	switch {
	case e == nil:
		return fmt.Errorf("advance task %d: %w", taskID, ErrUnknownTask)
	case e.task.Type != Training:
		return fmt.Errorf("advance %s: %w: only training tasks have progress", e.task, ErrInvalidResult)
	case done < 0 || done > e.task.Records():
		return fmt.Errorf("advance %s: %w: %d records done, want 0..%d", e.task, ErrInvalidResult, done, e.task.Records())
	case e.state == Todo || e.state == Doing:
		e.task.Done = max(e.task.Done, done)
	}
	return nil
}

// Reopen puts done training task taskID back at the front of todo: part
// of it is missing from the model (a PS restored an older checkpoint), and
// its next holder trains it again (the PS skip the minibatches they hold).
// Its records leave its epoch's counts and coverage until it is done
// again. It fails on an unknown task, a task that is not training, or one
// that is not done.
func (d *Dispatcher) Reopen(taskID int64) error {
	e := d.lookup(taskID)
	switch {
	case e == nil:
		return fmt.Errorf("reopen task %d: %w", taskID, ErrUnknownTask)
	case e.task.Type != Training:
		return fmt.Errorf("reopen %s: %w: only training tasks reopen", e.task, ErrInvalidResult)
	case e.state != Done:
		return fmt.Errorf("reopen %s: %w: the task is %s, not done", e.task, ErrInvalidResult, e.state)
	}
	d.touch(taskID)
	e.state = Todo
	d.tasksDone--
	ep := &d.epochs[e.task.Epoch-1]
	ep.tasksDone--
	ep.recordsDone -= e.task.Records()
	ep.dropCov(e.task)
	d.trainTodo.pushFront(taskID)
	return nil
}

// DoneTraining calls fn with every done training task, in ID order.
func (d *Dispatcher) DoneTraining(fn func(Task)) {
	for id := int64(1); id <= d.ntasks; id++ {
		if e := d.lookup(id); e.state == Done && e.task.Type == Training {
			fn(e.task)
		}
	}
}
