package job

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

func TestMayReplace(t *testing.T) {
	now := time.Unix(1000, 0)
	const after = time.Minute
	tests := []struct {
		name                  string
		slowSince, notBefore  time.Time
		replacing, slow, live int
		want                  bool
	}{
		{name: "not marked", slow: 1, live: 3},
		{name: "marked, too recently", slowSince: now.Add(-after + time.Second), slow: 1, live: 3},
		{name: "marked long enough", slowSince: now.Add(-after), slow: 1, live: 3, want: true},
		{name: "the slot's backoff not over", slowSince: now.Add(-time.Hour), notBefore: now.Add(time.Second), slow: 1, live: 3},
		{name: "the backoff just over", slowSince: now.Add(-time.Hour), notBefore: now, slow: 1, live: 3, want: true},
		{name: "another replacement on its way", slowSince: now.Add(-time.Hour), replacing: 1, slow: 1, live: 4},
		{name: "half slow: not a node's fault", slowSince: now.Add(-time.Hour), slow: 2, live: 4},
		{name: "a minority slow", slowSince: now.Add(-time.Hour), slow: 2, live: 5, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayReplace(now, tc.slowSince, tc.notBefore, after, tc.replacing, tc.slow, tc.live); got != tc.want {
				t.Fatalf("mayReplace = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWithAvoided(t *testing.T) {
	var many []string
	for i := range maxAvoidNodes + 2 {
		many = withAvoided(many, fmt.Sprintf("n%d", i))
	}
	tests := []struct {
		name  string
		avoid []string
		node  string
		want  []string
	}{
		{name: "first", node: "a", want: []string{"a"}},
		{name: "unknown node: nothing", avoid: []string{"a"}, node: "", want: []string{"a"}},
		{name: "once", avoid: []string{"a", "b"}, node: "a", want: []string{"a", "b"}},
		{name: "bounded: the oldest go", avoid: many, node: "x", want: append(slices.Clone(many[1:]), "x")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := withAvoided(slices.Clone(tc.avoid), tc.node); !slices.Equal(got, tc.want) {
				t.Fatalf("withAvoided = %v, want %v", got, tc.want)
			}
		})
	}
}

// replaceRun drives three workers on nodes n0..n2 where worker 2 trains a
// task every 50 s and the others one every 10 s, ticking each 10 s round,
// until stop says so or the tasks run out; it returns the tasks held.
func replaceRun(h *harness, stop func() bool) map[int]task.Task {
	h.t.Helper()
	held := map[int]task.Task{}
	slowStart := h.now
	for round := 0; round < 400 && !stop(); round++ {
		for w := range 2 {
			if tk, ok := held[w]; ok {
				h.train(w, tk, 1)
				delete(held, w)
			}
			if a := h.step(GetTask{Worker: w}).Assignment; a.Kind == task.KindTask {
				held[w] = a.Task
			}
		}
		if _, alive := h.j.workers[2]; alive {
			if tk, ok := held[2]; !ok || h.now.Sub(slowStart) >= 50*time.Second {
				if ok {
					h.train(2, tk, 1)
				}
				delete(held, 2)
				if a := h.step(GetTask{Worker: 2}).Assignment; a.Kind == task.KindTask {
					held[2], slowStart = a.Task, h.now
				}
			}
		}
		h.advance(10 * time.Second)
		h.step(Tick{})
	}
	return held
}

func placed(h *harness, id int, node string) {
	h.step(Instance{cluster.Event{Role: cluster.Worker, ID: id, Index: id, Phase: cluster.Running, Node: node}})
}

func replaceHarness(t *testing.T, on bool) *harness {
	return newHarness(t, func(c *Config) {
		c.NumWorkers, c.RecordsPerTask, c.Tasks.RecordsPerTask = 3, 10, 10
		c.Tasks.Training = []task.Shard{{Name: "train", Records: 2000}}
		c.CheckApplied, c.MinibatchSize = true, 10
		c.SlowWorkerFraction, c.BackupTasks = 0.5, true
		c.ReplaceSlowWorkers, c.ReplaceSlowAfter = on, 30*time.Second
	})
}

// TestSlowWorkerReplaced: the slow worker, marked, is stopped once marked
// for ReplaceSlowAfter, not counted lost, its task back to todo, and a new
// worker launched in its slot that avoids its node; that one stays
// pending, and after ReplaceSlowAfter is relaunched anywhere. Every record
// is trained once.
func TestSlowWorkerReplaced(t *testing.T) {
	for _, fo := range []bool{false, true} {
		t.Run(map[bool]string{false: "one master", true: "a master takes over while it is pending"}[fo], func(t *testing.T) {
			slowWorkerReplaced(t, fo)
		})
	}
}

func slowWorkerReplaced(t *testing.T, failover bool) {
	h := replaceHarness(t, true)
	for w := range 3 {
		placed(h, w, fmt.Sprintf("n%d", w))
	}
	stopped := func(id int) bool {
		return slices.ContainsFunc(h.ready.Stop, func(s StopInstance) bool { return s.ID == id })
	}
	held := replaceRun(h, func() bool { return stopped(2) })
	if !stopped(2) {
		t.Fatalf("the slow worker was not replaced; marks %+v", h.summary().SlowWorkers)
	}
	marked := h.summary().SlowWorkers[0].At
	if d := h.now.Sub(marked); d < 30*time.Second || d > 50*time.Second {
		t.Errorf("replaced %s after the mark, want ReplaceSlowAfter (30 s) and a round", d)
	}
	l := h.ready.Launch[len(h.ready.Launch)-1]
	if l.ID != 3 || l.Index != 2 || !slices.Equal(l.AvoidNodes, []string{"n2"}) {
		t.Fatalf("replacement launch %+v, want worker 3 in slot 2 avoiding n2", l)
	}
	s := h.summary()
	if s.Workers.Replaced != 1 || s.Workers.Lost != 0 {
		t.Fatalf("workers %+v, want 1 replaced, none lost", s.Workers)
	}
	if got := h.j.disp.Held(2); len(got) != 0 {
		t.Fatalf("the replaced worker still holds %v: its task should be back to todo", got)
	}
	delete(held, 2)
	// The replacement stays pending: after ReplaceSlowAfter it is
	// relaunched without the avoidance.
	h.take()
	if failover {
		h.failover(running(cluster.Worker, 0), running(cluster.Worker, 1),
			cluster.Event{Role: cluster.Worker, ID: 3, Index: 2, Phase: cluster.Pending})
		h.take()
	}
	for range 3 {
		h.advance(10 * time.Second)
		h.step(Tick{})
	}
	rd := h.take()
	if len(rd.Stop) != 1 || rd.Stop[0].ID != 3 || len(rd.Launch) != 1 || rd.Launch[0].Index != 2 || rd.Launch[0].AvoidNodes != nil {
		t.Fatalf("after 30 s pending: stops %+v launches %+v, want worker 3 stopped and slot 2 relaunched anywhere", rd.Stop, rd.Launch)
	}
	if s := h.summary(); s.Workers.AvoidanceDropped != 1 || s.Workers.Lost != 0 {
		t.Fatalf("workers %+v, want the avoidance dropped once", s.Workers)
	}
	// The new worker trains at full speed; the job ends exact.
	id := rd.Launch[0].ID
	placed(h, id, "n2")
	for w, tk := range held {
		if w != 2 {
			h.train(w, tk, 1)
		}
	}
	finishTraining(t, h, []int{0, 1, id})
	if e := h.summary().Epochs[0]; e.RecordsTrained != 2000 || e.RecordsTrainedTwice != 0 {
		t.Fatalf("ledger %+v, want every record once", e)
	}
	if s := h.summary(); s.Workers.Replaced != 1 {
		t.Fatalf("workers %+v, want one replacement (no second one before its backoff)", s.Workers)
	}
}

// finishTraining has workers take and train tasks until none is left.
func finishTraining(t *testing.T, h *harness, workers []int) {
	t.Helper()
	for round := 0; ; round++ {
		if round > 1000 {
			t.Fatal("training did not end")
		}
		got := false
		for _, w := range workers {
			if a := h.step(GetTask{Worker: w}).Assignment; a.Kind == task.KindTask {
				h.train(w, a.Task, 1)
				got = true
			}
		}
		if !got {
			return
		}
		h.advance(time.Second)
	}
}

// TestSlowWorkerNotReplacedWhenOff: the same job without the flag keeps
// its slow worker (backup tasks only), and launches avoid nothing.
func TestSlowWorkerNotReplacedWhenOff(t *testing.T) {
	h := replaceHarness(t, false)
	for w := range 3 {
		placed(h, w, fmt.Sprintf("n%d", w))
	}
	replaceRun(h, func() bool { return false })
	s := h.summary()
	if len(s.SlowWorkers) == 0 || s.Workers.Replaced != 0 || len(h.ready.Stop) != 0 {
		t.Fatalf("marks %+v, workers %+v, stops %+v: want worker 2 marked and kept", s.SlowWorkers, s.Workers, h.ready.Stop)
	}
}

// TestParkedSlotAvoidsNode: with the flag, the worker on probation in a
// parked slot avoids the parked worker's node; without it, nothing.
func TestParkedSlotAvoidsNode(t *testing.T) {
	for _, on := range []bool{true, false} {
		j, err := New(testConfig())
		if err != nil {
			t.Fatal(err)
		}
		j.cfg.ReplaceSlowWorkers = on
		j.avoidParked(1, "bad")
		j.avoidParked(1, "")
		want := []string(nil)
		if on {
			want = []string{"bad"}
		}
		if got := j.avoidFor(1); !slices.Equal(got, want) {
			t.Fatalf("on=%v: slot 1 avoids %v, want %v", on, got, want)
		}
		if got := j.avoidFor(0); got != nil {
			t.Fatalf("on=%v: slot 0 avoids %v, want nothing", on, got)
		}
	}
}
