package task

import (
	"cmp"
	"slices"
	"time"
)

// Err is non-nil (a *FailedError) once the job cannot finish because a task
// exceeded MaxAttempts or MaxRequeues. It names the task, its shard, range,
// epoch and the last error reported.
func (d *Dispatcher) Err() error { return d.err }

// Finished reports whether all epochs' training tasks are done and no
// evaluation task is waiting or held. It is false once the job has failed.
func (d *Dispatcher) Finished() bool {
	return d.err == nil && d.epoch == d.cfg.NumEpochs &&
		(d.epoch == 0 || d.epochs[d.epoch-1].tasksDone == d.epochs[d.epoch-1].tasks) &&
		d.trainTodo.len() == 0 && d.evalTodo.len() == 0 && len(d.doing) == 0
}

// Holding is the number of tasks workers hold.
func (d *Dispatcher) Holding() int { return len(d.doing) }

// TaskInfo returns the current view of task id (Attempt reflects failures so
// far) and whether it exists. Task IDs are never reused.
func (d *Dispatcher) TaskInfo(id int64) (Task, bool) {
	e := d.lookup(id)
	if e == nil {
		return Task{}, false
	}
	return e.task, true
}

// TaskState returns the state of task id and whether it exists.
func (d *Dispatcher) TaskState(id int64) (State, bool) {
	e := d.lookup(id)
	if e == nil {
		return 0, false
	}
	return e.state, true
}

// Held returns the tasks worker holds now, in ID order.
func (d *Dispatcher) Held(worker int) []Task {
	held := d.byWorker[worker]
	out := make([]Task, 0, len(held))
	for _, id := range held {
		out = append(out, d.lookup(id).task)
	}
	slices.SortFunc(out, func(a, b Task) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// HeldSince returns when worker got the oldest of the tasks it holds, and
// whether it holds any.
func (d *Dispatcher) HeldSince(worker int) (time.Time, bool) {
	var oldest time.Time
	for _, id := range d.byWorker[worker] {
		if s := d.lookup(id).sinceFor(worker); oldest.IsZero() || s.Before(oldest) {
			oldest = s
		}
	}
	return oldest, len(d.byWorker[worker]) > 0
}

// Progress returns a snapshot of the counters.
func (d *Dispatcher) Progress() Progress {
	p := Progress{
		Epoch:             d.epoch,
		NumEpochs:         d.cfg.NumEpochs,
		EpochRecordsTotal: d.epochTotal,
		RecordsTotal:      d.epochTotal * int64(d.cfg.NumEpochs),
		TasksTodo:         d.trainTodo.len() + d.evalTodo.len(),
		TasksDoing:        len(d.doing),
		TasksDone:         d.tasksDone,
		TasksFailed:       d.tasksFailed,
		EvalTasksTodo:     d.evalTodo.len(),
		EvalTasksDoing:    d.evalDoing,
		Failures:          d.failures,
		Requeues:          d.requeues,
		LateReports:       d.lateReports,
		RecordsReported:   d.recordsReported,
		CorruptRecords:    d.corrupt,
		LossSum:           d.lossSum,
		Steps:             d.steps,
		LastAccepted:      d.lastAccepted,
		Finished:          d.Finished(),
		Failed:            d.err != nil,
	}
	for i, ep := range d.epochs {
		p.RecordsDone += ep.recordsDone
		if ep.tasksDone == ep.tasks {
			p.EpochsDone++
		}
		if i+1 == d.epoch {
			p.EpochRecordsDone = ep.recordsDone
		}
	}
	return p
}
