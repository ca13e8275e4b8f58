package task

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func mustNew(t testing.TB, cfg Config) *Dispatcher {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return d
}

// baseConfig: 2 shards, 10 records per task, tasks: a[0,10) a[10,20) a[20,25) b[0,10).
func baseConfig() Config {
	return Config{
		Training:       []Shard{{"a", 25}, {"b", 10}},
		RecordsPerTask: 10,
		NumEpochs:      1,
		MaxAttempts:    3,
	}
}

func mustGet(t testing.TB, d *Dispatcher, worker int, now time.Time) Task {
	t.Helper()
	a := d.Get(worker, now)
	if a.Kind != KindTask {
		t.Fatalf("Get(worker %d) = %v, want a task (progress %+v)", worker, a.Kind, d.Progress())
	}
	return a.Task
}

func mustReport(t testing.TB, d *Dispatcher, worker int, task Task, r Result, now time.Time) {
	t.Helper()
	if err := d.Report(worker, task.ID, r, now); err != nil {
		t.Fatalf("Report(worker %d, %v): %v", worker, task, err)
	}
}

func ok(task Task) Result { return Result{Records: task.Records(), Steps: 1, LossSum: 0.5} }

// snapshot captures everything observable, to check that rejected calls
// leave the state machine unchanged.
type snapshot struct {
	progress  Progress
	coverage  []EpochCoverage
	trainTodo []int64
	evalTodo  []int64
	tasks     []entry
}

func snap(d *Dispatcher) snapshot {
	s := snapshot{
		progress:  d.Progress(),
		coverage:  d.Coverage(),
		trainTodo: d.trainTodo.items(),
		evalTodo:  d.evalTodo.items(),
	}
	for id := int64(1); id <= d.ntasks; id++ {
		e := *d.lookup(id)
		e.former = slices.Clone(e.former)
		s.tasks = append(s.tasks, e)
	}
	return s
}
