package task

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// entry is the dispatcher's record of one task.
type entry struct {
	task     Task
	state    State
	owner    int       // valid when state == Doing
	since    time.Time // when the current owner got it
	requeues int
	lastErr  string
	// former lists workers that held the task and lost it to a timeout or a
	// worker-lost event without reporting; their late reports are rejected
	// but a late success still counts in coverage (the gradients were
	// pushed). Each former holder is counted at most once.
	former []int
}

type epochState struct {
	tasks, tasksDone int
	recordsDone      int64
	cov              coverage
}

// Dispatcher hands out tasks and tracks them until they are done. Create it
// with New. It is not safe for concurrent use; callers serialise access.
type Dispatcher struct {
	cfg         Config
	maxRequeues int
	epochTotal  int64 // training records per epoch

	// Task id lives at index id-1 of the chunked store: IDs are dense and
	// never reused. Fixed-size chunks mean creating an epoch never copies
	// older tasks and pointers to entries stay valid.
	chunks [][]entry
	ntasks int64
	// settledBelow: every task with a lower ID is done, plain and counted
	// once in its epoch's coverage, which a snapshot implies; Snapshot
	// scans from here (and moves it up), so that a state write costs the
	// tasks not yet settled, not every task of the job so far. A change
	// to a task below it (a reopen, a rewind) moves it down (touch). A
	// late report never finds one there: its task has a former holder,
	// and a task that had one is never plain again (requeues > 0).
	settledBelow int64
	// Evaluation tasks are served before training tasks so evaluation
	// results reflect the model version they were requested for.
	evalTodo, trainTodo queue
	doing               map[int64]struct{}
	byWorker            map[int][]int64 // held task IDs; a worker holds few

	epoch  int // latest epoch whose tasks were created
	epochs []epochState

	evals map[int64]*EvalStats       // by model version
	preds map[int64]*PredictionStats // by pass
	// nextPred numbers prediction passes.
	nextPred int64

	err error
	// created logs what made the tasks, in order (their IDs follow it):
	// a snapshot replays it instead of holding every task.
	created []Creation

	tasksDone, tasksFailed, evalDoing int
	failures, requeues, lateReports   int64
	recordsReported, corrupt, steps   int64
	lossSum                           float64
	lastAccepted                      time.Time
}

