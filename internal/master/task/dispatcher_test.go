package task

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
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

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string // "" = valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no shards", func(c *Config) { c.Training = nil }, "no shards"},
		{"zero records", func(c *Config) { c.Training = []Shard{{"a", 0}} }, "0 records"},
		{"negative records", func(c *Config) { c.Training = []Shard{{"a", -5}} }, "-5 records"},
		{"unnamed shard", func(c *Config) { c.Training = []Shard{{"", 5}} }, "no name"},
		{"duplicate shard", func(c *Config) { c.Training = []Shard{{"a", 5}, {"a", 6}} }, "duplicate"},
		{"zero records per task", func(c *Config) { c.RecordsPerTask = 0 }, "RecordsPerTask"},
		{"negative records per task", func(c *Config) { c.RecordsPerTask = -1 }, "RecordsPerTask"},
		{"zero epochs with training shards", func(c *Config) { c.NumEpochs = 0 }, "NumEpochs is 0"},
		{"zero epochs, no training", func(c *Config) { c.NumEpochs = 0; c.Training = nil }, ""},
		{"negative epochs", func(c *Config) { c.NumEpochs = -1; c.Training = nil }, "NumEpochs"},
		{"zero attempts", func(c *Config) { c.MaxAttempts = 0 }, "MaxAttempts"},
		{"negative requeues", func(c *Config) { c.MaxRequeues = -1 }, "MaxRequeues"},
		{"negative timeout", func(c *Config) { c.TaskTimeout = -time.Second }, "TaskTimeout"},
		{"one record per task", func(c *Config) { c.RecordsPerTask = 1 }, ""},
		{"task bigger than shards", func(c *Config) { c.RecordsPerTask = 1000 }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			tc.mod(&cfg)
			d, err := New(cfg)
			if tc.wantErr == "" {
				if err != nil || d == nil {
					t.Fatalf("New = %v, %v; want valid", d, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New error = %v, want containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewCopiesShards(t *testing.T) {
	cfg := baseConfig()
	d := mustNew(t, cfg)
	cfg.Training[0].Records = 1000 // caller reuses its slice
	if got := d.Progress().EpochRecordsTotal; got != 35 {
		t.Fatalf("EpochRecordsTotal = %d after caller mutated its config, want 35", got)
	}
}

type rng struct {
	shard      string
	start, end int64
}

func TestTaskCutting(t *testing.T) {
	tests := []struct {
		name   string
		shards []Shard
		per    int64
		want   []rng
	}{
		{"exact multiple", []Shard{{"a", 20}}, 10, []rng{{"a", 0, 10}, {"a", 10, 20}}},
		{"last shorter", []Shard{{"a", 25}}, 10, []rng{{"a", 0, 10}, {"a", 10, 20}, {"a", 20, 25}}},
		{"shard smaller than task", []Shard{{"a", 3}, {"b", 4}}, 10, []rng{{"a", 0, 3}, {"b", 0, 4}}},
		{"one record per task", []Shard{{"a", 3}}, 1, []rng{{"a", 0, 1}, {"a", 1, 2}, {"a", 2, 3}}},
		{"shard order kept", []Shard{{"z", 2}, {"a", 2}}, 2, []rng{{"z", 0, 2}, {"a", 0, 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := mustNew(t, Config{Training: tc.shards, RecordsPerTask: tc.per, NumEpochs: 1, MaxAttempts: 1})
			var got []rng
			for {
				a := d.Get(1, t0)
				if a.Kind != KindTask {
					break
				}
				if a.Task.Epoch != 1 || a.Task.Type != Training || a.Task.Attempt != 0 {
					t.Errorf("task %+v: want epoch 1, training, attempt 0", a.Task)
				}
				got = append(got, rng{a.Task.Shard, a.Task.Start, a.Task.End})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("tasks = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFullJobSingleWorker(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		wantTasks int // per epoch
	}{
		{"one epoch", baseConfig(), 4},
		{"three epochs", func() Config { c := baseConfig(); c.NumEpochs = 3; return c }(), 4},
		{"shuffled", func() Config { c := baseConfig(); c.NumEpochs = 2; c.Shuffle = true; c.Seed = 7; return c }(), 4},
		{"single record tasks", Config{Training: []Shard{{"x", 17}}, RecordsPerTask: 1, NumEpochs: 2, MaxAttempts: 1}, 17},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := mustNew(t, tc.cfg)
			perEpoch := map[int]int{}
			lastEpoch := 0
			now := t0
			for i := 0; ; i++ {
				if i > 10000 {
					t.Fatal("job does not finish")
				}
				now = now.Add(time.Second)
				a := d.Get(1, now)
				if a.Kind == KindDone {
					break
				}
				if a.Kind != KindTask {
					t.Fatalf("single worker got %v with nothing held", a.Kind)
				}
				// With one worker, epochs come strictly in order.
				if a.Task.Epoch < lastEpoch {
					t.Fatalf("got epoch %d after epoch %d", a.Task.Epoch, lastEpoch)
				}
				lastEpoch = a.Task.Epoch
				perEpoch[a.Task.Epoch]++
				mustReport(t, d, 1, a.Task, ok(a.Task), now)
			}
			if !d.Finished() || d.Err() != nil {
				t.Fatalf("Finished=%v Err=%v, want finished without error", d.Finished(), d.Err())
			}
			for e := 1; e <= tc.cfg.NumEpochs; e++ {
				if perEpoch[e] != tc.wantTasks {
					t.Errorf("epoch %d: %d tasks, want %d", e, perEpoch[e], tc.wantTasks)
				}
			}
			p := d.Progress()
			if p.RecordsDone != p.RecordsTotal || p.EpochsDone != tc.cfg.NumEpochs || p.Epoch != tc.cfg.NumEpochs ||
				p.TasksTodo != 0 || p.TasksDoing != 0 || p.TasksDone != tc.wantTasks*tc.cfg.NumEpochs || !p.Finished {
				t.Errorf("final progress %+v", p)
			}
			if p.RecordsReported != p.RecordsTotal || p.Steps != int64(p.TasksDone) {
				t.Errorf("reported sums: records %d steps %d, want %d %d", p.RecordsReported, p.Steps, p.RecordsTotal, p.TasksDone)
			}
			cov := d.Coverage()
			if len(cov) != tc.cfg.NumEpochs {
				t.Fatalf("coverage has %d epochs, want %d", len(cov), tc.cfg.NumEpochs)
			}
			for _, c := range cov {
				if c.RecordsTrained != c.Records || c.RecordsTrainedTwice != 0 || c.RecordsMissed != 0 || !c.Finished {
					t.Errorf("coverage %+v, want every record trained exactly once", c)
				}
				if one, ok := d.EpochCoverage(c.Epoch); !ok || one != c {
					t.Errorf("EpochCoverage(%d) = %+v, %v; want %+v", c.Epoch, one, ok, c)
				}
			}
			for _, e := range []int{0, tc.cfg.NumEpochs + 1} {
				if c, ok := d.EpochCoverage(e); ok {
					t.Errorf("EpochCoverage(%d) = %+v of an epoch that does not exist", e, c)
				}
			}
			if a := d.Get(1, now); a.Kind != KindDone {
				t.Errorf("Get after done = %v, want done", a.Kind)
			}
		})
	}
}

func TestTwoWorkersInterleaved(t *testing.T) {
	cfg := baseConfig()
	cfg.NumEpochs = 2
	d := mustNew(t, cfg)
	// Four tasks per epoch. Worker 1 keeps the last epoch-1 task while
	// worker 2 moves on: epochs are not barriers.
	a1 := mustGet(t, d, 1, t0)
	a2 := mustGet(t, d, 2, t0)
	mustReport(t, d, 2, a2, ok(a2), t0)
	a3 := mustGet(t, d, 2, t0)
	mustReport(t, d, 1, a1, ok(a1), t0)
	a4 := mustGet(t, d, 1, t0) // last epoch-1 task, held by worker 1
	mustReport(t, d, 2, a3, ok(a3), t0)
	if got := d.Progress().Epoch; got != 1 {
		t.Fatalf("epoch 2 created before epoch 1's todo emptied: Epoch=%d", got)
	}
	b1 := mustGet(t, d, 2, t0)
	if a4.Epoch != 1 || b1.Epoch != 2 {
		t.Fatalf("epochs = %d,%d, want 1,2", a4.Epoch, b1.Epoch)
	}
	if cov := d.Coverage(); cov[0].Finished || cov[0].RecordsMissed != 0 {
		t.Fatalf("epoch 1 coverage while a task is out: %+v", cov[0])
	}
	mustReport(t, d, 1, a4, ok(a4), t0)
	mustReport(t, d, 2, b1, ok(b1), t0)
	for w := 1; ; w = 3 - w {
		a := d.Get(w, t0)
		if a.Kind == KindDone {
			break
		}
		mustReport(t, d, w, a.Task, ok(a.Task), t0)
	}
	for _, c := range d.Coverage() {
		if c.RecordsTrained != 35 || c.RecordsTrainedTwice != 0 || c.RecordsMissed != 0 {
			t.Errorf("coverage %+v", c)
		}
	}
	if ids := []int64{a1.ID, a2.ID, a3.ID, a4.ID}; len(slices.Compact(slices.Sorted(slices.Values(ids)))) != 4 {
		t.Errorf("epoch-1 task IDs not distinct: %v", ids)
	}
}

func TestWaitVersusDone(t *testing.T) {
	// Each case leaves the last remaining task with worker 1 and asks worker
	// 2; then applies finish and asks worker 2 again.
	type step func(t *testing.T, d *Dispatcher, held Task)
	succeed := func(t *testing.T, d *Dispatcher, held Task) { mustReport(t, d, 1, held, ok(held), t0) }
	tests := []struct {
		name       string
		epochs     int
		eval       bool
		wantFirst  Kind
		finish     step
		wantSecond Kind
	}{
		{"end of job, last task held", 1, false, KindWait, succeed, KindDone},
		{"end of job, held task fails", 1, false, KindWait,
			func(t *testing.T, d *Dispatcher, held Task) {
				mustReport(t, d, 1, held, Result{Err: "disk"}, t0)
			}, KindTask},
		{"end of job, holder lost", 1, false, KindWait,
			func(t *testing.T, d *Dispatcher, held Task) { d.WorkerLost(1, t0) }, KindTask},
		{"end of epoch 1 of 2", 2, false, KindTask, succeed, KindTask},
		{"eval held at the end", 1, true, KindWait, succeed, KindDone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.NumEpochs = tc.epochs
			d := mustNew(t, cfg)
			var held Task
			for i := 0; i < 4; i++ { // the 4 epoch-1 tasks
				task := mustGet(t, d, 1, t0)
				if i < 3 || tc.eval {
					mustReport(t, d, 1, task, ok(task), t0)
				} else {
					held = task
				}
			}
			if tc.eval {
				if err := d.AddEvaluation([]Shard{{"v", 5}}, 10, 1); err != nil {
					t.Fatal(err)
				}
				held = mustGet(t, d, 1, t0)
				if held.Type != Evaluation {
					t.Fatalf("got %v, want the eval task", held)
				}
			}
			if d.Finished() {
				t.Fatal("Finished while a task is held")
			}
			if got := d.Get(2, t0).Kind; got != tc.wantFirst {
				t.Fatalf("first Get = %v, want %v", got, tc.wantFirst)
			}
			tc.finish(t, d, held)
			if got := d.Get(2, t0).Kind; got != tc.wantSecond {
				t.Fatalf("second Get = %v, want %v", got, tc.wantSecond)
			}
		})
	}
}

func TestWorkerLostRequeuesFirst(t *testing.T) {
	cfg := baseConfig()
	cfg.Training = []Shard{{"a", 100}}
	d := mustNew(t, cfg)
	var lostHeld []Task
	for i := 0; i < 3; i++ {
		lostHeld = append(lostHeld, mustGet(t, d, 1, t0))
	}
	other := mustGet(t, d, 2, t0)
	if got := d.Held(1); !reflect.DeepEqual(got, lostHeld) {
		t.Fatalf("Held(1) = %v, want %v", got, lostHeld)
	}
	back := d.WorkerLost(1, t0)
	if !reflect.DeepEqual(back, lostHeld) {
		t.Fatalf("WorkerLost returned %v, want %v", back, lostHeld)
	}
	if len(d.Held(1)) != 0 {
		t.Fatalf("worker 1 still holds %v", d.Held(1))
	}
	p := d.Progress()
	if p.Requeues != 3 || p.Failures != 0 || p.TasksDoing != 1 {
		t.Fatalf("progress after loss: %+v", p)
	}
	for _, want := range lostHeld {
		got := mustGet(t, d, 3, t0)
		if got.ID != want.ID || got.Attempt != 0 {
			t.Fatalf("after loss got %v, want %v with Attempt 0 (deaths do not count as failures)", got, want)
		}
	}
	if next := mustGet(t, d, 3, t0); next.Start != 40 || next.ID == other.ID {
		t.Fatalf("after the requeued tasks got %v, want the fresh task [40,50)", next)
	}
	if got := d.WorkerLost(99, t0); len(got) != 0 {
		t.Fatalf("WorkerLost(unknown) = %v, want none", got)
	}
}

func TestTickTimeout(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		age     time.Duration
		want    bool // requeued
	}{
		{"young", 10 * time.Second, 5 * time.Second, false},
		{"exactly timeout", 10 * time.Second, 10 * time.Second, false},
		{"just older", 10 * time.Second, 10*time.Second + time.Nanosecond, true},
		{"much older", 10 * time.Second, time.Hour, true},
		{"no timeout", 0, 1000 * time.Hour, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.TaskTimeout = tc.timeout
			d := mustNew(t, cfg)
			held := mustGet(t, d, 1, t0)
			fresh := mustGet(t, d, 2, t0.Add(tc.age)) // got at tick time: never expires
			back := d.Tick(t0.Add(tc.age))
			if !tc.want {
				if len(back) != 0 || d.Progress().Requeues != 0 {
					t.Fatalf("Tick requeued %v", back)
				}
				return
			}
			if len(back) != 1 || back[0].ID != held.ID {
				t.Fatalf("Tick = %v, want [%v]", back, held)
			}
			if st, _ := d.TaskState(fresh.ID); st != Doing {
				t.Fatalf("fresh task state %v, want doing", st)
			}
			if got := mustGet(t, d, 3, t0.Add(tc.age)); got.ID != held.ID || got.Attempt != 0 {
				t.Fatalf("next Get = %v, want timed-out %v at attempt 0", got, held)
			}
			if p := d.Progress(); p.Requeues != 1 || p.Failures != 0 {
				t.Fatalf("progress %+v", p)
			}
			// The timed-out worker's report is now rejected.
			if err := d.Report(1, held.ID, ok(held), t0.Add(tc.age)); !errors.Is(err, ErrNotOwner) {
				t.Fatalf("late report err = %v, want ErrNotOwner", err)
			}
		})
	}
}

func TestFailuresUpToMaxAttempts(t *testing.T) {
	for _, maxAttempts := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("max%d", maxAttempts), func(t *testing.T) {
			cfg := baseConfig()
			cfg.MaxAttempts = maxAttempts
			d := mustNew(t, cfg)
			first := mustGet(t, d, 1, t0)
			task, worker := first, 1
			for i := 1; i <= maxAttempts; i++ {
				if task.ID != first.ID || task.Attempt != i-1 {
					t.Fatalf("attempt %d: got %v, want task %d at Attempt %d", i, task, first.ID, i-1)
				}
				mustReport(t, d, worker, task, Result{Err: "bad record 7"}, t0)
				if i < maxAttempts {
					if d.Err() != nil {
						t.Fatalf("Err after %d/%d failures: %v", i, maxAttempts, d.Err())
					}
					worker++
					task = mustGet(t, d, worker, t0) // failed tasks go to the front
				}
			}
			err := d.Err()
			var fe *FailedError
			if !errors.As(err, &fe) {
				t.Fatalf("Err = %v, want *FailedError", err)
			}
			if fe.Task.ID != first.ID || fe.Failures != maxAttempts || fe.LastErr != "bad record 7" {
				t.Errorf("FailedError = %+v", fe)
			}
			for _, want := range []string{`shard "a"`, "[0,10)", "epoch 1", "bad record 7", "MaxAttempts"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Err %q does not mention %q", err, want)
				}
			}
			if st, _ := d.TaskState(first.ID); st != Failed {
				t.Errorf("state %v, want failed", st)
			}
			p := d.Progress()
			if p.Failures != int64(maxAttempts) || p.TasksFailed != 1 || !p.Failed || p.Finished || d.Finished() {
				t.Errorf("progress %+v", p)
			}
			if a := d.Get(3, t0); a.Kind != KindDone {
				t.Errorf("Get after failure = %v, want done", a.Kind)
			}
		})
	}
}

func TestPoisonTaskRequeueCap(t *testing.T) {
	tests := []struct {
		name        string
		maxRequeues int
		wantCap     int
		viaTimeout  bool
	}{
		{"default cap via worker loss", 0, 20, false},
		{"explicit cap via worker loss", 3, 3, false},
		{"explicit cap via timeout", 4, 4, true},
		{"cap of one", 1, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.MaxAttempts = 2
			cfg.MaxRequeues = tc.maxRequeues
			cfg.TaskTimeout = time.Minute
			d := mustNew(t, cfg)
			now := t0
			var poison Task
			for i := 1; i <= tc.wantCap; i++ {
				worker := i
				task := mustGet(t, d, worker, now)
				if i == 1 {
					poison = task
				} else if task.ID != poison.ID {
					t.Fatalf("requeue %d: got %v, want the poison task back first", i, task)
				}
				var back []Task
				if tc.viaTimeout {
					now = now.Add(2 * time.Minute)
					back = d.Tick(now)
				} else {
					back = d.WorkerLost(worker, now)
				}
				if i < tc.wantCap {
					if d.Err() != nil || len(back) != 1 {
						t.Fatalf("after %d requeues: Err=%v back=%v", i, d.Err(), back)
					}
					continue
				}
				if len(back) != 0 {
					t.Fatalf("capped task returned to todo: %v", back)
				}
			}
			err := d.Err()
			var fe *FailedError
			if !errors.As(err, &fe) || fe.Task.ID != poison.ID || fe.Requeues != tc.wantCap || fe.Failures != 0 {
				t.Fatalf("Err = %v (%+v), want poison task after %d requeues", err, fe, tc.wantCap)
			}
			if !strings.Contains(err.Error(), "taken back from workers") {
				t.Errorf("Err %q does not explain the requeue cap", err)
			}
			if p := d.Progress(); p.Requeues != int64(tc.wantCap) || p.Failures != 0 {
				t.Errorf("progress %+v", p)
			}
		})
	}
}

