package autoscale

import (
	"math"
	"math/rand"
	"slices"
	"testing"
)

// known is a job's work: remaining records at base records/s per worker
// and exponent p, running cur workers.
func known(remaining, base, p float64, cur int) Work {
	return Work{Remaining: remaining, Speedup: Speedup{Base: base, Exponent: p}, Known: true, Current: cur}
}

func TestDecideRemaining(t *testing.T) {
	four := func(lo, hi int) []Job {
		return []Job{job("a", lo, hi, 1000), job("b", lo, hi, 1000), job("c", lo, hi, 1000), job("d", lo, hi, 1000)}
	}
	manySmall := func() ([]Job, []Work) {
		js := []Job{job("huge", 1, 32, 1000)}
		ws := []Work{known(1e9, 100, 0.8, 0)}
		for _, k := range []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7"} {
			js = append(js, job(k, 1, 32, 1000))
			ws = append(ws, known(1e5, 100, 0.8, 0))
		}
		return js, ws
	}
	bigJobs, bigWork := manySmall()
	cases := []struct {
		name string
		s    Snapshot
		work []Work
		opt  RemainingOptions
		want []int
	}{
		{"one job: all it may use", Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 10, 1000)}},
			[]Work{known(1e6, 100, 0.7, 0)}, RemainingOptions{}, []int{10}},
		{"one job, size unknown", Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 32, 1000)}},
			[]Work{{Remaining: -1}}, RemainingOptions{}, []int{16}},
		{"equal jobs: equal shares", Snapshot{Nodes: nodes(4, 4000), Jobs: four(1, 16)},
			slices.Repeat([]Work{known(1e6, 100, 0.7, 0)}, 4), RemainingOptions{}, []int{4, 4, 4, 4}},
		{"shorter gets more", Snapshot{Nodes: nodes(4, 4000), Jobs: four(1, 16)},
			[]Work{known(4e6, 100, 0.5, 0), known(3e6, 100, 0.5, 0), known(2e6, 100, 0.5, 0), known(1e6, 100, 0.5, 0)},
			RemainingOptions{}, []int{1, 3, 5, 7}},
		{"fairness bounds the fall", Snapshot{Nodes: nodes(4, 4000), Jobs: four(1, 16)},
			[]Work{known(4e6, 100, 0.5, 0), known(3e6, 100, 0.5, 0), known(2e6, 100, 0.5, 0), known(1e6, 100, 0.5, 0)},
			RemainingOptions{Fairness: 0.75}, []int{3, 3, 4, 6}},
		{"one huge, many small: the huge one keeps its floor", Snapshot{Nodes: nodes(8, 4000), Jobs: bigJobs},
			bigWork, RemainingOptions{}, []int{1, 5, 5, 5, 4, 4, 4, 4}},
		{"one huge, many small, fairness 0.5: the huge one keeps half its fair share", Snapshot{Nodes: nodes(8, 4000), Jobs: bigJobs},
			bigWork, RemainingOptions{Fairness: 0.5}, []int{2, 5, 5, 4, 4, 4, 4, 4}},
		{"min_workers always holds", Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 6, 16, 1000), job("b", 1, 16, 1000)}},
			[]Work{known(1e9, 100, 0.9, 0), known(1e4, 100, 0.9, 0)}, RemainingOptions{}, []int{6, 10}},
		{"a job near its end is not resized for less than the cost",
			Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 16, 1000), job("b", 1, 16, 1000)}},
			[]Work{known(1e6, 100, 0.8, 8), known(500, 100, 0.8, 8)}, RemainingOptions{ResizeCost: 30}, []int{8, 8}},
		{"... but is without a resize cost",
			Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 16, 1000), job("b", 1, 16, 1000)}},
			[]Work{known(1e6, 100, 0.8, 8), known(500, 100, 0.8, 8)}, RemainingOptions{}, []int{4, 12}},
		{"a worthwhile resize happens", Snapshot{Nodes: nodes(4, 4000), Jobs: four(1, 16)},
			slices.Repeat([]Work{known(1e6, 100, 0.7, 1)}, 4), RemainingOptions{ResizeCost: 30}, []int{4, 4, 4, 4}},
		{"a small gain is not worth a resize within the horizon", Snapshot{Nodes: nodes(4, 4000), Jobs: four(1, 16)},
			slices.Repeat([]Work{known(1e6, 100, 0.7, 3)}, 4), RemainingOptions{ResizeCost: 90, Horizon: 300}, []int{3, 3, 3, 3}},
		{"no worker that adds less than the marginal gain", Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 16, 1000)}},
			[]Work{known(1e6, 100, 0.5, 0)}, RemainingOptions{MarginalGain: 0.05}, []int{10}},
		{"none beyond a measured peak", Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 16, 1000), job("b", 1, 16, 1000)}},
			[]Work{{Remaining: 1e3, Speedup: Speedup{Base: 100, Exponent: 0.5, Peak: 4}, Known: true}, known(1e6, 100, 0.5, 0)},
			RemainingOptions{}, []int{4, 12}},
		{"explore: a job not measured yet gets twice the floor", Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 32, 1000)}},
			[]Work{{Remaining: -1}}, RemainingOptions{Explore: 2}, []int{4}},
		{"explore: twice the largest size measured", Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 32, 1000), job("b", 1, 32, 1000)}},
			[]Work{{Remaining: 1e6, Speedup: Speedup{Base: 100, Exponent: 0.7, Measured: 3}, Known: true, Current: 3},
				{Remaining: 1e6, Speedup: Speedup{Base: 100, Exponent: 0.7, Measured: 1}, Known: true, Current: 1}},
			RemainingOptions{Explore: 2}, []int{6, 4}},
		{"explore: min_workers still holds", Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 6, 32, 1000)}},
			[]Work{{Remaining: -1}}, RemainingOptions{Explore: 2}, []int{6}},
		{"services growing come first", Snapshot{Nodes: nodes(4, 4000), Jobs: four(1, 16), Pods: service(8, "", 1000)},
			[]Work{known(4e6, 100, 0.5, 4), known(3e6, 100, 0.5, 4), known(2e6, 100, 0.5, 4), known(1e6, 100, 0.5, 4)},
			RemainingOptions{}, []int{1, 2, 2, 3}},
	}
	for _, c := range cases {
		got := DecideRemaining(c.s, c.work, c.opt)
		if !slices.Equal(targets(got), c.want) {
			t.Errorf("%s: targets %v, want %v (%v)", c.name, targets(got), c.want, got)
		}
	}
}