// New validates cfg and returns a Dispatcher with the first epoch's tasks
// queued. It fails if there are no shards, a shard has no records, an empty
// or duplicate name, RecordsPerTask <= 0, NumEpochs < 1, MaxAttempts < 1,
// MaxRequeues < 0 or TaskTimeout < 0.
//
// NumEpochs == 0 makes a dispatcher without training (evaluation-only or
// prediction-only jobs): Training must then be empty, and the work is what
// AddEvaluation and AddPrediction queue.
func New(cfg Config) (*Dispatcher, error) {
	d, err := newDispatcher(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.NumEpochs > 0 {
		d.createEpoch()
	}
	return d, nil
}

// newDispatcher checks cfg and returns a Dispatcher without tasks.
func newDispatcher(cfg Config) (*Dispatcher, error) {
	if cfg.NumEpochs < 0 {
		return nil, fmt.Errorf("task config: NumEpochs must be >= 0, got %d", cfg.NumEpochs)
	}
	if cfg.NumEpochs == 0 {
		if len(cfg.Training) != 0 {
			return nil, fmt.Errorf("task config: NumEpochs is 0 (no training) but %d training shards are given", len(cfg.Training))
		}
	} else if err := validateShards(cfg.Training); err != nil {
		return nil, fmt.Errorf("task config: training shards: %w", err)
	}
	switch {
	case cfg.RecordsPerTask <= 0:
		return nil, fmt.Errorf("task config: RecordsPerTask must be > 0, got %d", cfg.RecordsPerTask)
	case cfg.MaxAttempts < 1:
		return nil, fmt.Errorf("task config: MaxAttempts must be >= 1, got %d", cfg.MaxAttempts)
	case cfg.MaxRequeues < 0:
		return nil, fmt.Errorf("task config: MaxRequeues must be >= 0, got %d", cfg.MaxRequeues)
	case cfg.TaskTimeout < 0:
		return nil, fmt.Errorf("task config: TaskTimeout must be >= 0, got %v", cfg.TaskTimeout)
	}
	cfg.Training = slices.Clone(cfg.Training) // the caller may reuse its slice
	d := &Dispatcher{
		cfg:         cfg,
		maxRequeues: cfg.MaxRequeues,
		doing:       make(map[int64]struct{}),
		byWorker:    make(map[int][]int64),
		evals:       make(map[int64]*EvalStats),
		preds:       make(map[int64]*PredictionStats),
	}
	if d.maxRequeues == 0 {
		d.maxRequeues = 10 * cfg.MaxAttempts
	}
	for _, s := range cfg.Training {
		d.epochTotal += s.Records
	}
	return d, nil
}

func validateShards(shards []Shard) error {
	if len(shards) == 0 {
		return fmt.Errorf("no shards")
	}
	seen := make(map[string]bool, len(shards))
	for i, s := range shards {
		switch {
		case s.Name == "":
			return fmt.Errorf("shard %d has no name", i)
		case seen[s.Name]:
			return fmt.Errorf("duplicate shard %q", s.Name)
		case s.Records <= 0:
			return fmt.Errorf("shard %q has %d records, want > 0", s.Name, s.Records)
		}
		seen[s.Name] = true
	}
	return nil
}

const chunkSize = 1024

func (d *Dispatcher) newEntry(t Task) int64 {
	if d.ntasks%chunkSize == 0 {
		d.chunks = append(d.chunks, make([]entry, 0, chunkSize))
	}
	d.ntasks++
	t.ID = d.ntasks
	c := &d.chunks[len(d.chunks)-1]
	*c = append(*c, entry{task: t, state: Todo})
	return t.ID
}

// touch notes a change to task id that may unsettle it (see settledBelow).
func (d *Dispatcher) touch(id int64) { d.settledBelow = min(d.settledBelow, id) }

// lookup returns task id's entry, or nil if there is no such task.
func (d *Dispatcher) lookup(id int64) *entry {
	if id < 1 || id > d.ntasks {
		return nil
	}
	return &d.chunks[(id-1)/chunkSize][(id-1)%chunkSize]
}

// cut splits shards into tasks of at most per records, in shard order.
func (d *Dispatcher) cut(shards []Shard, per int64, tmpl Task) []int64 {
	var ids []int64
	for _, s := range shards {
		for start := int64(0); start < s.Records; start += per {
			t := tmpl
			t.Shard, t.Start, t.End = s.Name, start, min(start+per, s.Records)
			ids = append(ids, d.newEntry(t))
		}
	}
	return ids
}

// createEpoch queues the next epoch's training tasks.
func (d *Dispatcher) createEpoch() {
	d.epoch++
	ids := d.cut(d.cfg.Training, d.cfg.RecordsPerTask, Task{Type: Training, Epoch: d.epoch})
	if d.cfg.Shuffle {
		// Seeded per epoch so each epoch has its own order, yet a restarted
		// job with the same seed replays exactly the same orders.
		r := rand.New(rand.NewPCG(uint64(d.cfg.Seed), uint64(d.epoch)))
		r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	}
	for _, id := range ids {
		d.trainTodo.pushFresh(id)
	}
	d.epochs = append(d.epochs, epochState{tasks: len(ids), cov: make(coverage, len(ids))})
	d.created = append(d.created, Creation{Epoch: d.epoch})
}

// AddEvaluation queues one evaluation pass of the given model version over
// shards. Evaluation tasks are served before any training task. version
// identifies the pass (see Evaluation) and must not have been queued before.
// Evaluation tasks follow the same failure rules as training tasks: one that
// fails MaxAttempts times fails the job rather than being dropped.
// It fails on invalid shards, recordsPerTask <= 0, a reused version, or once
// the job has failed.
func (d *Dispatcher) AddEvaluation(shards []Shard, recordsPerTask int64, version int64) error {
	if d.err != nil {
		return fmt.Errorf("add evaluation of model version %d: job has failed: %w", version, d.err)
	}
	if err := validateShards(shards); err != nil {
		return fmt.Errorf("add evaluation of model version %d: %w", version, err)
	}
	if recordsPerTask <= 0 {
		return fmt.Errorf("add evaluation of model version %d: recordsPerTask must be > 0, got %d", version, recordsPerTask)
	}
	if _, dup := d.evals[version]; dup {
		return fmt.Errorf("add evaluation: model version %d already queued", version)
	}
	ids := d.cut(shards, recordsPerTask, Task{Type: Evaluation, ModelVersion: version})
	for _, id := range ids {
		d.evalTodo.pushFresh(id)
	}
	d.evals[version] = &EvalStats{ModelVersion: version, Tasks: len(ids)}
	d.created = append(d.created, Creation{Type: Evaluation, Shards: slices.Clone(shards), RecordsPerTask: recordsPerTask, Version: version})
	return nil
}

// AddPrediction queues one prediction pass over shards and returns its
// number (1, 2, ...; see Prediction). Prediction tasks share the evaluation
// queue: they are served before training tasks and, within a pass, in
// record order (the order their IDs were created in), so a caller writing
// results in input order buffers little. They follow the same failure rules
// as the other tasks. It fails on invalid shards, recordsPerTask <= 0, or
// once the job has failed.
func (d *Dispatcher) AddPrediction(shards []Shard, recordsPerTask int64) (int64, error) {
	if d.err != nil {
		return 0, fmt.Errorf("add prediction: job has failed: %w", d.err)
	}
	if err := validateShards(shards); err != nil {
		return 0, fmt.Errorf("add prediction: %w", err)
	}
	if recordsPerTask <= 0 {
		return 0, fmt.Errorf("add prediction: recordsPerTask must be > 0, got %d", recordsPerTask)
	}
	d.nextPred++
	pass := d.nextPred
	ids := d.cut(shards, recordsPerTask, Task{Type: Prediction, ModelVersion: pass})
	for _, id := range ids {
		d.evalTodo.pushFresh(id)
	}
	d.preds[pass] = &PredictionStats{Pass: pass, Tasks: len(ids)}
	d.created = append(d.created, Creation{Type: Prediction, Shards: slices.Clone(shards), RecordsPerTask: recordsPerTask})
	return pass, nil
}

// Prediction returns the progress of prediction pass number pass (see
// AddPrediction), and whether such a pass exists.
func (d *Dispatcher) Prediction(pass int64) (PredictionStats, bool) {
	s, ok := d.preds[pass]
	if !ok {
		return PredictionStats{}, false
	}
	return *s, true
}

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

// Holding is the number of tasks workers hold.
func (d *Dispatcher) Holding() int { return len(d.doing) }

func (d *Dispatcher) assign(e *entry, worker int, now time.Time) Assignment {
	e.state, e.owner, e.since = Doing, worker, now
	// The worker holds it again: its next report is the current one.
	e.former = slices.DeleteFunc(e.former, func(w int) bool { return w == worker })
	d.doing[e.task.ID] = struct{}{}
	if e.task.Type != Training {
		d.evalDoing++
	}
	d.byWorker[worker] = append(d.byWorker[worker], e.task.ID)
	return Assignment{Kind: KindTask, Task: e.task}
}

// release removes a doing task from its owner.
func (d *Dispatcher) release(e *entry) {
	delete(d.doing, e.task.ID)
	if e.task.Type != Training {
		d.evalDoing--
	}
	// An emptied slice is kept for the worker's next task (no allocation
	// per task); WorkerLost drops it.
	d.byWorker[e.owner] = slices.DeleteFunc(d.byWorker[e.owner], func(id int64) bool { return id == e.task.ID })
}

func (d *Dispatcher) queueFor(t Task) *queue {
	if t.Type == Training {
		return &d.trainTodo
	}
	return &d.evalTodo
}

// Report records worker's result for task taskID.
//
// It returns an error, and leaves the state machine unchanged, if the task is
// unknown (ErrUnknownTask), the result is invalid (ErrInvalidResult), or the
// worker does not currently hold the task (ErrNotOwner). One exception: a
// late successful report of a training task from a worker that held it
// before losing it to a timeout or WorkerLost is still counted in Coverage,
// since that worker's gradients were already applied; the report itself is
// rejected (the task stays with its new owner or in todo).
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
	if e.state != Doing || e.owner != worker {
		return d.rejectReport(worker, e, r)
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
		ep.cov.add(e.task)
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
		d.epochs[e.task.Epoch-1].cov.add(e.task)
		counted = "; its records are counted in coverage"
	}
	return fmt.Errorf("late report from worker %d for %s: %w (task is %s; worker lost it to a timeout or was declared lost)%s",
		worker, e.task, ErrNotOwner, e.state, counted)
}

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
	case e.state != Doing || e.owner != worker:
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
	if k := (rangeKey{e.task.Shard, e.task.Start, e.task.End}); ep.cov[k] > 0 {
		ep.cov[k]--
	}
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

