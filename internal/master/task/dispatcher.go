package task

import (
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
	// backup is a second holder (a backup task, see backup.go), valid
	// when hasBackup; superseded lists holders whose copy lost the race:
	// their report is taken and dropped.
	hasBackup   bool
	backup      int
	backupSince time.Time
	superseded  []int
}

type epochState struct {
	tasks, tasksDone int
	recordsDone      int64
	cov              coverage
	// measured: once and twice are cov's measure, until cov changes
	// (every change after Restore goes through addCov or dropCov): a
	// finished epoch is not sorted again for each Coverage.
	measured    bool
	once, twice int64
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
