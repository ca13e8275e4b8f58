// Package task is the master's dynamic data sharding: it cuts the training
// data into tasks ("records [Start,End) of shard X in epoch E"), hands them
// out on demand to workers that come and go, and tracks every task until it
// is trained, so that each record is trained exactly once per epoch no matter
// how often workers are preempted, killed or relaunched.
//
// The Dispatcher is a pure state machine: no I/O, no goroutines, no clock
// reads (methods that need time take a now argument) and no randomness other
// than the config-seeded shuffle. That keeps it deterministic and testable
// with a fake clock. It is NOT safe for concurrent use: the master serialises
// all calls with a mutex.
//
// Unlike the original ElasticDL it never drops a task silently (a task that
// keeps failing fails the job loudly, see Dispatcher.Err), it times out tasks
// held by silent workers (Dispatcher.Tick), and it never tells a worker
// "done" while other workers still hold tasks that may come back (KindWait).
package task

import (
	"errors"
	"fmt"
	"time"
)

// Shard is a data source (a file, a table) and its number of records.
type Shard struct {
	Name    string
	Records int64
}

// Type is what a worker does with a task's records.
type Type int

// Task types.
const (
	Training Type = iota
	Evaluation
	Prediction // created by Dispatcher.AddPrediction
)

func (t Type) String() string {
	switch t {
	case Training:
		return "training"
	case Evaluation:
		return "evaluation"
	case Prediction:
		return "prediction"
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// Task is a contiguous range of records [Start,End) of one shard.
type Task struct {
	ID    int64
	Type  Type
	Shard string
	Start int64 // first record, inclusive
	End   int64 // last record, exclusive
	// Epoch is 1-based for training tasks and 0 for evaluation tasks.
	Epoch int
	// Attempt is the number of times this task has failed so far (error
	// reports only): 0 on the first try. Worker deaths and timeouts are
	// counted separately and do not change it.
	Attempt int
	// ModelVersion is the model version an evaluation task evaluates (the
	// version passed to AddEvaluation); for a prediction task, the number of
	// its pass (AddPrediction); 0 for training tasks.
	ModelVersion int64
	// Done counts the task's records already trained in committed steps by
	// an earlier holder (see Dispatcher.Commit), in the task's own
	// deterministic record order: the holder starts after them.
	Done int64
}

// Records is the number of records in the task.
func (t Task) Records() int64 { return t.End - t.Start }

func (t Task) String() string {
	s := fmt.Sprintf("task %d (%s, shard %q, records [%d,%d)", t.ID, t.Type, t.Shard, t.Start, t.End)
	if t.Type == Training {
		s += fmt.Sprintf(", epoch %d", t.Epoch)
	} else {
		s += fmt.Sprintf(", model version %d", t.ModelVersion)
	}
	return s + ")"
}

// Config configures a Dispatcher. See New for validation.
type Config struct {
	// Training lists the training shards; names must be unique and non-empty
	// and each shard must have at least one record.
	Training []Shard
	// RecordsPerTask is minibatch_size × num_minibatches_per_task (e.g. 64×8).
	RecordsPerTask int64
	// NumEpochs is the number of passes over the training data (>= 1), or 0
	// for a job without training (Training empty): evaluation or prediction
	// only.
	NumEpochs int
	// MaxAttempts is how many error reports a single task may receive; the
	// MaxAttempts-th failure makes the job fail (Err). Worker deaths and
	// timeouts do not count, see MaxRequeues.
	MaxAttempts int
	// MaxRequeues caps how often one task may be taken back from a worker
	// (worker lost or timed out): the MaxRequeues-th time fails the job, so
	// a poison task that kills every worker that touches it cannot loop
	// forever. 0 means 10 × MaxAttempts; negative is invalid.
	MaxRequeues int
	// TaskTimeout: a task held longer than this goes back to todo on the next
	// Tick. 0 disables timeouts.
	TaskTimeout time.Duration
	// Shuffle shuffles the order of each epoch's training tasks, reproducibly
	// for a given Seed.
	Shuffle bool
	Seed    int64
}

// Kind says what a worker should do after Get.
type Kind int

// Assignment kinds.
const (
	// KindTask: train/evaluate Assignment.Task and report it.
	KindTask Kind = iota
	// KindWait: nothing to do now, but work may still appear (tasks held by
	// other workers may come back); ask again later.
	KindWait
	// KindDone: the job is finished or has failed; the worker may exit.
	KindDone
)

func (k Kind) String() string {
	switch k {
	case KindTask:
		return "task"
	case KindWait:
		return "wait"
	case KindDone:
		return "done"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Assignment is the answer to Get. Task is set only for KindTask.
type Assignment struct {
	Kind Kind
	Task Task
}

// Result is what a worker reports for a task.
type Result struct {
	// Err is empty on success; otherwise it describes the failure.
	Err string
	// Records is the number of records processed, Corrupt the number skipped
	// as unreadable; neither may be negative.
	Records, Corrupt int64
	// LossSum is the sum of per-record losses (so means can be aggregated
	// across tasks), Steps the number of optimiser steps taken.
	LossSum float64
	Steps   int64
}

// State is the life-cycle state of a task.
type State int

// Task states.
const (
	Todo   State = iota // waiting to be handed out
	Doing               // held by a worker
	Done                // reported successfully
	Failed              // gave up on it; the job has failed (see Err)
)

func (s State) String() string {
	switch s {
	case Todo:
		return "todo"
	case Doing:
		return "doing"
	case Done:
		return "done"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Progress is a snapshot of the dispatcher's counters.
type Progress struct {
	// Epoch is the latest epoch whose training tasks exist (1..NumEpochs).
	// Because epochs are not barriers, tasks of earlier epochs may still be
	// in flight; EpochsDone counts fully trained epochs.
	Epoch      int
	NumEpochs  int
	EpochsDone int
	// EpochRecordsDone/Total are the records of epoch Epoch, RecordsDone/
	// Total those of all NumEpochs epochs; "done" means the task was reported
	// successfully by its owner.
	EpochRecordsDone, EpochRecordsTotal int64
	RecordsDone, RecordsTotal           int64
	// Task counts over all task types that exist so far.
	TasksTodo, TasksDoing, TasksDone, TasksFailed int
	// Evaluation tasks waiting or held (included in the counts above).
	EvalTasksTodo, EvalTasksDoing int
	// Failures counts accepted error reports (they count toward MaxAttempts).
	Failures int64
	// Requeues counts tasks taken back from lost or timed-out workers (they
	// count toward MaxRequeues, not MaxAttempts).
	Requeues int64
	// LateReports counts reports rejected because the reporting worker had
	// held the task but no longer did (timed out or declared lost).
	LateReports int64
	// RecordsReported, CorruptRecords, LossSum and Steps sum the Results of
	// accepted successful training reports.
	RecordsReported, CorruptRecords int64
	LossSum                         float64
	Steps                           int64
	// LastAccepted is the time of the last accepted report (zero if none);
	// useful to detect a stalled job.
	LastAccepted time.Time
	Finished     bool
	Failed       bool
}

// EpochCoverage says how well one epoch's training records were covered by
// successful reports, counting honestly the late reports that were rejected
// (their gradients were pushed anyway).
type EpochCoverage struct {
	Epoch int
	// Records is the number of training records in the epoch.
	Records int64
	// RecordsTrained: records reported trained at least once.
	RecordsTrained int64
	// RecordsTrainedTwice: records reported trained two or more times.
	RecordsTrainedTwice int64
	// RecordsMissed: records never reported trained; only computed for
	// finished epochs (all tasks done), 0 while the epoch is in progress.
	RecordsMissed int64
	// Finished reports whether all the epoch's tasks are done.
	Finished bool
}

// EvalStats aggregates the successful reports of one evaluation pass.
type EvalStats struct {
	ModelVersion int64
	Tasks        int // tasks in the pass
	TasksDone    int
	// Complete is true once every task of the pass is done.
	Complete bool
	// Sums over the accepted successful reports of the pass.
	Records, Corrupt int64
	LossSum          float64
	Steps            int64
}

// PredictionStats is the progress of one prediction pass.
type PredictionStats struct {
	Pass             int64
	Tasks            int
	TasksDone        int
	Complete         bool
	Records, Corrupt int64
}

// Errors returned by Report, wrapped with context; test with errors.Is.
var (
	ErrUnknownTask   = errors.New("unknown task")
	ErrNotOwner      = errors.New("task not held by this worker")
	ErrInvalidResult = errors.New("invalid result")
)

// FailedError is the error Err returns once a task cannot be completed. It
// names the task (ID, shard, range, epoch) and the last error reported.
type FailedError struct {
	Task Task
	// Failures is the number of error reports the task got, Requeues the
	// number of times it was taken back from lost/timed-out workers.
	Failures, Requeues int
	// LastErr is the last error a worker reported for it ("" if none).
	LastErr string
	// Why is the cap that was hit.
	Why string
}

func (e *FailedError) Error() string {
	msg := fmt.Sprintf("%s cannot be completed: %s (failures %d, requeues %d)", e.Task, e.Why, e.Failures, e.Requeues)
	if e.LastErr != "" {
		msg += "; last error: " + e.LastErr
	}
	return msg
}