func TestReportRejectedLeavesStateUnchanged(t *testing.T) {
	// Fixture: worker 1 holds task A, task B is done by worker 1, worker 2
	// holds eval task E, task C timed out from worker 3 and is held by
	// worker 4, the rest is todo.
	type fixture struct {
		d          *Dispatcher
		a, b, c, e Task
	}
	setup := func(t *testing.T) fixture {
		cfg := baseConfig()
		cfg.Training = []Shard{{"a", 100}}
		cfg.TaskTimeout = time.Minute
		d := mustNew(t, cfg)
		var f fixture
		f.d = d
		f.c = mustGet(t, d, 3, t0)
		d.Tick(t0.Add(time.Hour))
		if got := mustGet(t, d, 4, t0.Add(time.Hour)); got.ID != f.c.ID {
			t.Fatalf("setup: got %v want %v", got, f.c)
		}
		f.a = mustGet(t, d, 1, t0)
		f.b = mustGet(t, d, 1, t0)
		mustReport(t, d, 1, f.b, ok(f.b), t0)
		if err := d.AddEvaluation([]Shard{{"eval", 30}}, 10, 5); err != nil {
			t.Fatal(err)
		}
		f.e = mustGet(t, d, 2, t0)
		return f
	}
	tests := []struct {
		name    string
		worker  int
		task    func(fixture) int64
		result  func(fixture) Result
		wantErr error
	}{
		{"unknown task", 1, func(fixture) int64 { return 9999 }, nil, ErrUnknownTask},
		{"task id zero", 1, func(fixture) int64 { return 0 }, nil, ErrUnknownTask},
		{"wrong worker on held task", 2, func(f fixture) int64 { return f.a.ID }, nil, ErrNotOwner},
		{"wrong worker fails held task", 2, func(f fixture) int64 { return f.a.ID }, func(fixture) Result { return Result{Err: "x"} }, ErrNotOwner},
		{"duplicate report of done task", 1, func(f fixture) int64 { return f.b.ID }, nil, ErrNotOwner},
		{"report of never-assigned todo task", 1, func(f fixture) int64 { return f.c.ID + 5 }, nil, ErrNotOwner},
		{"stranger reports timed-out task", 9, func(f fixture) int64 { return f.c.ID }, nil, ErrNotOwner},
		{"former owner reports failure late", 3, func(f fixture) int64 { return f.c.ID }, func(fixture) Result { return Result{Err: "late"} }, ErrNotOwner},
		{"wrong worker on eval task", 1, func(f fixture) int64 { return f.e.ID }, nil, ErrNotOwner},
		{"negative records", 1, func(f fixture) int64 { return f.a.ID }, func(fixture) Result { return Result{Records: -1} }, ErrInvalidResult},
		{"negative corrupt", 1, func(f fixture) int64 { return f.a.ID }, func(fixture) Result { return Result{Corrupt: -1} }, ErrInvalidResult},
		{"negative steps", 2, func(f fixture) int64 { return f.e.ID }, func(fixture) Result { return Result{Steps: -1} }, ErrInvalidResult},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			before := snap(f.d)
			r := Result{Records: 10}
			if tc.result != nil {
				r = tc.result(f)
			}
			err := f.d.Report(tc.worker, tc.task(f), r, t0.Add(2*time.Hour))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Report err = %v, want %v", err, tc.wantErr)
			}
			after := snap(f.d)
			// A former owner's late failure is counted as a late report
			// and consumes its late-report slot; nothing else may change.
			if tc.worker == 3 {
				before.progress.LateReports++
				e := &before.tasks[f.c.ID-1]
				e.former = e.former[:0]
			}
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("state changed by rejected report:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

func TestLateReports(t *testing.T) {
	// Task [0,10) of shard a is held by worker 1, times out and is requeued.
	tests := []struct {
		name string
		// run continues after the timeout; it returns nothing, checks are on
		// the final coverage of epoch 1 after everything else is trained.
		run        func(t *testing.T, d *Dispatcher, task Task, now time.Time)
		wantTwice  int64
		wantLate   int64
		wantReject bool
	}{
		{"late success after reassignment, new owner succeeds", func(t *testing.T, d *Dispatcher, task Task, now time.Time) {
			got := mustGet(t, d, 2, now)
			if err := d.Report(1, task.ID, ok(task), now); !errors.Is(err, ErrNotOwner) {
				t.Fatalf("late report err %v", err)
			}
			mustReport(t, d, 2, got, ok(got), now)
		}, 10, 1, true},
		{"late success while task is todo", func(t *testing.T, d *Dispatcher, task Task, now time.Time) {
			if err := d.Report(1, task.ID, ok(task), now); !errors.Is(err, ErrNotOwner) {
				t.Fatalf("late report err %v", err)
			}
			if st, _ := d.TaskState(task.ID); st != Todo {
				t.Fatalf("late report changed state to %v", st)
			}
		}, 10, 1, true},
		{"late success after new owner finished", func(t *testing.T, d *Dispatcher, task Task, now time.Time) {
			got := mustGet(t, d, 2, now)
			mustReport(t, d, 2, got, ok(got), now)
			if err := d.Report(1, task.ID, ok(task), now); !errors.Is(err, ErrNotOwner) {
				t.Fatalf("late report err %v", err)
			}
		}, 10, 1, true},
		{"late failure is not coverage", func(t *testing.T, d *Dispatcher, task Task, now time.Time) {
			if err := d.Report(1, task.ID, Result{Err: "oops"}, now); !errors.Is(err, ErrNotOwner) {
				t.Fatalf("late report err %v", err)
			}
		}, 0, 1, true},
		{"duplicate late success counted once", func(t *testing.T, d *Dispatcher, task Task, now time.Time) {
			for range 3 {
				if err := d.Report(1, task.ID, ok(task), now); !errors.Is(err, ErrNotOwner) {
					t.Fatalf("late report err %v", err)
				}
			}
		}, 10, 1, true},
		{"late success then new owner fails then succeeds", func(t *testing.T, d *Dispatcher, task Task, now time.Time) {
			got := mustGet(t, d, 2, now)
			if err := d.Report(1, task.ID, ok(task), now); err == nil {
				t.Fatal("late report accepted")
			}
			mustReport(t, d, 2, got, Result{Err: "flaky"}, now)
		}, 10, 1, true},
		{"same worker gets it back and reports once", func(t *testing.T, d *Dispatcher, task Task, now time.Time) {
			got := mustGet(t, d, 1, now)
			mustReport(t, d, 1, got, ok(got), now)
		}, 0, 0, false},
		{"no late report", func(t *testing.T, d *Dispatcher, task Task, now time.Time) {}, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.TaskTimeout = time.Minute
			d := mustNew(t, cfg)
			task := mustGet(t, d, 1, t0)
			now := t0.Add(time.Hour)
			if back := d.Tick(now); len(back) != 1 {
				t.Fatalf("Tick = %v", back)
			}
			tc.run(t, d, task, now)
			for {
				a := d.Get(3, now)
				if a.Kind != KindTask {
					break
				}
				mustReport(t, d, 3, a.Task, ok(a.Task), now)
			}
			if !d.Finished() {
				t.Fatalf("not finished: %+v", d.Progress())
			}
			c := d.Coverage()[0]
			if c.RecordsTrainedTwice != tc.wantTwice || c.RecordsTrained != 35 || c.RecordsMissed != 0 {
				t.Errorf("coverage %+v, want twice=%d trained=35 missed=0", c, tc.wantTwice)
			}
			if got := d.Progress().LateReports; got != tc.wantLate {
				t.Errorf("LateReports = %d, want %d", got, tc.wantLate)
			}
			if got := d.Progress().RecordsDone; got != 35 {
				t.Errorf("RecordsDone = %d, want 35 (late reports are not accepted)", got)
			}
		})
	}
}

func TestEvaluation(t *testing.T) {
	cfg := baseConfig()
	cfg.NumEpochs = 1
	d := mustNew(t, cfg)
	train := mustGet(t, d, 1, t0)
	if err := d.AddEvaluation([]Shard{{"v1", 15}, {"v2", 5}}, 10, 42); err != nil {
		t.Fatal(err)
	}
	// Eval tasks are served first, in shard order.
	var evals []Task
	for i := 0; i < 3; i++ {
		e := mustGet(t, d, 2, t0)
		if e.Type != Evaluation || e.Epoch != 0 || e.ModelVersion != 42 {
			t.Fatalf("Get %d = %v, want an eval task of version 42", i, e)
		}
		evals = append(evals, e)
	}
	if got := mustGet(t, d, 2, t0); got.Type != Training {
		t.Fatalf("after eval tasks got %v, want training", got)
	}
	if p := d.Progress(); p.EvalTasksDoing != 3 || p.EvalTasksTodo != 0 {
		t.Fatalf("progress %+v", p)
	}
	// One eval task fails once: its result must not be aggregated.
	mustReport(t, d, 2, evals[0], Result{Err: "nan", Records: 99, LossSum: 99}, t0)
	if st, _ := d.Evaluation(42); st.Records != 0 || st.TasksDone != 0 {
		t.Fatalf("failed eval report aggregated: %+v", st)
	}
	retry := mustGet(t, d, 3, t0)
	if retry.ID != evals[0].ID || retry.Attempt != 1 {
		t.Fatalf("retry = %v, want eval task %d attempt 1", retry, evals[0].ID)
	}
	evals[0] = retry
	// Wrong-worker eval report is rejected and not aggregated.
	if err := d.Report(1, evals[1].ID, Result{Records: 5}, t0); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("err %v", err)
	}
	for i, e := range evals {
		w := 2
		if i == 0 {
			w = 3
		}
		mustReport(t, d, w, e, Result{Records: e.Records(), LossSum: float64(e.Records()), Steps: 1}, t0)
	}
	st, found := d.Evaluation(42)
	want := EvalStats{ModelVersion: 42, Tasks: 3, TasksDone: 3, Complete: true, Records: 20, LossSum: 20, Steps: 3}
	if !found || st != want {
		t.Fatalf("Evaluation(42) = %+v, %v; want %+v", st, found, want)
	}
	if info, _ := d.TaskInfo(evals[2].ID); info.Type != Evaluation || info.ModelVersion != 42 || info.Shard != "v2" {
		t.Fatalf("TaskInfo = %+v", info)
	}
	if _, found := d.Evaluation(7); found {
		t.Fatal("Evaluation(7) found")
	}
	// Eval records never show up in training coverage or progress.
	for {
		a := d.Get(1, t0)
		if a.Kind != KindTask {
			break
		}
		mustReport(t, d, 1, a.Task, ok(a.Task), t0)
	}
	held := d.Held(2)
	for _, h := range held {
		mustReport(t, d, 2, h, ok(h), t0)
	}
	mustReport(t, d, 1, train, ok(train), t0)
	c := d.Coverage()[0]
	if c.Records != 35 || c.RecordsTrained != 35 || c.RecordsTrainedTwice != 0 {
		t.Fatalf("coverage %+v, want eval not counted", c)
	}
	if p := d.Progress(); p.RecordsDone != 35 || p.RecordsReported != 35 {
		t.Fatalf("progress %+v counts eval records", p)
	}
	if !d.Finished() {
		t.Fatal("not finished")
	}
	// An evaluation after training re-opens the job until it is done.
	if err := d.AddEvaluation([]Shard{{"v1", 1}}, 10, 43); err != nil {
		t.Fatal(err)
	}
	if d.Finished() {
		t.Fatal("finished with an eval task queued")
	}
	e := mustGet(t, d, 1, t0)
	if d.Get(2, t0).Kind != KindWait {
		t.Fatal("want wait while final eval is held")
	}
	mustReport(t, d, 1, e, ok(e), t0)
	if d.Get(2, t0).Kind != KindDone {
		t.Fatal("want done after final eval")
	}
}