// fail marks e Failed and fails the job; the first failure wins.
func (d *Dispatcher) fail(e *entry, why string) {
	e.state = Failed
	d.tasksFailed++
	if d.err == nil {
		d.err = &FailedError{Task: e.task, Failures: e.task.Attempt, Requeues: e.requeues, LastErr: e.lastErr, Why: why}
	}
}

// requeue takes the doing tasks ids away from their owners and puts them at
// the front of todo in ascending ID order (so the oldest work goes out
// first). Requeues do not count toward MaxAttempts, but a task requeued
// MaxRequeues times fails the job. It returns the tasks put back in todo.
func (d *Dispatcher) requeue(ids []int64, why string) []Task {
	slices.Sort(ids)
	var out []Task
	for _, id := range slices.Backward(ids) {
		e := d.lookup(id)
		d.release(e)
		d.requeues++
		e.requeues++
		e.former = append(e.former, e.owner)
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
	// Clone: requeue edits byWorker[worker] while walking ids.
	back := d.requeue(slices.Clone(d.byWorker[worker]), fmt.Sprintf("worker %d lost", worker))
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
	var ids []int64
	for id := range d.doing {
		if now.Sub(d.lookup(id).since) > d.cfg.TaskTimeout {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return d.requeue(ids, fmt.Sprintf("timed out after %v", d.cfg.TaskTimeout))
}

// RestartClocks starts every held task's timeout over at now: a master
// that took over from a dead one heard no report meanwhile.
func (d *Dispatcher) RestartClocks(now time.Time) {
	for id := range d.doing {
		d.lookup(id).since = now
	}
}

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
		if s := d.lookup(id).since; oldest.IsZero() || s.Before(oldest) {
			oldest = s
		}
	}
	return oldest, len(d.byWorker[worker]) > 0
}

// Evaluation returns the aggregated successful results of the evaluation
// pass queued for version, and whether such a pass exists.
func (d *Dispatcher) Evaluation(version int64) (EvalStats, bool) {
	s, ok := d.evals[version]
	if !ok {
		return EvalStats{}, false
	}
	return *s, true
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

// Coverage returns, for each epoch created so far, how many of its training
// records were reported trained once, twice or more, or (for finished
// epochs) never. It is an audit independent of task states: it is computed
// from the record ranges of every successful report, late ones included.
func (d *Dispatcher) Coverage() []EpochCoverage {
	out := make([]EpochCoverage, len(d.epochs))
	for i := range d.epochs {
		out[i], _ = d.EpochCoverage(i + 1)
	}
	return out
}

// EpochCoverage is Coverage of one epoch (1-based); false if the epoch does
// not exist yet. It costs a sort of that epoch's reports only.
func (d *Dispatcher) EpochCoverage(epoch int) (EpochCoverage, bool) {
	if epoch < 1 || epoch > len(d.epochs) {
		return EpochCoverage{}, false
	}
	ep := d.epochs[epoch-1]
	once, twice := ep.cov.measure()
	c := EpochCoverage{
		Epoch:               epoch,
		Records:             d.epochTotal,
		RecordsTrained:      once,
		RecordsTrainedTwice: twice,
		Finished:            ep.tasksDone == ep.tasks,
	}
	if c.Finished {
		c.RecordsMissed = d.epochTotal - once
	}
	return c, true
}
