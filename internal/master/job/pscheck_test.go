package job

import (
	"errors"
	"strings"
	"testing"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

// checkConfig: 1000 records in tasks of 512 and 488 (8 minibatches of 64
// each, the last ones of 64 and 40 records), in that order, 2 PS that
// record minibatches.
func checkConfig(c *Config) {
	c.CheckApplied, c.MinibatchSize, c.NumPS = true, 64, 2
	c.Tasks.Shuffle = false
}

// holds is one shard's answer: task -> [start, end) minibatch spans.
func holds(tasks map[int64][][2]int32) ShardMinibatches { return ShardMinibatches{Tasks: tasks} }

// asked returns the CheckApplied decided since the last take, failing
// without one.
func (h *harness) asked() CheckApplied {
	h.t.Helper()
	rd := h.take()
	if rd.CheckApplied == nil {
		h.t.Fatal("the core did not ask the PS what they hold")
	}
	return *rd.CheckApplied
}

// trainBoth hands the epoch's two tasks to workers 0 and 1 and reports them.
func (h *harness) trainBoth() (task.Task, task.Task) {
	h.t.Helper()
	a, b := h.get(0), h.get(1)
	h.train(0, a, 10)
	h.train(1, b, 20)
	return a, b
}

func TestCheckAppliedRequeuesWhatAShardLost(t *testing.T) {
	h := newHarness(t, checkConfig)
	h.runAll()
	a, b := h.trainBoth()
	// Every task is done, but a shard may lack some: workers wait.
	if k := h.kind(0); k != task.KindWait {
		t.Fatalf("after the last report: %v, want wait", k)
	}
	q := h.asked()
	// Shard 1 restored a checkpoint that lacks b's last 3 minibatches
	// (64+64+40 records).
	all := [][2]int32{{0, 8}}
	h.step(AppliedFound{Gen: q.Gen, Shards: []ShardMinibatches{
		holds(map[int64][][2]int32{a.ID: all, b.ID: all}),
		holds(map[int64][][2]int32{a.ID: all, b.ID: {{0, 5}}}),
	}})
	if h.saved || h.j.Phase() != Training {
		t.Fatalf("phase %v, saved %v: the job went on with records missing", h.j.Phase(), h.saved)
	}
	s := h.summary()
	if s.RecordsRequeuedForRollback != 168 || s.Tasks.Reopened != 1 {
		t.Fatalf("requeued %d records, %d tasks; want 168, 1", s.RecordsRequeuedForRollback, s.Tasks.Reopened)
	}
	if !hasNotice(h.take().Notices, "RolledBackRecordsRequeued") {
		t.Fatal("no notice of the rollback")
	}
	redo := h.get(1)
	if redo.ID != b.ID {
		t.Fatalf("got task %d, want the reopened %d", redo.ID, b.ID)
	}
	if c := h.j.Coverage()[0]; c.RecordsTrained != a.Records() || c.Finished {
		t.Fatalf("coverage while the task is redone: %+v", c)
	}
	h.train(1, redo, 30)
	q2 := h.asked()
	if q2.Gen != q.Gen+1 {
		t.Fatalf("second check gen %d after %d", q2.Gen, q.Gen)
	}
	h.step(AppliedFound{Gen: q2.Gen, Shards: []ShardMinibatches{
		holds(map[int64][][2]int32{a.ID: all, b.ID: all}),
		holds(map[int64][][2]int32{a.ID: all, b.ID: all}),
	}})
	if !h.saved || h.j.Phase() != Saving {
		t.Fatalf("phase %v, saved %v after a clean check", h.j.Phase(), h.saved)
	}
	e := h.summary().Epochs[0]
	if e.RecordsTrained != 1000 || e.RecordsTrainedTwice != 0 || e.RecordsMissed != 0 {
		t.Fatalf("ledger %+v", e)
	}
}

func TestCheckAppliedCountsReadableRecordsOnly(t *testing.T) {
	h := newHarness(t, checkConfig)
	h.runAll()
	a, b := h.get(0), h.get(1)
	h.train(0, a, 10)
	// 40 of b's 488 records are unreadable: 448 readable = 7 minibatches.
	h.step(ReportTask{Worker: 1, TaskID: b.ID, Result: task.Result{Records: 448, Corrupt: 40, Steps: 7}, ModelVersion: 20})
	q := h.asked()
	h.step(AppliedFound{Gen: q.Gen, Shards: []ShardMinibatches{
		holds(map[int64][][2]int32{a.ID: {{0, 8}}, b.ID: {{0, 7}}}),
		holds(map[int64][][2]int32{a.ID: {{0, 8}}, b.ID: {{0, 7}}}),
	}})
	if !h.saved {
		t.Fatal("7 minibatches of 448 readable records are the whole task: want it saved")
	}
	if e := h.summary().Epochs[0]; e.RecordsTrained != 1000 || e.RecordsMissed != 0 {
		t.Fatalf("ledger %+v: unreadable records count as trained, as in the task ledger", e)
	}
}

func TestCheckAppliedLeavesOutShardsOfUnknownHistory(t *testing.T) {
	h := newHarness(t, checkConfig)
	h.runAll()
	a, b := h.trainBoth()
	q := h.asked()
	// Shard 0 was re-initialized from a worker's parameters: it lists only
	// what it applied since, which says nothing of what it holds.
	h.step(AppliedFound{Gen: q.Gen, Shards: []ShardMinibatches{
		{Unknown: true, Tasks: map[int64][][2]int32{b.ID: {{6, 8}}}},
		holds(map[int64][][2]int32{a.ID: {{0, 8}}, b.ID: {{0, 8}}}),
	}})
	if !h.saved {
		t.Fatal("the known shard holds everything: want the model saved")
	}
	if s := h.summary(); len(s.PS.AppliedUnknown) != 1 || s.PS.AppliedUnknown[0] != 0 || s.RecordsRequeuedForRollback != 0 {
		t.Fatalf("applied_unknown %v, requeued %d", s.PS.AppliedUnknown, s.RecordsRequeuedForRollback)
	}
	if !hasNotice(h.take().Notices, "AppliedUnknown") {
		t.Fatal("no warning that exactly once is not known")
	}
}

func TestCheckAppliedRetriesThenFails(t *testing.T) {
	h := newHarness(t, checkConfig)
	h.runAll()
	h.trainBoth()
	q := h.asked()
	down := errors.New("ps 1 unavailable")
	// An answer to another question changes nothing.
	h.step(AppliedFound{Gen: q.Gen + 7, Err: down})
	h.step(AppliedFound{Gen: q.Gen, Err: down})
	h.step(Tick{})
	if h.take().CheckApplied != nil {
		t.Fatal("asked again at once after a failure")
	}
	for i := 1; i < maxCheckFailures; i++ {
		h.advance(checkRetry)
		h.step(Tick{})
		next := h.asked()
		h.step(AppliedFound{Gen: next.Gen, Err: down})
	}
	if h.j.Phase() != Failed || !strings.Contains(h.j.Err().Error(), "ps 1 unavailable") {
		t.Fatalf("phase %v, err %v after %d failures", h.j.Phase(), h.j.Err(), maxCheckFailures)
	}
}

func TestCheckAppliedRefusesAnAnswerOfTheWrongShape(t *testing.T) {
	h := newHarness(t, checkConfig)
	h.runAll()
	h.trainBoth()
	q := h.asked()
	h.step(AppliedFound{Gen: q.Gen, Shards: []ShardMinibatches{{}}})
	if h.j.Phase() != Failed {
		t.Fatalf("one shard's answer for a job of 2 PS: phase %v", h.j.Phase())
	}
}

func TestCheckAppliedAskedAgainAfterFailover(t *testing.T) {
	h := newHarness(t, checkConfig)
	ids := h.take().Launch
	for _, l := range ids {
		h.step(Instance{running(l.Role, l.ID)})
	}
	a, b := h.trainBoth()
	q := h.asked()
	var have []cluster.Event
	for _, l := range ids {
		have = append(have, running(l.Role, l.ID))
	}
	// The master dies before the PS answer: the next one asks again.
	h.failover(have...)
	q2 := h.asked()
	if q2.Gen <= q.Gen {
		t.Fatalf("asked with gen %d after %d", q2.Gen, q.Gen)
	}
	// The dead master's question is answered late: ignored.
	all := map[int64][][2]int32{a.ID: {{0, 8}}, b.ID: {{0, 8}}}
	h.step(AppliedFound{Gen: q.Gen, Shards: []ShardMinibatches{holds(all), holds(all)}})
	if h.saved {
		t.Fatal("saved on an answer to the dead master's question")
	}
	h.step(AppliedFound{Gen: q2.Gen, Shards: []ShardMinibatches{holds(all), holds(all)}})
	if !h.saved {
		t.Fatal("not saved after the new master's clean check")
	}
}

func TestCheckAppliedFlushesSyncAccumulators(t *testing.T) {
	h := newHarness(t, func(c *Config) { checkConfig(c); c.SyncSGD = true })
	h.runAll()
	h.trainBoth()
	q := h.asked()
	if q.FlushGen == 0 || q.FlushLive != 2 {
		t.Fatalf("sync SGD check %+v: want the accumulators flushed with 2 live workers", q)
	}
}

func hasNotice(ns []Notice, reason string) bool {
	for _, n := range ns {
		if n.Reason == reason {
			return true
		}
	}
	return false
}

// A PS relaunched during the final evaluation may restore an older
// checkpoint: the core checks again before saving, and trains again what
// it lost (the evaluation is not repeated).
func TestCheckAppliedAgainAfterAPSLostInTheFinalEvaluation(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		checkConfig(c)
		c.ValidationData, c.ValidationRecords = "val", 100
	})
	launched := h.take().Launch
	for _, l := range launched {
		h.step(Instance{running(l.Role, l.ID)})
	}
	a, b := h.trainBoth()
	all := map[int64][][2]int32{a.ID: {{0, 8}}, b.ID: {{0, 8}}}
	q := h.asked()
	h.step(AppliedFound{Gen: q.Gen, Shards: []ShardMinibatches{holds(all), holds(all)}})
	if h.j.Phase() != Evaluating {
		t.Fatalf("phase %v after a clean check, want the final evaluation", h.j.Phase())
	}
	ev := h.get(0)
	var ps1 int
	for _, l := range launched {
		if l.Role == cluster.PS && l.Index == 1 {
			ps1 = l.ID
		}
	}
	h.exit(cluster.PS, ps1, cluster.Killed)
	h.evaluate(0, ev, 30, 50)
	if h.saved {
		t.Fatal("saved without checking the relaunched PS")
	}
	q2 := h.asked()
	h.step(AppliedFound{Gen: q2.Gen, Shards: []ShardMinibatches{
		holds(all), holds(map[int64][][2]int32{a.ID: {{0, 6}}, b.ID: {{0, 8}}}),
	}})
	redo := h.get(1)
	if redo.ID != a.ID || h.j.Phase() != Training {
		t.Fatalf("got task %d in phase %v, want the reopened %d in training", redo.ID, h.j.Phase(), a.ID)
	}
	h.train(1, redo, 40)
	q3 := h.asked()
	h.step(AppliedFound{Gen: q3.Gen, Shards: []ShardMinibatches{holds(all), holds(all)}})
	if !h.saved || h.summary().RecordsRequeuedForRollback != 128 {
		t.Fatalf("saved %v, requeued %d; want saved after the clean check, 128 records requeued", h.saved, h.summary().RecordsRequeuedForRollback)
	}
	if s := h.summary(); s.Eval == nil || s.Eval.Records != 100 {
		t.Fatalf("final evaluation %+v", s.Eval)
	}
}