func TestDecideRemainingHoldReason(t *testing.T) {
	s := Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 16, 1000), job("b", 1, 16, 1000)}}
	got := DecideRemaining(s, []Work{known(1e6, 100, 0.8, 8), known(500, 100, 0.8, 8)}, RemainingOptions{ResizeCost: 30})
	if got[1].Reason != ReasonHold {
		t.Errorf("reason %q, want %q", got[1].Reason, ReasonHold)
	}
}

func TestFloorWeights(t *testing.T) {
	got := floorWeights([]float64{0.7, 0.2, 0.1}, 0.25)
	want := []float64{0.5, 0.25, 0.25}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-9 || d < -1e-9 {
			t.Fatalf("floorWeights = %v, want %v", got, want)
		}
	}
}

// BenchmarkDecideRemaining: 1,000 nodes, 10,000 pods, 100 jobs, with a
// resize cost (two Decides). The bound is 10 ms.
func BenchmarkDecideRemaining(b *testing.B) {
	rng := rand.New(rand.NewSource(2))
	s := randomSnapshot(rng, 1000, 10000, 100)
	for i := range s.Nodes {
		s.Nodes[i].Schedulable = true
	}
	work := make([]Work, len(s.Jobs))
	for i := range work {
		work[i] = known(rng.Float64()*1e8, 10+rng.Float64()*100, rng.Float64(), rng.Intn(8))
	}
	opt := RemainingOptions{Fairness: 0.5, ResizeCost: 30, Explore: 2}
	b.ResetTimer()
	for range b.N {
		DecideRemaining(s, work, opt)
	}
}

func TestDecideRemainingSpeedupReason(t *testing.T) {
	s := Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 16, 1000)}}
	w := []Work{{Remaining: 1e3, Speedup: Speedup{Base: 100, Exponent: 0.5, Peak: 4}, Known: true}}
	if got := DecideRemaining(s, w, RemainingOptions{}); got[0].Target != 4 || got[0].Reason != ReasonSpeedup {
		t.Errorf("got %+v, want target 4 for %q", got[0], ReasonSpeedup)
	}
}

