package task

import (
	"errors"
	"testing"
)

// A job without training (NumEpochs 0): only the evaluation or prediction
// passes queued by the caller, then done.
func TestNoTrainingEvaluationOnly(t *testing.T) {
	d := mustNew(t, Config{RecordsPerTask: 10, NumEpochs: 0, MaxAttempts: 2})
	if !d.Finished() {
		t.Fatal("an empty no-training dispatcher should be finished")
	}
	if err := d.AddEvaluation([]Shard{{"v", 25}}, 10, 7); err != nil {
		t.Fatal(err)
	}
	if d.Finished() {
		t.Fatal("finished with an evaluation queued")
	}
	var got []Task
	for w := 0; w < 3; w++ {
		tk := mustGet(t, d, w, t0)
		if tk.Type != Evaluation || tk.ModelVersion != 7 {
			t.Fatalf("got %v", tk)
		}
		got = append(got, tk)
	}
	if a := d.Get(9, t0); a.Kind != KindWait {
		t.Fatalf("want wait, got %v", a.Kind)
	}
	for w, tk := range got {
		if err := d.Report(w, tk.ID, Result{Records: tk.Records(), LossSum: 1}, t0); err != nil {
			t.Fatal(err)
		}
	}
	if !d.Finished() {
		t.Fatal("not finished after the evaluation")
	}
	if a := d.Get(0, t0); a.Kind != KindDone {
		t.Fatalf("want done, got %v", a.Kind)
	}
	s, ok := d.Evaluation(7)
	if !ok || !s.Complete || s.Records != 25 || s.Tasks != 3 {
		t.Fatalf("eval stats %+v", s)
	}
	if p := d.Progress(); p.Epoch != 0 || p.NumEpochs != 0 || p.RecordsTotal != 0 || !p.Finished {
		t.Fatalf("progress %+v", p)
	}
	if c := d.Coverage(); len(c) != 0 {
		t.Fatalf("coverage %+v", c)
	}
}

func TestPredictionPassInOrderWithRequeue(t *testing.T) {
	d := mustNew(t, Config{RecordsPerTask: 10, NumEpochs: 0, MaxAttempts: 2})
	pass, err := d.AddPrediction([]Shard{{"p", 35}}, 10)
	if err != nil || pass != 1 {
		t.Fatalf("AddPrediction = %d, %v", pass, err)
	}
	a, b := mustGet(t, d, 0, t0), mustGet(t, d, 1, t0)
	if a.Type != Prediction || a.Start != 0 || b.Start != 10 || a.ModelVersion != pass {
		t.Fatalf("tasks %v %v", a, b)
	}
	// Worker 0 dies: its task comes back first, before [20,30).
	if back := d.WorkerLost(0, t0); len(back) != 1 || back[0].ID != a.ID {
		t.Fatalf("requeued %v", back)
	}
	c := mustGet(t, d, 2, t0)
	if c.ID != a.ID {
		t.Fatalf("got %v, want the lost task back", c)
	}
	// The dead worker's late report is rejected.
	if err := d.Report(0, a.ID, Result{Records: 10}, t0); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("late report: %v", err)
	}
	for _, r := range []struct {
		w  int
		tk Task
	}{{2, c}, {1, b}} {
		if err := d.Report(r.w, r.tk.ID, Result{Records: 10}, t0); err != nil {
			t.Fatal(err)
		}
	}
	for w := 0; w < 2; w++ {
		tk := mustGet(t, d, 5+w, t0)
		if err := d.Report(5+w, tk.ID, Result{Records: tk.Records()}, t0); err != nil {
			t.Fatal(err)
		}
	}
	s, ok := d.Prediction(pass)
	if !ok || !s.Complete || s.Records != 35 || s.Tasks != 4 || !d.Finished() {
		t.Fatalf("prediction stats %+v ok %v finished %v", s, ok, d.Finished())
	}
	if _, err := d.AddPrediction(nil, 10); err == nil {
		t.Fatal("AddPrediction without shards succeeded")
	}
	if _, err := d.AddPrediction([]Shard{{"p", 3}}, 0); err == nil {
		t.Fatal("AddPrediction with 0 records per task succeeded")
	}
}

// Prediction tasks go before training tasks, like evaluation tasks.
func TestPredictionBeforeTraining(t *testing.T) {
	d := mustNew(t, Config{Training: []Shard{{"t", 20}}, RecordsPerTask: 10, NumEpochs: 1, MaxAttempts: 1})
	if _, err := d.AddPrediction([]Shard{{"p", 5}}, 10); err != nil {
		t.Fatal(err)
	}
	if tk := mustGet(t, d, 0, t0); tk.Type != Prediction {
		t.Fatalf("got %v first", tk)
	}
}
