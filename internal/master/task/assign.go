package task

import (
	"slices"
	"time"
)

// Get hands worker its next assignment: an evaluation task if any is
// waiting, else a training task (creating the next epoch's tasks once the
// current epoch has nothing left to hand out), else KindWait while tasks are
// still held by workers (they may fail and come back), else KindDone. It
// returns KindDone as soon as the job has failed (Err) or Finished. Epochs
// are created on demand here, so "more epochs to come" never makes a worker
// wait. A worker may hold several tasks at once.
func (d *Dispatcher) Get(worker int, now time.Time) Assignment {
	if d.err != nil {
		return Assignment{Kind: KindDone}
	}
	if id, ok := d.evalTodo.popFront(); ok {
		return d.assign(d.lookup(id), worker, now)
	}
	if d.trainTodo.len() == 0 && d.epoch < d.cfg.NumEpochs {
		d.createEpoch()
	}
	if id, ok := d.trainTodo.popFront(); ok {
		return d.assign(d.lookup(id), worker, now)
	}
	if d.Finished() {
		return Assignment{Kind: KindDone}
	}
	// Nothing to hand out but tasks are held by others: wait, never "done",
	// or the worker would exit while work may still come back.
	return Assignment{Kind: KindWait}
}

// GetTakenBack hands worker a training task that was taken back — from a
// lost or timed-out holder, after a failed attempt, or reopened — which
// the PS may hold in part; never a fresh one. KindWait when none waits.
// (A re-shard first finishes such work, see job/reshard.go.)
func (d *Dispatcher) GetTakenBack(worker int, now time.Time) Assignment {
	if d.err != nil {
		return Assignment{Kind: KindDone}
	}
	if id, ok := d.trainTodo.front.popFront(); ok {
		return d.assign(d.lookup(id), worker, now)
	}
	return Assignment{Kind: KindWait}
}

// TakenBackWaiting reports whether training tasks that were taken back
// wait in todo.
func (d *Dispatcher) TakenBackWaiting() bool { return d.trainTodo.front.len() > 0 }

func (d *Dispatcher) assign(e *entry, worker int, now time.Time) Assignment {
	e.state, e.owner, e.since = Doing, worker, now
	// The worker holds it again: its next report is the current one.
	e.former = slices.DeleteFunc(e.former, func(w int) bool { return w == worker })
	e.superseded = slices.DeleteFunc(e.superseded, func(w int) bool { return w == worker })
	d.doing[e.task.ID] = struct{}{}
	if e.task.Type != Training {
		d.evalDoing++
	}
	d.byWorker[worker] = append(d.byWorker[worker], e.task.ID)
	return Assignment{Kind: KindTask, Task: e.task}
}

// release removes a doing task from its holders.
func (d *Dispatcher) release(e *entry) {
	delete(d.doing, e.task.ID)
	if e.task.Type != Training {
		d.evalDoing--
	}
	d.unhold(e.owner, e.task.ID)
	if e.hasBackup {
		d.unhold(e.backup, e.task.ID)
		e.hasBackup, e.backup, e.backupSince = false, 0, time.Time{}
	}
}

func (d *Dispatcher) queueFor(t Task) *queue {
	if t.Type == Training {
		return &d.trainTodo
	}
	return &d.evalTodo
}
