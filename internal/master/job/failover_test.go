package job

import (
	"errors"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

// failover replaces h's core by one resumed from its State (through JSON,
// as a master persists it) and steps Resumed with what the backend has.
func (h *harness) failover(have ...cluster.Event) {
	h.t.Helper()
	j, _, err := resumeThroughJSON(h.j.cfg, h.j)
	if err != nil {
		h.t.Fatal(err)
	}
	h.j, h.saved, h.ended = j, false, false
	h.step(Resumed{Instances: have})
}

func running(r cluster.Role, id int) cluster.Event {
	return cluster.Event{Role: r, ID: id, Phase: cluster.Running}
}

// runAll reports every launched instance running.
func (h *harness) runAll() {
	h.t.Helper()
	for _, l := range h.take().Launch {
		h.step(Instance{running(l.Role, l.ID)})
	}
}

func TestResumedAdoptsWhatRuns(t *testing.T) {
	h := newHarness(t, nil)
	h.runAll()
	t0 := h.get(0)
	h.advance(10 * time.Minute) // longer than the heartbeat and task timeouts
	h.failover(running(cluster.PS, 0), running(cluster.Worker, 0), running(cluster.Worker, 1))
	rd := h.take()
	if len(rd.Launch) != 0 || len(rd.Stop) != 0 {
		t.Fatalf("launched %v, stopped %v: want every instance adopted", rd.Launch, rd.Stop)
	}
	// The clocks start over: nothing is silent, no task times out.
	h.advance(30 * time.Second)
	h.step(Tick{})
	if rd := h.take(); len(rd.Stop) != 0 || len(rd.Launch) != 0 {
		t.Fatalf("after the failover: stopped %v, launched %v", rd.Stop, rd.Launch)
	}
	h.train(0, t0, 1)
	t1 := h.get(1)
	h.train(1, t1, 2)
	s := h.j.Summary(0)
	if s.MasterRestarts != 1 || s.Tasks.Requeued != 0 || s.Workers.Lost != 0 {
		t.Fatalf("summary %+v", s)
	}
	assertEpochExact(t, s, 1000)
}

func TestResumedLearnsWhatHappenedMeanwhile(t *testing.T) {
	h := newHarness(t, nil)
	h.runAll()
	held := h.get(0)
	// Worker 0 was killed while no master watched; worker 1 is gone from
	// the backend altogether (e.g. its launch never happened); an
	// instance the core does not know runs (launched after the last
	// persisted state).
	h.failover(running(cluster.PS, 0),
		cluster.Event{Role: cluster.Worker, ID: 0, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed},
		running(cluster.Worker, 7))
	rd := h.take()
	if len(rd.Stop) != 1 || rd.Stop[0] != (StopInstance{Role: cluster.Worker, ID: 7}) {
		t.Errorf("stopped %v, want the unknown worker-7", rd.Stop)
	}
	if len(rd.Launch) != 2 {
		t.Fatalf("launched %v, want both workers replaced", rd.Launch)
	}
	s := h.j.Summary(0)
	if s.Workers.Lost != 2 || s.Tasks.Requeued != 1 {
		t.Errorf("workers %+v, tasks %+v: want 2 lost and worker 0's task requeued", s.Workers, s.Tasks)
	}
	w := rd.Launch[0].ID
	h.step(Instance{running(cluster.Worker, w)})
	if got := h.get(w); got.ID != held.ID {
		t.Errorf("the replacement got task %d, want the requeued %d", got.ID, held.ID)
	}
}

func TestGetTaskResendsAnAnswerTheWorkerNeverGot(t *testing.T) {
	h := newHarness(t, nil)
	h.runAll()
	lost := h.step(GetTask{Worker: 0, Held: []int64{}}).Assignment.Task
	h.failover(running(cluster.PS, 0), running(cluster.Worker, 0), running(cluster.Worker, 1))
	// The worker never got the answer: it holds nothing, and gets the
	// same task again rather than a new one.
	a := h.step(GetTask{Worker: 0, Held: []int64{}}).Assignment
	if a.Kind != task.KindTask || a.Task.ID != lost.ID {
		t.Fatalf("got %+v, want task %d again", a, lost.ID)
	}
	// Holding it, the worker gets the next one.
	next := h.step(GetTask{Worker: 0, Held: []int64{lost.ID}}).Assignment
	if next.Kind != task.KindTask || next.Task.ID == lost.ID {
		t.Fatalf("got %+v, want a new task", next)
	}
	h.train(0, lost, 1)
	h.train(0, next.Task, 2)
	s := h.j.Summary(0)
	if s.Tasks.Resent != 1 {
		t.Errorf("tasks %+v, want 1 resent", s.Tasks)
	}
	if len(s.Failovers) != 1 || s.Failovers[0].FirstTaskAt == nil || !s.Failovers[0].FirstTaskAt.Equal(s.Failovers[0].ResumedAt) {
		t.Errorf("failovers %+v, want one, its first task handed out when it resumed", s.Failovers)
	}
	assertEpochExact(t, s, 1000)
}

func TestResumedInSavingSavesAgain(t *testing.T) {
	h := newHarness(t, nil)
	h.runAll()
	t0, t1 := h.get(0), h.get(1)
	h.train(0, t0, 1)
	h.train(1, t1, 2)
	if rd := h.take(); rd.Save == nil || !rd.Ended {
		t.Fatalf("ready %+v, want Save and Ended", rd)
	}
	// The master dies before the model is saved.
	h.failover(running(cluster.PS, 0), running(cluster.Worker, 0), running(cluster.Worker, 1))
	rd := h.take()
	if rd.Save == nil || !rd.Save.Model || !rd.Ended {
		t.Fatalf("after the failover: ready %+v, want the Save again and Ended", rd)
	}
	h.step(Saved{ModelVersion: 2})
	if h.j.Phase() != Succeeded {
		t.Fatalf("phase %v", h.j.Phase())
	}
}

func TestResumedAfterTheEndEndsAgain(t *testing.T) {
	h := newHarness(t, nil)
	h.runAll()
	h.step(Fail{Err: errors.New("disk full")})
	h.take()
	h.failover()
	if rd := h.take(); !rd.Ended || rd.Save != nil || len(rd.Launch) != 0 {
		t.Fatalf("ready %+v, want only Ended", rd)
	}
	if h.j.Phase() != Failed || h.j.Err() == nil {
		t.Fatalf("phase %v, err %v", h.j.Phase(), h.j.Err())
	}
}

func assertEpochExact(t *testing.T, s *Summary, records int64) {
	t.Helper()
	if len(s.Epochs) != 1 {
		t.Fatalf("epochs %+v", s.Epochs)
	}
	e := s.Epochs[0]
	if e.RecordsTrained != records || e.RecordsTrainedTwice != 0 || e.RecordsMissed != 0 {
		t.Fatalf("epoch ledger %+v, want %d records exactly once", e, records)
	}
}
