package task

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Snapshot is a Dispatcher's state in a form to persist (JSON), so that a
// master that restarts can rebuild it (Restore) and go on where the last
// one stopped. It is compact: tasks are not listed one by one but re-made
// by replaying what created them (epochs, passes) — their IDs, ranges and
// order follow from the Config — and only what differs from a fresh task
// is kept. Tasks go out in the order they were made, so a queue is its
// front (tasks taken back) and how many fresh tasks went out; of those, the
// ones not listed (Tasks) and not queued again are done — the bulk of a
// job needs no entry at all.
type Snapshot struct {
	Created []Creation `json:"created"`
	// Tasks are the tasks that differ from a fresh one, but for done tasks
	// that differ in nothing else.
	Tasks []TaskSnapshot `json:"tasks,omitempty"`
	// Queues: the IDs taken back, front first, and how many fresh tasks
	// went out, per queue.
	TrainFront []int64 `json:"train_front,omitempty"`
	TrainNext  int     `json:"train_next"`
	EvalFront  []int64 `json:"eval_front,omitempty"`
	EvalNext   int     `json:"eval_next"`
	// Coverage lists the record ranges whose count differs from what the
	// tasks' states give (1 for a done task, else 0): late reports. In
	// task ID order.
	Coverage    []CoverageSnapshot `json:"coverage,omitempty"`
	Evaluations []EvalStats        `json:"evaluations,omitempty"`
	Predictions []PredictionStats  `json:"predictions,omitempty"`
	Err         *FailedError       `json:"err,omitempty"`

	Failures        int64     `json:"failures"`
	Requeues        int64     `json:"requeues"`
	LateReports     int64     `json:"late_reports"`
	RecordsReported int64     `json:"records_reported"`
	Corrupt         int64     `json:"corrupt"`
	Steps           int64     `json:"steps"`
	LossSum         float64   `json:"loss_sum"`
	LastAccepted    time.Time `json:"last_accepted"`
}

// Creation is what made a batch of tasks: training epoch Epoch, or an
// evaluation (of model Version) or prediction pass over Shards.
type Creation struct {
	Epoch          int     `json:"epoch,omitempty"`
	Type           Type    `json:"type,omitempty"`
	Shards         []Shard `json:"shards,omitempty"`
	RecordsPerTask int64   `json:"records_per_task,omitempty"`
	Version        int64   `json:"version,omitempty"`
}

