package task

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// restart replaces d with a dispatcher restored from its snapshot, through
// JSON as a master persists it, after checking that the two agree on
// everything observable.
func restart(t *testing.T, cfg Config, d *Dispatcher) *Dispatcher {
	t.Helper()
	b, err := json.Marshal(d.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	n, err := Restore(cfg, s)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	sameDispatcher(t, d, n)
	return n
}

// wantFullScan fails unless d's snapshot, which skips the tasks it
// settled before (settledBelow), is the one a scan of every task gives.
func wantFullScan(t *testing.T, d *Dispatcher) {
	t.Helper()
	quick := d.Snapshot()
	settled := d.settledBelow
	d.settledBelow = 0
	full := d.Snapshot()
	if !reflect.DeepEqual(quick, full) {
		t.Fatalf("snapshot from task %d differs from a full scan:\n%+v\nwant\n%+v", settled, quick, full)
	}
}

// sameDispatcher fails unless a and b agree on every task, queue, count
// and pass.
func sameDispatcher(t *testing.T, a, b *Dispatcher) {
	t.Helper()
	check := func(what string, x, y any) {
		t.Helper()
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("restored dispatcher differs in %s:\n%+v\nwant\n%+v", what, y, x)
		}
	}
	pa, pb := a.Progress(), b.Progress()
	check("last accepted", pa.LastAccepted.Equal(pb.LastAccepted), true)
	pa.LastAccepted, pb.LastAccepted = time.Time{}, time.Time{}
	check("progress", pa, pb)
	check("coverage", a.Coverage(), b.Coverage())
	check("train queue", a.trainTodo.items(), b.trainTodo.items())
	check("eval queue", a.evalTodo.items(), b.evalTodo.items())
	check("tasks", a.ntasks, b.ntasks)
	for id := int64(1); id <= a.ntasks; id++ {
		ea, eb := a.lookup(id), b.lookup(id)
		check("task", ea.task, eb.task)
		check("state", ea.state, eb.state)
		check("requeues", ea.requeues, eb.requeues)
		check("former", len(ea.former), len(eb.former))
		if ea.state == Doing {
			check("owner", ea.owner, eb.owner)
			check("since", ea.since.Equal(eb.since), true)
		}
	}
	check("holders", len(a.doing), len(b.doing))
	for w := range a.byWorker {
		check("held", a.Held(w), b.Held(w))
	}
	check("evaluations", a.evals, b.evals)
	check("predictions", a.preds, b.preds)
	check("err", a.err, b.err)
	check("created", a.created, b.created)
}

// A snapshot of a fresh dispatcher, and of one mid-way through a job with
// an evaluation and a prediction pass, restores to the same dispatcher; a
// snapshot that does not fit the config is refused.
func TestSnapshotRestore(t *testing.T) {
	cfg := baseConfig()
	cfg.NumEpochs, cfg.Shuffle, cfg.Seed = 2, true, 3
	d := mustNew(t, cfg)
	d = restart(t, cfg, d)
	now := time.Unix(100, 0)
	a := mustGet(t, d, 1, now)
	mustReport(t, d, 1, a, ok(a), now)
	b := mustGet(t, d, 2, now)
	if err := d.Commit(2, b.ID, 3); err != nil {
		t.Fatal(err)
	}
	d.WorkerLost(2, now)
	if err := d.AddEvaluation([]Shard{{"v", 30}}, 10, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := d.AddPrediction([]Shard{{"p", 5}}, 10); err != nil {
		t.Fatal(err)
	}
	e := mustGet(t, d, 3, now) // an evaluation task
	mustReport(t, d, 3, e, ok(e), now)
	mustGet(t, d, 4, now.Add(time.Second)) // held across the restart
	d = restart(t, cfg, d)
	got := mustGet(t, d, 5, now) // the rest of the passes, then the requeued task, with its progress
	for got.Type != Training {
		mustReport(t, d, 5, got, ok(got), now)
		got = mustGet(t, d, 5, now)
	}
	if got.ID != b.ID || got.Done != 3 {
		t.Fatalf("after the restart: %+v (done %d), want task %d with 3 done", got, got.Done, b.ID)
	}

	other := cfg
	other.NumEpochs = 1
	s := d.Snapshot()
	s.Created = append(s.Created, Creation{Epoch: 2})
	if _, err := Restore(other, s); err == nil {
		t.Fatal("a snapshot of 2 epochs restored under a 1-epoch config")
	}
	s = d.Snapshot()
	s.Tasks = append(s.Tasks, TaskSnapshot{ID: 99999, State: Done})
	if _, err := Restore(cfg, s); err == nil {
		t.Fatal("a snapshot naming a task that does not exist restored")
	}
}

// A snapshot holds no entry for the bulk of a job: half an epoch of 1000
// tasks done, 8 held, 2 taken back, needs entries for those 10 only.
func TestSnapshotIsCompact(t *testing.T) {
	cfg := Config{Training: []Shard{{"a", 64000}}, RecordsPerTask: 64, NumEpochs: 3, MaxAttempts: 3, Shuffle: true, Seed: 9}
	d := mustNew(t, cfg)
	now := time.Unix(100, 0)
	for range 500 {
		a := mustGet(t, d, 1, now)
		mustReport(t, d, 1, a, ok(a), now)
	}
	for w := range 8 {
		mustGet(t, d, 10+w, now)
	}
	d.WorkerLost(10, now)
	d.WorkerLost(11, now)
	s := d.Snapshot()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Tasks) != 8 || len(b) > 2048 {
		t.Fatalf("snapshot of %d bytes with %d task entries, want 8 entries in under 2 KiB:\n%s", len(b), len(s.Tasks), b)
	}
	n := restart(t, cfg, d)
	if p := n.Progress(); p.TasksDone != 500 || p.TasksDoing != 6 {
		t.Fatalf("restored progress %+v", p)
	}
}
