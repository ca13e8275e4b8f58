package worker

// stepBook is a ring member's account of its own records, with no I/O:
// the training tasks it holds, which of their records went into which
// step, and which steps are confirmed (every member finished them). The
// member takes records for a step (take), confirms steps as the ring moves
// on (confirm), and, when a ring re-forms, keeps the records the agreed
// state holds and gives the others back to be redone (settle).
type stepBook struct {
	tasks   []*ringTask  // held, with records not yet all confirmed
	records []stepRecord // this member's records in unconfirmed steps
}

// stepRecord is one member's part of a step not yet confirmed.
type stepRecord struct {
	task       *ringTask
	start, end int64 // records [start,end) of the task
	step       int64 // the step it went into
	loss       float64
}

// add holds a new task.
func (b *stepBook) add(rt *ringTask) { b.tasks = append(b.tasks, rt) }

// pending returns a task with records left to take, or nil.
func (b *stepBook) pending() *ringTask {
	for _, rt := range b.tasks {
		if rt.next < rt.total() {
			return rt
		}
	}
	return nil
}

// take puts up to n next records of rt into step; it returns the records
// [start,end) taken. A rest shorter than minStepRecords goes with them:
// shares by rate cut tasks at any record, and a later step of one record
// would fail a BatchNorm model.
func (b *stepBook) take(rt *ringTask, n, step int64) (start, end int64) {
	start, end = rt.next, min(rt.next+n, rt.total())
	if rest := rt.total() - end; rest > 0 && rest < minStepRecords {
		end = rt.total()
	}
	rt.next = end
	b.records = append(b.records, stepRecord{task: rt, start: start, end: end, step: step})
	return start, end
}

// setLoss records the loss summed over the last record's records.
func (b *stepBook) setLoss(loss float64) { b.records[len(b.records)-1].loss = loss }

// confirm counts the records of every step up to upTo as trained, and
// returns the tasks now trained in full, which the book no longer holds.
func (b *stepBook) confirm(upTo int64) (complete []*ringTask) {
	keep := b.records[:0]
	for _, r := range b.records {
		if r.step > upTo {
			keep = append(keep, r)
			continue
		}
		r.task.confirmed = r.end
		r.task.report.Records += r.end - r.start
		r.task.report.LossSum += r.loss
		r.task.report.Steps++
	}
	b.records = keep
	tasks := b.tasks[:0]
	for _, rt := range b.tasks {
		if rt.confirmed == rt.total() {
			complete = append(complete, rt)
		} else {
			tasks = append(tasks, rt)
		}
	}
	b.tasks = tasks
	return complete
}

// settle, after a ring agreed on a state, keeps the records that state
// holds (held says which) as if confirmed by it, and gives every other
// record back to its task, to be taken again.
func (b *stepBook) settle(held func(r stepRecord) bool) {
	keep := b.records[:0]
	for _, r := range b.records {
		switch {
		case held(r):
			r.step = 0 // in the agreed state: the next confirm counts it
			keep = append(keep, r)
		case r.start < r.task.next:
			r.task.next = r.start
		}
	}
	b.records = keep
}

// reset forgets every task and record (their state was lost; the master
// took the tasks back).
func (b *stepBook) reset() { b.tasks, b.records = nil, nil }

// empty reports whether the book holds no task.
func (b *stepBook) empty() bool { return len(b.tasks) == 0 }

// busy reports whether enough work waits to be confirmed that no new task
// should be fetched yet.
func (b *stepBook) busy() bool { return len(b.tasks) > 1 }
