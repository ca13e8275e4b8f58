package task

import (
	"errors"
	"strings"
	"testing"
)

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
