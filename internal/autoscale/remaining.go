package autoscale

import (
	"cmp"
	"math"
	"slices"
)

// Work is what the remaining policy knows of a job beyond its bounds.
type Work struct {
	// Remaining is the records left over all epochs; negative: unknown.
	Remaining float64
	// Speedup is the job's fitted model; Known false: no sample yet.
	Speedup Speedup
	Known   bool
	// Current is the workers it runs now (0: pending).
	Current int
	// Samples are the measurements Speedup was fitted to: how long each
	// size has been measured decides when a peak is re-measured.
	Samples []Sample
}

// RemainingOptions are the remaining policy's knobs.
type RemainingOptions struct {
	// Fairness in [0, 1]: every job's weight is at least Fairness times
	// the equal one, so no job falls below about that fraction of its
	// fair share (0: pure heSRPT; 1: max-min fair).
	Fairness float64
	// ResizeCost is the seconds a resize stalls a job: a running job is
	// not resized when the change gains it less (see notWorthIt).
	ResizeCost float64
	// Horizon is the seconds a size is expected to stand before the next
	// change (0: until the job ends); a resize must pay back its cost
	// within it.
	Horizon float64
	// MarginalGain: a job of known speed-up gets no worker that adds
	// less than this fraction to its throughput (0: no such limit).
	MarginalGain float64
	// Explore: a job gets at most Explore times the largest size it has
	// measured (exploreFloor while it has measured less), so that its
	// speed-up is measured before it is extrapolated far (0: no limit).
	Explore float64
}

// DefaultRemainingOptions are the knobs the policy was measured with on
// the Pollux traces (package sim's DefaultConfig, which takes them from
// here): what `elasticdl autoscaler --policy=remaining` uses unless told.
func DefaultRemainingOptions() RemainingOptions {
	return RemainingOptions{Fairness: 0.5, ResizeCost: 60, MarginalGain: 0.02, Horizon: 300, Explore: 2}
}

// Why the remaining policy stops a job where it is, beyond Decide's
// reasons.
const (
	// ReasonHold: the job keeps its workers, as resizing would gain less
	// than it costs (RemainingOptions.ResizeCost).
	ReasonHold = "hold"
	// ReasonSpeedup: one more worker would be past the job's measured
	// peak, add less than RemainingOptions.MarginalGain, or go beyond
	// what RemainingOptions.Explore lets it reach before it is measured.
	ReasonSpeedup = "speed-up"
	// ReasonProbe: the job runs one worker past the cap its speed-up
	// sets, on room no other job wants, to measure that size again
	// (probeCap).
	ReasonProbe = "probe"
)

// DecideRemaining sizes jobs by their remaining work, heSRPT-style (Berg
// et al. 2020): it is Decide with each job's weight replaced by its
// heSRPT share, so services, minimums, placement and reasons are
// Decide's own. work is by s.Jobs' index (as many). Jobs are ranked by remaining
// time at one worker; with m jobs and speed-up exponent p the k-th
// largest gets (k/m)^(1/(1-p)) - ((k-1)/m)^(1/(1-p)) of the cluster, so
// the shorter get more (equal shares at p = 0); p is the jobs' mean
// exponent, at most maxExponent. Jobs of unknown size get the equal
// share. No job is given workers past its measured peak, nor one that
// adds less than MarginalGain (ReasonSpeedup).
func DecideRemaining(s Snapshot, work []Work, opt RemainingOptions) []Decision {
	weights := heSRPTWeights(work, opt.Fairness)
	bounds := s.Jobs
	s.Jobs = slices.Clone(s.Jobs)
	for i := range s.Jobs {
		s.Jobs[i].Weight = weights[i]
		if c := speedupCap(work[i], opt); c > 0 {
			s.Jobs[i].Max = min(s.Jobs[i].Max, max(s.Jobs[i].Min, c))
		}
		if opt.Explore > 0 {
			s.Jobs[i].Max = min(s.Jobs[i].Max, max(s.Jobs[i].Min, explored(work[i], opt.Explore)))
		}
	}
	out := probeCap(s, bounds, work, opt, decideHeld(s, work, opt))
	for i := range out {
		if out[i].Reason == ReasonMax && out[i].Target < bounds[i].Max {
			out[i].Reason = ReasonSpeedup
		}
	}
	return out
}

