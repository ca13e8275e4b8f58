package task

import (
	"errors"
	"testing"
)

// A lost model state rewinds the tasks to what the surviving state holds:
// done tasks reopen (their epoch no longer counts them), held ones are
// taken back, queued ones keep less progress, and the tasks the state
// holds in full stay done. Finishing them again gives an exact ledger.
func TestRewind(t *testing.T) {
	cfg := Config{Training: []Shard{{"a", 40}}, RecordsPerTask: 10, NumEpochs: 2, MaxAttempts: 1}
	d := mustNew(t, cfg)
	// Epoch 1: tasks 1..4. Worker 1 finishes 1 and 2, commits 6 of 3;
	// worker 2 commits 4 of 4 and loses it to a requeue (Done 4, queued).
	t1, t2 := mustGet(t, d, 1, t0), mustGet(t, d, 1, t0)
	mustReport(t, d, 1, t1, Result{Records: 10}, t0)
	mustReport(t, d, 1, t2, Result{Records: 10}, t0)
	t3, t4 := mustGet(t, d, 1, t0), mustGet(t, d, 2, t0)
	if err := d.Commit(1, t3.ID, 6); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(2, t4.ID, 4); err != nil {
		t.Fatal(err)
	}
	d.WorkerLost(2, t0)
	// The state kept: task 1 whole, 5 of task 2, 2 of task 3, 1 of task 4.
	kept := map[int64]int64{t1.ID: 10, t2.ID: 5, t3.ID: 2, t4.ID: 1}
	wantFullScan(t, d) // tasks 1 and 2 settled
	back := d.Rewind(func(t Task) int64 { return kept[t.ID] })
	wantFullScan(t, d)
	if len(back) != 3 {
		t.Fatalf("rewound %+v, want tasks 2, 3 and 4", back)
	}
	for _, b := range back {
		if b.Done != kept[b.ID] {
			t.Errorf("task %d rewound to %d done, want %d", b.ID, b.Done, kept[b.ID])
		}
	}
	if s, _ := d.TaskState(t1.ID); s != Done {
		t.Errorf("task 1 is %v, want still done", s)
	}
	if err := d.Commit(1, t3.ID, 8); !errors.Is(err, ErrNotOwner) {
		t.Errorf("commit of a taken-back task: %v, want ErrNotOwner", err)
	}
	p := d.Progress()
	if p.TasksDone != 1 || p.EpochRecordsDone != 10 || p.TasksDoing != 0 || p.TasksTodo != 3 {
		t.Fatalf("progress after rewind %+v", p)
	}
	// Redo: tasks 2, 3, 4 come first (front of todo), with their progress.
	for _, want := range []int64{t2.ID, t3.ID, t4.ID} {
		a := mustGet(t, d, 3, t0)
		if a.ID != want || a.Done != kept[want] {
			t.Fatalf("got %+v, want task %d with %d done", a, want, kept[want])
		}
		mustReport(t, d, 3, a, Result{Records: a.Records() - a.Done}, t0)
	}
	c, _ := d.EpochCoverage(1)
	if !c.Finished || c.RecordsTrained != 40 || c.RecordsTrainedTwice != 0 || c.RecordsMissed != 0 {
		t.Fatalf("epoch 1 coverage %+v, want 40 once", c)
	}
}
