package job

import (
	"maps"
	"slices"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

func TestTrialKept(t *testing.T) {
	for _, c := range []struct {
		before, after float64
		want          bool
	}{{100, 134, true}, {100, 100, true}, {100, 99, false}, {100, 60, false}} {
		if got := trialKept(c.before, c.after); got != c.want {
			t.Errorf("trialKept(%v, %v) = %v, want %v", c.before, c.after, got, c.want)
		}
	}
}

// lagRing runs a 3-member AllReduce job whose rank 0 reports the applied
// steps every 200 ms, workers 0 and 1 training 20 records of each and
// worker 2 12 (0.6 of them: below the trial bar, above the slow one),
// until worker 2 is parked on trial; it returns the step reporter.
func lagRing(t *testing.T) (*harness, func(parts map[int]int64)) {
	h := allReduceJob(t, 3, func(c *Config) {
		c.RecordsPerTask, c.Tasks.RecordsPerTask = 100000, 100000
		c.Tasks.Training = []task.Shard{{Name: "train", Records: 300000}}
		c.SlowWorkerFraction, c.ParkSlowWorkers, c.ParkTrials = 0.5, true, true
	})
	for _, w := range []int{0, 1, 2, 0, 1, 2} {
		h.join(w)
	}
	wantRing(t, h.status(0), "v2 [0@a0 1@a1 2@a2]")
	held := map[int]task.Task{0: h.get(0), 1: h.get(1), 2: h.get(2)}
	done := map[int]int64{}
	var step int64
	report := func(parts map[int]int64) {
		h.advance(200 * time.Millisecond)
		step++
		var ps []Part
		for _, w := range slices.Sorted(maps.Keys(parts)) {
			ps = append(ps, Part{Worker: w, Task: held[w].ID, Start: done[w], End: done[w] + parts[w]})
			done[w] += parts[w]
		}
		h.step(ReportApplied{Worker: 0, Lineage: 1, Steps: []AppliedStep{{Step: step, RingVersion: h.j.ring.version, Parts: ps}}})
	}
	for h.summary().Workers.ParkTrials == 0 {
		if step > 200 {
			t.Fatal("worker 2 never parked on trial")
		}
		report(map[int]int64{0: 20, 1: 20, 2: 12})
	}
	if got := h.j.SlowWorkers(); len(got) != 0 {
		t.Fatalf("slow workers %v, want none: worker 2 lags, it is not slow", got)
	}
	// The ring re-forms without it; it is stopped.
	h.step(RingStatus{Worker: 0})
	h.join(0)
	wantRing(t, h.join(1), "v3 [0@a0 1@a1]")
	if r := h.step(JoinRing{Worker: 2, Addr: "a2"}); !r.LetGo {
		t.Fatalf("the parked worker's check-in: %+v, want LetGo", r)
	}
	if got := stoppedIDs(h.take()); !slices.Equal(got, []int{2}) {
		t.Fatalf("stopped %v, want worker 2", got)
	}
	h.step(SettleRing{Worker: 0, Version: 3})
	return h, report
}

// TestTrialParkKept: the two left train 56 records a step (the ring of
// three trained 52): the member stays parked until its backoff is over.
func TestTrialParkKept(t *testing.T) {
	h, report := lagRing(t)
	for range 20 {
		report(map[int]int64{0: 28, 1: 28})
	}
	if w := h.summary().Workers; w.ParkTrialsUndone != 0 || w.Parked != 1 {
		t.Fatalf("workers %+v: want the trial kept", w)
	}
	h.step(Tick{})
	if rd := h.take(); len(rd.Launch) != 0 {
		t.Fatalf("launched %+v before the park's backoff was over", rd.Launch)
	}
}

// TestTrialParkUndone: the two left train 40 records a step (the ring of
// three trained 52): a worker is launched in the slot at once, and the
// slot is not tried again before its trial backoff.
func TestTrialParkUndone(t *testing.T) {
	h, report := lagRing(t)
	for range 20 {
		report(map[int]int64{0: 20, 1: 20})
	}
	w := h.summary().Workers
	if w.ParkTrialsUndone != 1 {
		t.Fatalf("workers %+v: want the trial undone", w)
	}
	h.step(Tick{})
	rd := h.take()
	if len(rd.Launch) != 1 || rd.Launch[0].Index != 2 {
		t.Fatalf("launched %+v, want a worker in slot 2 at once", rd.Launch)
	}
	if s := h.j.parked[2]; s.times != 0 || !s.noTrialUntil.After(h.now) {
		t.Fatalf("slot 2 %+v: want no park counted and a trial backoff", *s)
	}
}

// TestNoTrialWhenOff: without --park_trials a member at 0.6 of the others
// is neither marked nor parked, however long.
func TestNoTrialWhenOff(t *testing.T) {
	h := allReduceJob(t, 3, func(c *Config) { c.SlowWorkerFraction, c.ParkSlowWorkers = 0.5, true })
	for range 300 {
		h.advance(200 * time.Millisecond)
		h.j.noteRingParts(h.now, map[int]int64{0: 20, 1: 20, 2: 12})
	}
	if w := h.summary().Workers; w.Parked != 0 || w.ParkTrials != 0 || len(h.j.SlowWorkers()) != 0 {
		t.Fatalf("workers %+v, slow %v: want nothing marked or parked", w, h.j.SlowWorkers())
	}
}

// TestTrialEndsOnRingChange: a membership change while the ring is
// measured without the member ends the trial as a plain park: however
// slow the ring is after, the slot is not given back early.
func TestTrialEndsOnRingChange(t *testing.T) {
	h, report := lagRing(t)
	for range 3 {
		report(map[int]int64{0: 20, 1: 20})
	}
	h.exit(cluster.Worker, 1, cluster.Killed)
	h.step(RingStatus{Worker: 0})
	h.join(0)
	if v := h.j.ring.version; v <= 3 || h.j.ring.forming {
		t.Fatalf("ring version %d (forming %v): want a new ring after the loss", v, h.j.ring.forming)
	}
	for range 20 {
		report(map[int]int64{0: 10})
	}
	if w := h.summary().Workers; w.ParkTrialsUndone != 0 || h.j.trial != nil {
		t.Fatalf("workers %+v, trial %+v: want the trial ended as a plain park", w, h.j.trial)
	}
	if s := h.j.parked[2]; s == nil || s.until.IsZero() {
		t.Fatalf("slot 2 %+v: want it parked for its backoff", s)
	}
}
