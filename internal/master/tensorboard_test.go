package master

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/master/job"
	"elasticdl/internal/master/task"
	"elasticdl/internal/tfevents"
)

// What the core's Ready and the job's gauges give is written with its
// tags and steps, and close writes what waits.
func TestTensorBoardSeries(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tb")
	t0 := time.Unix(1_800_000_000, 0)
	tb := startTensorboard(dir, t0, slog.New(slog.DiscardHandler))
	if tb == nil {
		t.Fatal("no writer")
	}
	auc := 0.75
	tb.addReady(t0, job.Ready{
		Losses:    []job.LossPoint{{Version: 8, Loss: 2}, {Version: 16, Loss: 1.5}},
		Evaluated: []job.EvalRecord{{Version: 10, Accuracy: 0.5, Loss: 1.25, AUC: &auc}},
	})
	snap := job.Snapshot{WorkersRunning: 2, PSRunning: 1, ModelVersion: 16, Progress: task.Progress{RecordsDone: 100}}
	tb.sample(t0, snap, true)
	snap.Progress.RecordsDone, snap.ModelVersion = 300, 20
	tb.sample(t0.Add(2*time.Second), snap, true)
	tb.close()
	tb.close() // twice is fine
	tb.add(t0, 1, tfevents.Value{Tag: "late", Value: 1})

	got, err := tfevents.ReadScalars(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		step  int64
		tag   string
		value float64
	}{
		{8, tagTrainLoss, 2}, {16, tagTrainLoss, 1.5},
		{10, tagEvalAccuracy, 0.5}, {10, tagEvalLoss, 1.25}, {10, tagEvalAUC, 0.75},
		{16, tagWorkers, 2}, {16, tagPS, 1},
		{20, tagWorkers, 2}, {20, tagPS, 1}, {20, tagRecordsPerSec, 100},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i, w := range want {
		if g := got[i]; g.Step != w.step || g.Tag != w.tag || g.Value != w.value {
			t.Errorf("scalar %d: %+v, want %+v", i, g, w)
		}
	}
}

// A log dir that cannot be made leaves the job without TensorBoard, said
// once; writes that fail are logged once.
func TestTensorBoardFailures(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if tb := startTensorboard(filepath.Join(file, "tb"), time.Now(), log); tb != nil {
		t.Fatal("a writer under a file")
	}
	if !strings.Contains(logs.String(), "without TensorBoard") {
		t.Fatalf("logs: %s", logs.String())
	}
	var none *tensorboard
	none.add(time.Now(), 1)
	none.close()

	w, err := tfevents.Create(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w.Close()                    // every write fails from now on
	tb := newTensorboard(w, log) // its writer not started: the test writes
	for i := range 3 {
		tb.add(time.Now(), int64(i), tfevents.Value{Tag: "x", Value: 1})
		tb.write()
	}
	if n := strings.Count(logs.String(), "a write failed"); n != 1 {
		t.Fatalf("%d failure lines:\n%s", n, logs.String())
	}
}