// TaskSnapshot is a task that differs from a fresh one.
type TaskSnapshot struct {
	ID       int64     `json:"id"`
	State    State     `json:"state"`
	Owner    int       `json:"owner,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Attempt  int       `json:"attempt,omitempty"`
	Done     int64     `json:"done,omitempty"`
	Requeues int       `json:"requeues,omitempty"`
	LastErr  string    `json:"last_err,omitempty"`
	Former   []int     `json:"former,omitempty"`
	// Backup is a doing task's second holder (backup.go); Superseded the
	// holders whose copy lost the race and has not reported yet.
	Backup     *BackupHolder `json:"backup,omitempty"`
	Superseded []int         `json:"superseded,omitempty"`
}

// BackupHolder is the worker holding a backup copy of a task, and since
// when.
type BackupHolder struct {
	Worker int       `json:"worker"`
	Since  time.Time `json:"since"`
}

// CoverageSnapshot is one record range's count in an epoch's coverage.
type CoverageSnapshot struct {
	Epoch int    `json:"epoch"`
	Shard string `json:"shard"`
	Start int64  `json:"start"`
	End   int64  `json:"end"`
	Count int    `json:"count"`
}

// Snapshot returns the dispatcher's state (see Snapshot).
func (d *Dispatcher) Snapshot() Snapshot {
	s := Snapshot{
		Created:    slices.Clone(d.created),
		TrainFront: d.trainTodo.front.items(), TrainNext: d.trainTodo.next,
		EvalFront: d.evalTodo.front.items(), EvalNext: d.evalTodo.next,
		Failures: d.failures, Requeues: d.requeues, LateReports: d.lateReports,
		RecordsReported: d.recordsReported, Corrupt: d.corrupt, Steps: d.steps, LossSum: d.lossSum,
		LastAccepted: d.lastAccepted,
	}
	var failed *FailedError
	if errors.As(d.err, &failed) {
		e := *failed
		s.Err = &e
	}
	settled := true // so far from settledBelow
	for id := max(d.settledBelow, 1); id <= d.ntasks; id++ {
		e := d.lookup(id)
		implied := true
		if e.task.Type == Training {
			// A done task's range counts once in its epoch's coverage, an
			// other's not at all; late reports and rewinds move that.
			want, k := 0, rangeKey{e.task.Shard, e.task.Start, e.task.End}
			if e.state == Done {
				want = 1
			}
			if n := d.epochs[e.task.Epoch-1].cov[k]; n != want {
				s.Coverage = append(s.Coverage, CoverageSnapshot{Epoch: e.task.Epoch, Shard: k.shard, Start: k.start, End: k.end, Count: n})
				implied = false
			}
		}
		plain := e.task.Done == 0 && e.task.Attempt == 0 && e.requeues == 0 && e.lastErr == "" && len(e.former) == 0 &&
			!e.hasBackup && len(e.superseded) == 0
		settled = settled && implied && plain && e.state == Done
		if settled {
			d.settledBelow = id + 1
		}
		if plain && (e.state == Todo || e.state == Done) {
			continue // implied: done if it went out and is not queued again
		}
		ts := TaskSnapshot{ID: id, State: e.state, Attempt: e.task.Attempt, Done: e.task.Done,
			Requeues: e.requeues, LastErr: e.lastErr, Former: slices.Clone(e.former), Superseded: slices.Clone(e.superseded)}
		if e.state == Doing {
			ts.Owner, ts.Since = e.owner, e.since
		}
		if e.hasBackup {
			ts.Backup = &BackupHolder{Worker: e.backup, Since: e.backupSince}
		}
		s.Tasks = append(s.Tasks, ts)
	}
	for _, v := range slices.Sorted(maps.Keys(d.evals)) {
		s.Evaluations = append(s.Evaluations, *d.evals[v])
	}
	for _, p := range slices.Sorted(maps.Keys(d.preds)) {
		s.Predictions = append(s.Predictions, *d.preds[p])
	}
	return s
}

// Restore rebuilds a Dispatcher from cfg (the job's, as when the snapshot
// was taken) and s. It fails on a snapshot that does not fit cfg.
func Restore(cfg Config, s Snapshot) (*Dispatcher, error) {
	d, err := newDispatcher(cfg)
	if err != nil {
		return nil, err
	}
	for _, c := range s.Created {
		switch {
		case c.Epoch > 0:
			if c.Epoch != d.epoch+1 || c.Epoch > cfg.NumEpochs {
				return nil, fmt.Errorf("restore: epoch %d after epoch %d of %d", c.Epoch, d.epoch, cfg.NumEpochs)
			}
			d.createEpoch()
		case c.Type == Evaluation:
			if err := d.AddEvaluation(c.Shards, c.RecordsPerTask, c.Version); err != nil {
				return nil, fmt.Errorf("restore: %w", err)
			}
		case c.Type == Prediction:
			if _, err := d.AddPrediction(c.Shards, c.RecordsPerTask); err != nil {
				return nil, fmt.Errorf("restore: %w", err)
			}
		default:
			return nil, fmt.Errorf("restore: unknown creation %+v", c)
		}
	}
	listed := map[int64]bool{}
	for _, ts := range s.Tasks {
		if listed[ts.ID] {
			return nil, fmt.Errorf("restore: task %d listed twice", ts.ID)
		}
		listed[ts.ID] = true
		if err := d.restoreTask(ts); err != nil {
			return nil, err
		}
	}
	if err := d.restoreQueue(&d.trainTodo, s.TrainFront, s.TrainNext, listed); err != nil {
		return nil, err
	}
	if err := d.restoreQueue(&d.evalTodo, s.EvalFront, s.EvalNext, listed); err != nil {
		return nil, err
	}
	for _, c := range s.Coverage {
		if c.Epoch < 1 || c.Epoch > len(d.epochs) {
			return nil, fmt.Errorf("restore: coverage of epoch %d of %d", c.Epoch, len(d.epochs))
		}
		d.epochs[c.Epoch-1].cov[rangeKey{c.Shard, c.Start, c.End}] = c.Count
	}
	for _, e := range s.Evaluations {
		if d.evals[e.ModelVersion] == nil {
			return nil, fmt.Errorf("restore: evaluation of version %d was never created", e.ModelVersion)
		}
		*d.evals[e.ModelVersion] = e
	}
	for _, p := range s.Predictions {
		if d.preds[p.Pass] == nil {
			return nil, fmt.Errorf("restore: prediction pass %d was never created", p.Pass)
		}
		*d.preds[p.Pass] = p
	}
	if s.Err != nil {
		e := *s.Err
		d.err = &e
	}
	d.failures, d.requeues, d.lateReports = s.Failures, s.Requeues, s.LateReports
	d.recordsReported, d.corrupt, d.steps, d.lossSum = s.RecordsReported, s.Corrupt, s.Steps, s.LossSum
	d.lastAccepted = s.LastAccepted
	return d, nil
}

// restoreTask gives a fresh task the state ts says, with the counts that
// follow from it.
func (d *Dispatcher) restoreTask(ts TaskSnapshot) error {
	e := d.lookup(ts.ID)
	switch {
	case e == nil:
		return fmt.Errorf("restore: task %d does not exist", ts.ID)
	case ts.Done < 0 || ts.Done > e.task.Records():
		return fmt.Errorf("restore: task %d: %d of %d records done", ts.ID, ts.Done, e.task.Records())
	case ts.Backup != nil && (ts.State != Doing || ts.Backup.Worker == ts.Owner):
		return fmt.Errorf("restore: task %d: a backup held by worker %d, the task %s by worker %d", ts.ID, ts.Backup.Worker, ts.State, ts.Owner)
	}
	e.task.Attempt, e.task.Done = ts.Attempt, ts.Done
	e.requeues, e.lastErr, e.former = ts.Requeues, ts.LastErr, slices.Clone(ts.Former)
	switch ts.State {
	case Todo:
	case Doing:
		d.assign(e, ts.Owner, ts.Since)
		if b := ts.Backup; b != nil {
			d.setBackup(e, b.Worker, b.Since)
		}
	case Done:
		e.state = Done
		d.tasksDone++
		if e.task.Type == Training {
			ep := &d.epochs[e.task.Epoch-1]
			ep.tasksDone++
			ep.recordsDone += e.task.Records()
			ep.cov.add(e.task)
		}
	case Failed:
		e.state = Failed
		d.tasksFailed++
	default:
		return fmt.Errorf("restore: task %d in state %v", ts.ID, ts.State)
	}
	e.superseded = slices.Clone(ts.Superseded)
	return nil
}

// restoreQueue sets a queue to front then the fresh tasks from next on;
// the fresh tasks that went out, are not listed and not in front are done.
func (d *Dispatcher) restoreQueue(q *queue, front []int64, next int, listed map[int64]bool) error {
	if next < 0 || next > len(q.fresh) {
		return fmt.Errorf("restore: %d of %d fresh tasks out", next, len(q.fresh))
	}
	queued := map[int64]bool{}
	for _, id := range front {
		if e := d.lookup(id); e == nil || e.state != Todo || queued[id] {
			return fmt.Errorf("restore: task %d queued but not todo, or twice", id)
		}
		queued[id] = true
	}
	for _, id := range q.fresh[:next] {
		if !listed[id] && !queued[id] {
			if err := d.restoreTask(TaskSnapshot{ID: id, State: Done}); err != nil {
				return err
			}
		}
	}
	q.next = next
	for _, id := range slices.Backward(front) {
		q.pushFront(id)
	}
	return nil
}