// probeCap lets one job held at the cap its speed-up sets (its measured
// peak, or the last worker that adds MarginalGain) run a worker past it
// when that costs no other job a worker, until the size past it has been
// measured as often as the cap. A size measured while the cluster was
// crowded looks slow, and the cap it sets would otherwise hold the job
// there when the cluster empties (experiment 4: a 101-epoch job at 3 of 8
// workers for 186 s alone); a gain fitted from few sizes is extrapolated
// the same way. s has the policy's caps; bounds the jobs' own.
func probeCap(s Snapshot, bounds []Job, work []Work, opt RemainingOptions, out []Decision) []Decision {
	if !roomLeft(out) {
		return out
	}
	for i, d := range out {
		c := speedupCap(work[i], opt)
		if c < 1 || d.Placed != c || work[i].Current < c || c+1 > bounds[i].Max ||
			measurements(work[i].Samples, c+1) >= measurements(work[i].Samples, c) {
			continue
		}
		trial := s
		trial.Jobs = slices.Clone(s.Jobs)
		trial.Jobs[i].Max = c + 1
		// One trial a decision (the first job that may probe): each costs
		// a Decide or two, and the policy's bound is 10 ms.
		res := decideHeld(trial, work, opt)
		if res[i].Placed != c+1 || !noneLoses(out, res, i) {
			return out
		}
		res[i].Reason = ReasonProbe
		return res
	}
	return out
}

// speedupCap is the most workers job w's fitted speed-up lets it have:
// its measured peak, or the last worker that adds opt.MarginalGain,
// whichever is fewer (0: no such cap).
func speedupCap(w Work, opt RemainingOptions) int {
	if !w.Known {
		return 0
	}
	c := math.MaxInt32
	if opt.MarginalGain > 0 {
		c = usefulWorkers(w.Speedup, opt.MarginalGain)
	}
	if pk := w.Speedup.Peak; pk > 0 {
		c = min(c, pk)
	}
	if c == math.MaxInt32 {
		return 0
	}
	return c
}

// roomLeft reports whether every job stopped at its maximum (its own or
// a cap) or was held: then no job, and no waiting service, wants the room
// left, and a probe takes nothing from anyone but for fragmentation.
func roomLeft(out []Decision) bool {
	for _, d := range out {
		if d.Reason != ReasonMax && d.Reason != ReasonHold {
			return false
		}
	}
	return true
}

// noneLoses reports whether every job but i is placed as many workers in
// res as in out.
func noneLoses(out, res []Decision, i int) bool {
	for j := range out {
		if j != i && res[j].Placed < out[j].Placed {
			return false
		}
	}
	return true
}

// measurements is how many measurements samples hold at w workers.
func measurements(samples []Sample, w int) int {
	n := 0
	for _, s := range samples {
		if s.Workers == w {
			n += s.Count
		}
	}
	return n
}

// exploreFloor is the size a job may be taken to as if measured before it
// has measured one that large: the doubling from it (4 workers) is what
// a job gets at first. Measured on the Pollux traces (package sim): a
// floor of 1, 2 or 4 gave 0.797, 0.792 and 0.823 × max-min fair's mean
// JCT.
const exploreFloor = 2

// explored is the most workers job w may get under RemainingOptions.Explore
// factor f: f times the largest size it has measured, at least
// exploreFloor's. A job that slows down with more workers (the Pollux
// trace's ncf) then shows it at twice a size it ran well at, where its
// peak is measured, instead of being given a share its one measured size
// extrapolated by the prior would justify.
func explored(w Work, f float64) int {
	m := exploreFloor
	if w.Known {
		m = max(m, w.Speedup.Measured)
	}
	return int(min(math.Ceil(f*float64(m)), math.MaxInt32))
}

// decideHeld is Decide(s), with the jobs whose resize is not worth its cost
// kept at their current workers.
func decideHeld(s Snapshot, work []Work, opt RemainingOptions) []Decision {
	out := Decide(s)
	if opt.ResizeCost <= 0 {
		return out
	}
	hold := make([]bool, len(out))
	anyHeld := false
	for i, d := range out {
		hold[i] = notWorthIt(s.Jobs[i], work[i], d.Target, opt)
		anyHeld = anyHeld || hold[i]
	}
	if !anyHeld {
		return out
	}
	res := Decide(pinned(s, work, hold, true))
	for i := range res {
		// Holding a job's workers must not cost another job its floor:
		// then only growth is held back.
		if !hold[i] && res[i].Placed < out[i].Placed && res[i].Reason == ReasonMinUnfit {
			res = Decide(pinned(s, work, hold, false))
			break
		}
	}
	for i := range res {
		if hold[i] && res[i].Target == work[i].Current {
			res[i].Reason = ReasonHold
		}
	}
	return res
}