func TestAddEvaluationValidation(t *testing.T) {
	tests := []struct {
		name    string
		shards  []Shard
		per     int64
		version int64
		wantErr string
	}{
		{"valid", []Shard{{"e", 5}}, 2, 2, ""},
		{"no shards", nil, 2, 2, "no shards"},
		{"empty shard", []Shard{{"e", 0}}, 2, 2, "0 records"},
		{"duplicate shard", []Shard{{"e", 1}, {"e", 1}}, 2, 2, "duplicate"},
		{"zero per task", []Shard{{"e", 5}}, 0, 2, "recordsPerTask"},
		{"reused version", []Shard{{"e", 5}}, 2, 1, "already queued"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := mustNew(t, baseConfig())
			if err := d.AddEvaluation([]Shard{{"e", 5}}, 2, 1); err != nil {
				t.Fatal(err)
			}
			before := d.Progress()
			err := d.AddEvaluation(tc.shards, tc.per, tc.version)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
			}
			if after := d.Progress(); after != before {
				t.Fatalf("failed AddEvaluation changed progress: %+v -> %+v", before, after)
			}
		})
	}
	t.Run("after job failure", func(t *testing.T) {
		cfg := baseConfig()
		cfg.MaxAttempts = 1
		d := mustNew(t, cfg)
		task := mustGet(t, d, 1, t0)
		mustReport(t, d, 1, task, Result{Err: "boom"}, t0)
		if err := d.AddEvaluation([]Shard{{"e", 5}}, 2, 9); err == nil || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("err = %v, want the job failure", err)
		}
	})
}