// A job held at a peak measured briefly (4 workers slow twice, 3 workers
// well thirty times) runs one worker past it on room no job wants, until
// that size is measured as often; never at another job's cost.
func TestDecideRemainingProbesPeak(t *testing.T) {
	peaked := func(cur, at4 int) Work {
		samples := []Sample{{Workers: 2, RecordsPerSecond: 180, Count: 20}, {Workers: 3, RecordsPerSecond: 250, Count: 30},
			{Workers: 4, RecordsPerSecond: 150, Count: at4}}
		m, _ := FitSpeedup(samples, DefaultPrior())
		return Work{Remaining: 1e6, Speedup: m, Known: true, Current: cur, Samples: samples}
	}
	if m := peaked(3, 2).Speedup; m.Peak != 3 {
		t.Fatalf("fit %+v, want peak 3", m)
	}
	other := known(1e6, 100, 0.8, 5)
	other.Speedup.Measured = 8 // measured up to its bound: it wants all the room left
	for _, c := range []struct {
		name   string
		nodes  int
		jobs   []Job
		work   []Work
		want   int
		reason string
	}{
		{"room free: one past the peak", 4, []Job{job("a", 1, 8, 1000)}, []Work{peaked(3, 2)}, 4, ReasonProbe},
		{"probing goes on while measured less", 4, []Job{job("a", 1, 8, 1000)}, []Work{peaked(4, 20)}, 4, ReasonProbe},
		{"measured as often: the peak holds", 4, []Job{job("a", 1, 8, 1000)}, []Work{peaked(4, 30)}, 3, ReasonSpeedup},
		{"not at its peak yet: no probe", 4, []Job{job("a", 1, 8, 1000)}, []Work{peaked(2, 2)}, 3, ReasonSpeedup},
		{"its bound is the peak", 4, []Job{job("a", 1, 3, 1000)}, []Work{peaked(3, 2)}, 3, ReasonMax},
		{"the room is another job's", 2, []Job{job("a", 1, 8, 1000), job("b", 1, 8, 1000)}, []Work{peaked(3, 2), other}, 3, ReasonSpeedup},
	} {
		s := Snapshot{Nodes: nodes(c.nodes, 4000), Jobs: c.jobs}
		got := DecideRemaining(s, c.work, RemainingOptions{Fairness: 0.5, Explore: 2})
		if got[0].Target != c.want || got[0].Reason != c.reason {
			t.Errorf("%s: job a %+v, want %d workers for %q", c.name, got[0], c.want, c.reason)
		}
		if len(got) > 1 && got[1].Placed < 5 {
			t.Errorf("%s: job b placed %d, want its 5 workers kept", c.name, got[1].Placed)
		}
	}
}

// A job held at the last worker that adds MarginalGain, fitted from few
// sizes, probes one past it as it does past a peak, until that size is
// measured as often as the cap.
func TestDecideRemainingProbesMarginalGain(t *testing.T) {
	opt := RemainingOptions{Fairness: 0.5, MarginalGain: 0.02, Explore: 2}
	flat := func(cur, atNext int) Work {
		// Throughput 100·w^0.03 at 1, 2 and 4 workers: the fit (the prior
		// pulls its exponent up) gains 2 % up to 4.
		var samples []Sample
		for _, w := range []int{1, 2, 4} {
			samples = append(samples, Sample{Workers: w, RecordsPerSecond: 100 * math.Pow(float64(w), 0.03), Count: 20})
		}
		if atNext > 0 {
			samples = append(samples, Sample{Workers: 5, RecordsPerSecond: 100 * math.Pow(5, 0.03), Count: atNext})
		}
		m, _ := FitSpeedup(samples, DefaultPrior())
		return Work{Remaining: 1e6, Speedup: m, Known: true, Current: cur, Samples: samples}
	}
	if c := speedupCap(flat(4, 0), opt); c != 4 {
		t.Fatalf("fit %+v: cap %d, want 4", flat(4, 0).Speedup, c)
	}
	for _, c := range []struct {
		name   string
		work   Work
		want   int
		reason string
	}{
		{"room free: one past the cap", flat(4, 0), 5, ReasonProbe},
		{"probing goes on while measured less", flat(5, 5), 5, ReasonProbe},
		// Past the cap measured as often: the refit (its cap now 3) holds.
		{"measured as often: the cap holds", flat(5, 20), 3, ReasonSpeedup},
		{"not at its cap yet: no probe", flat(2, 0), 4, ReasonSpeedup},
	} {
		s := Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 8, 1000)}}
		got := DecideRemaining(s, []Work{c.work}, opt)
		if got[0].Target != c.want || got[0].Reason != c.reason {
			t.Errorf("%s: %+v, want %d workers for %q", c.name, got[0], c.want, c.reason)
		}
	}
}
