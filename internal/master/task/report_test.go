package task

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

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