// order returns the (shard,start) order in which one worker receives the
// tasks of each epoch.
func order(t *testing.T, cfg Config) [][]rng {
	t.Helper()
	d := mustNew(t, cfg)
	out := make([][]rng, cfg.NumEpochs)
	for {
		a := d.Get(1, t0)
		if a.Kind != KindTask {
			break
		}
		out[a.Task.Epoch-1] = append(out[a.Task.Epoch-1], rng{a.Task.Shard, a.Task.Start, a.Task.End})
		mustReport(t, d, 1, a.Task, ok(a.Task), t0)
	}
	return out
}

func TestShuffle(t *testing.T) {
	cfg := Config{Training: []Shard{{"a", 200}, {"b", 100}}, RecordsPerTask: 10, NumEpochs: 3, MaxAttempts: 1}
	with := func(shuffle bool, seed int64) Config {
		c := cfg
		c.Shuffle, c.Seed = shuffle, seed
		return c
	}
	plain := order(t, with(false, 0))
	s1 := order(t, with(true, 1))
	tests := []struct {
		name      string
		a, b      [][]rng
		wantEqual bool
	}{
		{"same seed, same order", s1, order(t, with(true, 1)), true},
		{"different seed, different order", s1, order(t, with(true, 2)), false},
		{"shuffled differs from plain", s1, plain, false},
		{"seed ignored without shuffle", plain, order(t, with(false, 99)), true},
		{"epochs shuffled differently", s1[:1], s1[1:2], false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := reflect.DeepEqual(tc.a, tc.b); got != tc.wantEqual {
				t.Fatalf("orders equal = %v, want %v", got, tc.wantEqual)
			}
		})
	}
	// Shuffling permutes tasks; it must still cover every record once.
	for e := range s1 {
		got := slices.Clone(s1[e])
		slices.SortFunc(got, func(x, y rng) int {
			if x.shard != y.shard {
				return strings.Compare(x.shard, y.shard)
			}
			return int(x.start - y.start)
		})
		if !reflect.DeepEqual(got, plain[e]) {
			t.Fatalf("epoch %d shuffled tasks are not a permutation of the plain tasks", e+1)
		}
	}
}

func TestProgressCounts(t *testing.T) {
	cfg := baseConfig()
	cfg.NumEpochs = 2
	d := mustNew(t, cfg)
	a := mustGet(t, d, 1, t0)
	b := mustGet(t, d, 1, t0)
	mustReport(t, d, 1, a, Result{Records: 8, Corrupt: 2, LossSum: 1.5, Steps: 2}, t0.Add(time.Second))
	want := Progress{
		Epoch: 1, NumEpochs: 2,
		EpochRecordsDone: 10, EpochRecordsTotal: 35,
		RecordsDone: 10, RecordsTotal: 70,
		TasksTodo: 2, TasksDoing: 1, TasksDone: 1,
		RecordsReported: 8, CorruptRecords: 2, LossSum: 1.5, Steps: 2,
		LastAccepted: t0.Add(time.Second),
	}
	if got := d.Progress(); got != want {
		t.Fatalf("Progress =\n%+v\nwant\n%+v", got, want)
	}
	_ = b
}
