package task

import "slices"

// Rewind sets the training tasks' progress back to what survives a lost
// model state (AllReduce: every worker holding it was lost, and the job
// goes on from a checkpoint or the initial model). keep(t) is how many of
// t's first records the surviving state holds. Every held training task
// is taken from its holder (its unconfirmed work is gone with the state;
// its later commits and report are rejected), and every done one that the
// state does not hold in full is reopened (its epoch's counts and coverage
// no longer hold it); both go to the front of todo with Done = keep(t), as
// does a queued task's progress. It returns the tasks rewound, in ID order.
// Rewinds do not count toward MaxRequeues.
func (d *Dispatcher) Rewind(keep func(Task) int64) []Task {
	var out []Task
	var queue []int64
	d.touch(1) // any task may change
	for id := int64(1); id <= d.ntasks; id++ {
		e := d.lookup(id)
		if e.task.Type != Training || e.state == Failed {
			continue
		}
		k := min(max(keep(e.task), 0), e.task.Records())
		switch e.state {
		case Todo:
			if k >= e.task.Done {
				continue
			}
		case Doing:
			e.former = append(e.former, e.holders()...)
			d.release(e)
			e.state = Todo
			queue = append(queue, id)
		case Done:
			if k == e.task.Records() {
				continue
			}
			ep := &d.epochs[e.task.Epoch-1]
			ep.tasksDone--
			ep.recordsDone -= e.task.Records()
			ep.dropCov(e.task)
			d.tasksDone--
			e.state = Todo
			queue = append(queue, id)
		}
		e.task.Done = k
		out = append(out, e.task)
	}
	// The front of todo, lowest ID first, as requeue does.
	for _, id := range slices.Backward(queue) {
		d.trainTodo.pushFront(id)
	}
	return out
}
