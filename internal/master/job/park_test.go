package job

import (
	"slices"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

func TestMayPark(t *testing.T) {
	for _, c := range []struct {
		name                      string
		active, parked, minWorker int
		want                      bool
	}{
		{"3 workers, none parked", 3, 0, 1, true},
		{"2 workers: the other would be half", 2, 0, 1, false},
		{"1 worker: the ring would be empty", 1, 0, 0, false},
		{"3 workers, min_workers 3", 3, 0, 3, false},
		{"3 workers, min_workers 2", 3, 0, 2, true},
		{"5 workers, 1 parked: 2 of 6 parked", 5, 1, 1, true},
		{"4 workers, 1 parked: 2 of 5 parked", 4, 1, 1, true},
		{"3 workers, 1 parked: 2 of 4 is no minority", 3, 1, 1, false},
		{"4 workers, 2 parked: 3 of 6", 4, 2, 1, false},
	} {
		if got := mayPark(c.active, c.parked, c.minWorker); got != c.want {
			t.Errorf("%s: mayPark(%d, %d, %d) = %v, want %v", c.name, c.active, c.parked, c.minWorker, got, c.want)
		}
	}
}

func TestParkBackoff(t *testing.T) {
	for times, want := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 8 * time.Minute} {
		if got := parkBackoff(times); got != want {
			t.Errorf("parkBackoff(%d) = %s, want %s", times, got, want)
		}
	}
	if got := parkBackoff(1000); got != parkMax {
		t.Errorf("parkBackoff(1000) = %s, want the cap", got)
	}
}

// slowRing runs a 3-member AllReduce job whose rank 0 reports the applied
// steps every 200 ms, workers 0 and 1 training 20 records of each step and
// worker 2 (its share cut by its rate) 2, until worker 2 is marked slow.
func slowRing(t *testing.T, mutate func(*Config)) (*harness, map[int]task.Task) {
	h := allReduceJob(t, 3, func(c *Config) {
		c.RecordsPerTask, c.Tasks.RecordsPerTask = 10000, 10000
		c.Tasks.Training = []task.Shard{{Name: "train", Records: 30000}}
		c.SlowWorkerFraction, c.ParkSlowWorkers = 0.5, true
		if mutate != nil {
			mutate(c)
		}
	})
	for _, w := range []int{0, 1, 2, 0, 1, 2} {
		h.join(w)
	}
	wantRing(t, h.status(0), "v2 [0@a0 1@a1 2@a2]")
	held := map[int]task.Task{0: h.get(0), 1: h.get(1), 2: h.get(2)}
	done := map[int]int64{}
	for step := int64(1); len(h.j.SlowWorkers()) == 0; step++ {
		if step > 200 {
			t.Fatal("worker 2 never marked slow")
		}
		h.advance(200 * time.Millisecond)
		var parts []Part
		for w := range 3 {
			n := int64(20)
			if w == 2 {
				n = 2
			}
			parts = append(parts, Part{Worker: w, Task: held[w].ID, Start: done[w], End: done[w] + n})
			done[w] += n
		}
		h.step(ReportApplied{Worker: 0, Lineage: 1, Steps: []AppliedStep{{Step: step, RingVersion: 2, Parts: parts}}})
	}
	if got := h.j.SlowWorkers(); !slices.Equal(got, []int{2}) {
		t.Fatalf("slow workers %v, want [2]", got)
	}
	return h, held
}

// TestParkSlowWorker: an AllReduce member marked slow leaves the ring at a
// step boundary (a planned change), is stopped, and its slot gets a new
// worker after the backoff; the others' tasks go on, nothing is counted
// as scaled down or lost.
func TestParkSlowWorker(t *testing.T) {
	h, held := slowRing(t, nil)
	if r := h.step(RingStatus{Worker: 0}).Ring; r.Members != nil || !r.Planned {
		t.Fatalf("ring %+v, want a planned change forming", r)
	}
	if k := h.kind(2); k != task.KindWait {
		t.Fatalf("the parked worker asking for work got %v, want WAIT", k)
	}
	wantRing(t, h.join(0), "nil")
	wantRing(t, h.join(1), "v3 [0@a0 1@a1]")
	if r := h.step(JoinRing{Worker: 2, Addr: "a2"}); !r.LetGo {
		t.Fatalf("the parked worker's check-in: %+v, want LetGo", r)
	}
	if got := stoppedIDs(h.take()); !slices.Equal(got, []int{2}) {
		t.Fatalf("stopped %v, want the parked worker 2", got)
	}
	if a := h.step(GetTask{Worker: 1}).Assignment; a.Kind == task.KindTask {
		t.Fatalf("got task %d before the new ring settled", a.Task.ID)
	}
	h.step(SettleRing{Worker: 0, Version: 3})
	// Its task resumes after the records the ring applied of it.
	if got := h.get(1); got.ID != held[2].ID || got.Done == 0 || got.Done%2 != 0 {
		t.Fatalf("got task %d done %d, want the parked worker's task %d after its applied records", got.ID, got.Done, held[2].ID)
	}
	h.advance(parkFirst - time.Second)
	h.step(Tick{})
	if rd := h.take(); len(rd.Launch) != 0 {
		t.Fatalf("launched %+v before the backoff was over", rd.Launch)
	}
	h.advance(time.Second)
	h.step(Tick{})
	rd := h.take()
	if len(rd.Launch) != 1 || rd.Launch[0].Index != 2 || rd.Launch[0].ID != 3 {
		t.Fatalf("launched %+v, want worker 3 in slot 2", rd.Launch)
	}
	w := h.summary().Workers
	if w.Parked != 1 || w.Unparked != 1 || w.ScaledDown != 0 || w.Lost != 0 || w.Relaunched != 0 {
		t.Fatalf("workers %+v: want 1 parked, 1 unparked, none scaled down or lost", w)
	}
	if !slices.ContainsFunc(rd.Occurred, func(o Occurrence) bool { return o.Kind == OccurLaunched && o.Cause == causeUnpark }) {
		t.Fatalf("occurrences %+v: want a launch caused by an unpark", rd.Occurred)
	}
}

