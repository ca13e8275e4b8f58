package task

import (
	"slices"
	"testing"
	"time"
)

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