// pinned is s with the held jobs kept at their current workers: their
// maximum, and with shrinks, their minimum too.
func pinned(s Snapshot, work []Work, held []bool, shrinks bool) Snapshot {
	s.Jobs = slices.Clone(s.Jobs)
	for i := range s.Jobs {
		if held[i] {
			s.Jobs[i].Max = work[i].Current
			if shrinks {
				s.Jobs[i].Min = work[i].Current
			}
		}
	}
	return s
}

// usefulWorkers is the most workers whose last one still adds gain of
// the job's throughput: w^p / (w-1)^p >= 1 + gain.
func usefulWorkers(m Speedup, gain float64) int {
	if m.Exponent <= 0 {
		return 1
	}
	c := math.Expm1(math.Log1p(gain) / m.Exponent)
	if c <= 0 {
		return math.MaxInt32
	}
	return int(min(math.Floor((1+c)/c), math.MaxInt32))
}

// notWorthIt reports whether moving job j from its current workers to
// target gains less than the resize costs: the resize stalls it for
// cost seconds, and the new size pays back only until it changes again
// (horizon) or the job ends, whichever is first.
func notWorthIt(j Job, w Work, target int, opt RemainingOptions) bool {
	c := w.Current
	if c < 1 || c == target || c < j.Min || c > j.Max || !w.Known || w.Remaining < 0 {
		return false
	}
	now, then := w.Speedup.Throughput(c), w.Speedup.Throughput(target)
	if !(now > 0 && then > 0) {
		return false
	}
	h := w.Remaining / now
	if opt.Horizon > 0 {
		h = min(h, opt.Horizon)
	}
	return math.Abs(then-now)*h < opt.ResizeCost*now
}

// maxExponent caps the exponent of the heSRPT shares: above it, shares
// concentrate on the shortest jobs so that each arrival swings the others'
// sizes (churn), and a fitted exponent is an extrapolation anyway
// (measured on the Pollux traces, package sim: 0.5 to 0.7 alike, 0.95
// 5 % worse).
const maxExponent = 0.5

// sizeBand is the relative difference below which two jobs' sizes rank
// alike.
const sizeBand = 0.2

// heSRPTWeights are the jobs' heSRPT shares, floored at fairness/m.
func heSRPTWeights(work []Work, fairness float64) []float64 {
	m := len(work)
	out := make([]float64, m)
	var ranked []int
	var pSum float64
	for i, w := range work {
		out[i] = 1 / float64(m)
		if w.Known && w.Remaining >= 0 && w.Speedup.Base > 0 {
			ranked = append(ranked, i)
			pSum += w.Speedup.Exponent
		}
	}
	if len(ranked) == 0 {
		return out
	}
	// Sizes are compared in bands of sizeBand: estimates closer than
	// that are noise, and ranking by noise would swap jobs each round.
	size := func(i int) float64 {
		return math.Floor(math.Log1p(work[i].Remaining/work[i].Speedup.Base) / math.Log1p(sizeBand))
	}
	// Largest first; equal sizes share their ranks' total equally.
	slices.SortStableFunc(ranked, func(a, b int) int { return cmp.Compare(size(b), size(a)) })
	p := min(pSum/float64(len(ranked)), maxExponent)
	// The ranked jobs share what the unknown ones leave.
	part := float64(len(ranked)) / float64(m)
	f := func(k int) float64 { return math.Pow(float64(k)/float64(len(ranked)), 1/(1-p)) }
	for k := 0; k < len(ranked); {
		e := k + 1
		for e < len(ranked) && size(ranked[e]) == size(ranked[k]) {
			e++
		}
		each := part * (f(e) - f(k)) / float64(e-k)
		for _, i := range ranked[k:e] {
			out[i] = each
		}
		k = e
	}
	return floorWeights(out, clamp01(fairness)/float64(m))
}

// floorWeights raises every weight below floor to it and scales the
// others down so that they still sum to 1 (water-filling: scaling can
// push more below the floor).
func floorWeights(w []float64, floor float64) []float64 {
	floored := make([]bool, len(w))
	for {
		var rest, nFloored float64
		for i, x := range w {
			if floored[i] {
				nFloored++
			} else {
				rest += x
			}
		}
		if rest <= 0 {
			return slices.Repeat([]float64{floor}, len(w))
		}
		scale := (1 - nFloored*floor) / rest
		changed := false
		for i, x := range w {
			if !floored[i] && x*scale < floor {
				floored[i], changed = true, true
			}
		}
		if !changed {
			out := make([]float64, len(w))
			for i, x := range w {
				out[i] = x * scale
				if floored[i] {
					out[i] = floor
				}
			}
			return out
		}
	}
}