// TestParkNotBelowMinWorkers: with --min_workers 3 of 3, a slow member
// stays in the ring (marked, not parked); with parking off too.
func TestParkNotBelowMinWorkers(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"min_workers": func(c *Config) { c.MinWorkers = 3 },
		"off":         func(c *Config) { c.ParkSlowWorkers = false },
	} {
		t.Run(name, func(t *testing.T) {
			h, _ := slowRing(t, mutate)
			if r := h.step(RingStatus{Worker: 0}).Ring; r.Members == nil {
				t.Fatalf("ring %+v re-forms: want it kept", r)
			}
			if w := h.summary().Workers; w.Parked != 0 {
				t.Fatalf("workers %+v: want none parked", w)
			}
		})
	}
}

// TestParkedSlotNotRefilledOnScaleUp: a scale up does not launch into a
// parked slot, and a scale down gives the parked slot up first.
func TestParkedSlotNotRefilledOnScaleUp(t *testing.T) {
	h, _ := slowRing(t, nil)
	h.take()
	h.step(SetTarget{Workers: 3, Source: "test"}) // unchanged
	if rd := h.take(); len(rd.Launch) != 0 {
		t.Fatalf("launched %+v into the parked slot", rd.Launch)
	}
	h.step(SetTarget{Workers: 2, Source: "test"})
	if h.j.parkedNow() != 0 {
		t.Fatal("a scale down kept the parked slot")
	}
	h.advance(parkMax)
	h.step(Tick{})
	if rd := h.take(); len(rd.Launch) != 0 {
		t.Fatalf("launched %+v into a slot given up", rd.Launch)
	}
}

// TestRingPartsEqualMarkNobody: members with equal parts of every step
// (the shares of an undisturbed ring) are never marked, however long.
func TestRingPartsEqualMarkNobody(t *testing.T) {
	h := allReduceJob(t, 3, func(c *Config) { c.SlowWorkerFraction, c.ParkSlowWorkers = 0.5, true })
	for step := range 600 {
		h.advance(time.Duration(100+step%7*50) * time.Millisecond)
		h.j.noteRingParts(h.now, map[int]int64{0: 20, 1: 20, 2: int64(14 + step%13)})
	}
	if got := h.j.SlowWorkers(); len(got) != 0 {
		t.Fatalf("slow workers %v, want none", got)
	}
}

// TestParkSurvivesFailover: a master that takes over once the parked
// worker is stopped keeps its slot parked (nothing refills it) and
// re-admits it when the backoff the first master set is over.
func TestParkSurvivesFailover(t *testing.T) {
	h, _ := slowRing(t, nil)
	h.step(RingStatus{Worker: 0})
	h.join(0)
	h.join(1)
	h.step(JoinRing{Worker: 2, Addr: "a2"})
	if got := stoppedIDs(h.take()); !slices.Equal(got, []int{2}) {
		t.Fatalf("stopped %v, want the parked worker 2", got)
	}
	h.advance(parkFirst / 2)
	h.failover(running(cluster.Worker, 0), running(cluster.Worker, 1))
	if h.j.parkedNow() != 1 {
		t.Fatalf("parked slots after the failover: %d, want 1", h.j.parkedNow())
	}
	h.step(Tick{})
	if rd := h.take(); len(rd.Launch) != 0 {
		t.Fatalf("launched %+v into the parked slot before its backoff was over", rd.Launch)
	}
	h.advance(parkFirst / 2)
	h.step(Tick{})
	rd := h.take()
	if len(rd.Launch) != 1 || rd.Launch[0].Index != 2 {
		t.Fatalf("launched %+v, want a worker on probation in slot 2", rd.Launch)
	}
	if w := h.summary().Workers; w.Parked != 1 || w.Unparked != 1 {
		t.Fatalf("workers %+v: want 1 parked, 1 unparked", w)
	}
}
