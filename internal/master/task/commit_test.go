package task

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// Committed records stay done when the task changes hands: the next holder
// gets the task with Done set, whether the first was lost, timed out or
// failed.
func TestCommitSurvivesRequeues(t *testing.T) {
	cfg := baseConfig()
	cfg.TaskTimeout = time.Minute
	d := mustNew(t, cfg)
	a := mustGet(t, d, 1, t0)
	if a.Done != 0 {
		t.Fatalf("fresh task has Done %d", a.Done)
	}
	if err := d.Commit(1, a.ID, 4); err != nil {
		t.Fatal(err)
	}
	d.WorkerLost(1, t0)
	b := mustGet(t, d, 2, t0)
	if b.ID != a.ID || b.Done != 4 {
		t.Fatalf("after a loss: %+v, want task %d with 4 done", b, a.ID)
	}
	if err := d.Commit(2, b.ID, 7); err != nil {
		t.Fatal(err)
	}
	d.Tick(t0.Add(2 * time.Minute))
	c := mustGet(t, d, 3, t0.Add(2*time.Minute))
	if c.ID != a.ID || c.Done != 7 {
		t.Fatalf("after a timeout: %+v, want 7 done", c)
	}
	mustReport(t, d, 3, c, Result{Err: "disk"}, t0)
	c = mustGet(t, d, 3, t0)
	if c.ID != a.ID || c.Done != 7 || c.Attempt != 1 {
		t.Fatalf("after a failure: %+v, want 7 done, attempt 1", c)
	}
	// Done counts once in the ledger: the task is covered when it is done.
	mustReport(t, d, 3, c, Result{Records: c.Records() - c.Done, Steps: 1}, t0)
	cov, _ := d.EpochCoverage(1)
	if cov.RecordsTrained != c.Records() || cov.RecordsTrainedTwice != 0 {
		t.Fatalf("coverage %+v", cov)
	}
}

func TestCommitRefusals(t *testing.T) {
	cfg := baseConfig()
	d := mustNew(t, cfg)
	a := mustGet(t, d, 1, t0)
	if err := d.Commit(1, a.ID, 5); err != nil {
		t.Fatal(err)
	}
	if err := d.AddEvaluation([]Shard{{"v", 10}}, 10, 1); err != nil {
		t.Fatal(err)
	}
	ev := mustGet(t, d, 2, t0)
	before := snap(d)
	for _, c := range []struct {
		name   string
		worker int
		id     int64
		done   int64
		want   error
	}{
		{"unknown task", 1, 999, 1, ErrUnknownTask},
		{"not the holder", 2, a.ID, 6, ErrNotOwner},
		{"negative", 1, a.ID, -1, ErrInvalidResult},
		{"past the end", 1, a.ID, a.Records() + 1, ErrInvalidResult},
		{"evaluation task", 2, ev.ID, 1, ErrInvalidResult},
	} {
		if err := d.Commit(c.worker, c.id, c.done); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if after := snap(d); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused commits changed the state")
	}
	// Committing the same count again is fine (a retried RPC), and so is a
	// smaller one (someone committed further on the holder's behalf): Done
	// stays.
	for _, done := range []int64{5, 3} {
		if err := d.Commit(1, a.ID, done); err != nil {
			t.Fatal(err)
		}
	}
	if info, _ := d.TaskInfo(a.ID); info.Done != 5 {
		t.Fatalf("Done %d, want 5", info.Done)
	}
}

// A reopened task is todo again, first in line, out of its epoch's counts
// and coverage until it is done again; a restart keeps all that.
func TestReopen(t *testing.T) {
	cfg := baseConfig()
	d := mustNew(t, cfg)
	var done []Task
	for d.Progress().TasksTodo > 0 {
		tk := mustGet(t, d, 1, t0)
		mustReport(t, d, 1, tk, Result{Records: tk.Records()}, t0)
		done = append(done, tk)
	}
	if !d.Finished() {
		t.Fatal("not finished after every task")
	}
	lost := done[1]
	wantFullScan(t, d) // every task settled
	if err := d.Reopen(lost.ID); err != nil {
		t.Fatal(err)
	}
	wantFullScan(t, d) // the reopened one is not
	if d.Finished() {
		t.Fatal("finished with a task reopened")
	}
	cov, _ := d.EpochCoverage(1)
	if cov.Finished || cov.RecordsTrained != 35-lost.Records() {
		t.Fatalf("coverage with a task reopened: %+v", cov)
	}
	d = restart(t, cfg, d)
	redo := mustGet(t, d, 2, t0)
	if redo.ID != lost.ID {
		t.Fatalf("got task %d, want the reopened %d first", redo.ID, lost.ID)
	}
	mustReport(t, d, 2, redo, Result{Records: redo.Records()}, t0)
	cov, _ = d.EpochCoverage(1)
	if !d.Finished() || cov.RecordsTrained != 35 || cov.RecordsTrainedTwice != 0 || cov.RecordsMissed != 0 {
		t.Fatalf("after the redo: finished %v, coverage %+v", d.Finished(), cov)
	}
	var seen []int64
	d.DoneTraining(func(tk Task) { seen = append(seen, tk.ID) })
	if len(seen) != len(done) {
		t.Fatalf("DoneTraining listed %v, want %d tasks", seen, len(done))
	}
	// Reopened among settled tasks and handed out again: the snapshot has
	// it in hand.
	wantFullScan(t, d)
	if err := d.Reopen(done[0].ID); err != nil {
		t.Fatal(err)
	}
	mustGet(t, d, 3, t0)
	wantFullScan(t, d)
}

func TestReopenRefusals(t *testing.T) {
	d := mustNew(t, baseConfig())
	held := mustGet(t, d, 1, t0)
	if err := d.AddEvaluation([]Shard{{"v", 10}}, 10, 1); err != nil {
		t.Fatal(err)
	}
	ev := mustGet(t, d, 2, t0)
	mustReport(t, d, 2, ev, Result{Records: 10}, t0)
	for _, c := range []struct {
		id   int64
		want error
	}{{held.ID, ErrInvalidResult}, {ev.ID, ErrInvalidResult}, {999, ErrUnknownTask}} {
		before := d.Progress()
		if err := d.Reopen(c.id); !errors.Is(err, c.want) {
			t.Fatalf("Reopen(%d) = %v, want %v", c.id, err, c.want)
		}
		if !reflect.DeepEqual(before, d.Progress()) {
			t.Fatalf("a refused Reopen(%d) changed the counts", c.id)
		}
	}
}
