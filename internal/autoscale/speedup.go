package autoscale

import (
	"maps"
	"math"
	"slices"
)

// Sample is a job's measured throughput at one worker count: what the
// master reports for each size the job has run.
type Sample struct {
	Workers int
	// RecordsPerSecond is the mean throughput measured at Workers.
	RecordsPerSecond float64
	// Count is how many measurements stand behind the mean; it weighs
	// the sample in the fit.
	Count int
}

// Speedup models a job's throughput at w workers as Base·w^Exponent:
// Exponent 1 is linear speed-up, 0 none (Exponent in [0, 1]).
type Speedup struct {
	Base, Exponent float64
	// Peak is the measured size of highest throughput when a larger
	// size measured clearly less (0: none did): workers beyond it slow
	// the job, whatever the power law says.
	Peak int
	// Measured is the largest size measured (0: none).
	Measured int
}

// Throughput is the modelled records/s at w workers (0 for w < 1).
func (m Speedup) Throughput(w int) float64 {
	if w < 1 {
		return 0
	}
	return m.Base * math.Pow(float64(w), m.Exponent)
}

// Prior is what the fit assumes before the samples say otherwise: the
// exponent, and how strongly (in units of the variance of log-workers of
// the samples, so that two sizes measured well outweigh it).
type Prior struct {
	Exponent, Weight float64
}

// DefaultPrior is sublinear, as data-parallel training usually is, and
// weak enough that two sizes one doubling apart override it.
func DefaultPrior() Prior { return Prior{Exponent: 0.8, Weight: 0.02} }

// FitSpeedup fits Base and Exponent to samples by least squares on
// log(throughput) = log(Base) + Exponent·log(workers), each size weighted
// by its count, with the prior pulling the exponent: with one size only,
// the exponent is the prior's. Nonsense samples (workers < 1, count < 1,
// throughput not positive and finite) are left out; a falling curve fits
// exponent 0. ok is false when no sample is left (the model is unknown).
func FitSpeedup(samples []Sample, prior Prior) (m Speedup, ok bool) {
	type point struct{ x, y, w float64 }
	byWorkers := map[int]*point{}
	var total float64
	for _, s := range samples {
		r := s.RecordsPerSecond
		if s.Workers < 1 || s.Count < 1 || !(r > 0) || math.IsInf(r, 0) {
			continue
		}
		p := byWorkers[s.Workers]
		if p == nil {
			p = &point{x: math.Log(float64(s.Workers))}
			byWorkers[s.Workers] = p
		}
		// Several samples at one size: their count-weighted mean log.
		w := float64(s.Count)
		p.y = (p.y*p.w + math.Log(r)*w) / (p.w + w)
		p.w += w
		total += w
	}
	if total == 0 {
		return Speedup{Exponent: clamp01(prior.Exponent)}, false
	}
	keys := slices.Sorted(maps.Keys(byWorkers))
	var mx, my float64
	for _, k := range keys {
		p := byWorkers[k]
		mx += p.x * p.w / total
		my += p.y * p.w / total
	}
	var sxx, sxy float64
	for _, k := range keys {
		p := byWorkers[k]
		sxx += p.w / total * (p.x - mx) * (p.x - mx)
		sxy += p.w / total * (p.x - mx) * (p.y - my)
	}
	logRates := make(map[int]float64, len(keys))
	for _, k := range keys {
		logRates[k] = byWorkers[k].y
	}
	exp := clamp01(prior.Exponent)
	if sxx+prior.Weight > 0 {
		exp = clamp01((sxy + prior.Weight*prior.Exponent) / (sxx + prior.Weight))
	}
	return Speedup{Base: math.Exp(my - exp*mx), Exponent: exp, Peak: peak(keys, logRates), Measured: keys[len(keys)-1]}, true
}

// peakDrop is how much less a larger size must measure to mark a peak:
// more than the measurements' noise.
const peakDrop = 0.1

// peak is the size of highest throughput when a larger one measured
// peakDrop less; 0 when none did. sizes are increasing; logRate by size.
func peak(sizes []int, logRate map[int]float64) int {
	best := 0
	for _, k := range sizes {
		if best == 0 || logRate[k] > logRate[best] {
			best = k
		}
	}
	for _, k := range sizes {
		if k > best && logRate[k] < logRate[best]+math.Log1p(-peakDrop) {
			return best
		}
	}
	return 0
}

func clamp01(x float64) float64 {
	if !(x > 0) {
		return 0
	}
	return min(x, 1)
}
