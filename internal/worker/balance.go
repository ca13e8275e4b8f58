package worker

import (
	"math"
	"time"
)

// Balancing an AllReduce step (issue 34): every step waits for its slowest
// member, so a member that computes slower than the others (a throttled
// CPU, a noisy neighbour) takes a smaller share of the step's records, in
// proportion to its measured rate, and all finish their part together.
// The records each member trained travel with the gradients (the sum is
// divided by the step's records), so the step's mean gradient stays
// right; without a global batch the step is smaller, with one it keeps
// its size. Each member writes its rate at its rank in the step's buffer
// (ratesLen), so every member decides from the same rates.
const (
	// rateEMA is the weight of a step's rate in a member's smoothed rate.
	rateEMA = 0.3
	// balanceBelow: shares change when a busy member computes below this
	// fraction of the fastest for balanceSteps steps in a row, and go back
	// to equal once every busy member is within balanceWithin for as many
	// steps. A member held to 35 % of a CPU beside two at 0.8 computes at
	// 0.5-0.7 of them step by step (issue 34: at 0.5 shares stayed equal
	// and the ring ran at its pace, 1.6×); a single noisy step of a shared
	// machine changes nothing, and nothing flips back and forth.
	balanceBelow  = 0.7
	balanceWithin = 0.85
	balanceSteps  = 3
	// minShareFraction is the smallest share a slow member takes, as a
	// fraction of its equal share: it keeps training, and its rate keeps
	// being measured.
	minShareFraction = 0.1
	// minStepRecords is the fewest records a member trains in a step
	// when more are there: a model with BatchNorm cannot train on one.
	minStepRecords = 2
)

// rateMeter is a member's compute rate, records per second: the inverse
// of its smoothed seconds per record. The time is smoothed, not the rate:
// a member held in bursts (a CPU quota) computes some steps at full speed
// and some with a stop inside, and the mean of those steps' rates
// overstates what it computes in a step's time (issue 34: 1.5× here),
// so its share would not fit in it.
type rateMeter struct{ rate float64 }

func (m *rateMeter) observe(records int64, d time.Duration) {
	if records <= 0 || d <= 0 {
		return
	}
	spr := d.Seconds() / float64(records)
	if m.rate == 0 {
		m.rate = 1 / spr
		return
	}
	m.rate = 1 / ((1-rateEMA)/m.rate + rateEMA*spr)
}

// spread is the slowest busy member's rate over the fastest's (1: none
// busy, or one).
func spread(rates []float32) float64 {
	fastest, slowest := 0.0, math.Inf(1)
	for _, r := range rates {
		if r > 0 {
			fastest, slowest = max(fastest, float64(r)), min(slowest, float64(r))
		}
	}
	if fastest == 0 {
		return 1
	}
	return slowest / fastest
}

// balance is whether shares go by rate (on), and the steps in a row the
// spread has been on the other side (below balanceBelow while off, back
// within balanceWithin while on).
type balance struct {
	on    bool
	below int
}

// next is b after a step whose members' rates were rates. Every member
// sees the same rates, so all agree. Shares go back to equal only after
// balanceSteps steps in a row within balanceWithin, as they turn: a
// member held by a CPU quota computes a small share within one burst
// and looks fast for a step (issue 34), and shares that went back at
// once would give it the equal share again the next.
func (b balance) next(rates []float32) balance {
	if busy(rates) < 2 {
		return balance{} // nothing to balance
	}
	s := spread(rates)
	if b.on {
		switch {
		case s < balanceWithin:
			return balance{on: true}
		case b.below+1 >= balanceSteps:
			return balance{}
		}
		return balance{on: true, below: b.below + 1}
	}
	if s >= balanceBelow {
		return balance{}
	}
	if b.below+1 >= balanceSteps {
		return balance{on: true}
	}
	return balance{below: b.below + 1}
}

// busy counts the members with a rate (those that trained in the step).
func busy(rates []float32) int {
	n := 0
	for _, r := range rates {
		if r > 0 {
			n++
		}
	}
	return n
}

// balancedShare is the records rank takes in a step, given the members'
// rates from the last step (0: idle there, or not measured yet). Not
// balancing, it is stepShare's equal share; balancing, a member takes its
// share in proportion to its rate: without a global batch, a minibatch
// scaled by its rate over the fastest's; with one, the global batch split
// by rate. With a global batch the members idle in the last step leave
// their part to the busy ones: at a job's end one member holding the last
// records would otherwise train them in steps of its share alone, and a
// model's last steps on a few records of one task cost it accuracy
// (TestPyTorchAllReduce: 0.86 against 0.89). An idle member that has
// records again takes its floor, which the busy ones leave it, so that a
// step never exceeds the global batch.
func balancedShare(global, minibatch, rank, size int, rates []float32, balancing bool) int64 {
	equal := stepShare(global, minibatch, rank, size)
	if rank >= len(rates) || len(rates) != size {
		return equal // no rates yet
	}
	if global <= 0 {
		if !balancing || rates[rank] <= 0 {
			return equal
		}
		fastest := 0.0
		for _, r := range rates {
			fastest = max(fastest, float64(r))
		}
		return max(shareFloor(equal), int64(math.Round(float64(minibatch)*float64(rates[rank])/fastest)))
	}
	if busy(rates) == 0 {
		return equal // a ring's first step, or every member was idle
	}
	if rates[rank] <= 0 {
		return shareFloor(equal)
	}
	// The busy members split what the idle ones' floors leave.
	left, n, below := int64(global), 0, 0
	floors := make([]int64, size)
	for r, v := range rates {
		floors[r] = shareFloor(stepShare(global, minibatch, r, size))
		if v <= 0 {
			left -= floors[r]
			continue
		}
		n++
		if r < rank {
			below++
		}
	}
	left = max(left, int64(n)) // a global batch below the ring's size: a record each
	if !balancing {
		return stepShare(int(left), minibatch, below, n)
	}
	return splitByRate(left, rates, floors)[rank]
}

// splitByRate splits total records among the members with a rate in
// proportion to it, each taking at least its floor, and the parts add up
// to total (when the floors fit in it): members whose part would fall
// below their floor take it, the others split the rest, and the records
// rounding leaves go to the largest fractions (the lower rank on a tie).
// Every member computes the same split from the same rates.
func splitByRate(total int64, rates []float32, floors []int64) []int64 {
	parts := make([]int64, len(rates))
	fixed := make([]bool, len(rates))
	free, sum := total, 0.0
	for changed := true; changed; {
		changed, free, sum = false, total, 0
		for r, v := range rates {
			if fixed[r] {
				free -= floors[r]
			} else if v > 0 {
				sum += float64(v)
			}
		}
		for r, v := range rates {
			if !fixed[r] && v > 0 && float64(free)*float64(v)/sum < float64(floors[r]) {
				fixed[r], changed = true, true
			}
		}
	}
	frac := make([]float64, len(rates))
	left := free
	for r, v := range rates {
		switch {
		case fixed[r]:
			parts[r] = floors[r]
		case v > 0:
			raw := float64(free) * float64(v) / sum
			parts[r] = int64(math.Floor(raw))
			frac[r] = raw - float64(parts[r])
			left -= parts[r]
		}
	}
	for ; left > 0; left-- {
		best := -1
		for r, v := range rates {
			if !fixed[r] && v > 0 && (best < 0 || frac[r] > frac[best]) {
				best = r
			}
		}
		if best < 0 {
			break
		}
		parts[best]++
		frac[best] = -1
	}
	return parts
}

// shareFloor is the fewest records a member whose equal share is equal
// takes in a step.
func shareFloor(equal int64) int64 {
	return max(min(minStepRecords, equal), int64(minShareFraction*float64(equal)))
}

// ratesAt is where the members' rates start in the step's buffer: after
// the header and the tags, one per rank.
func (ar *ringMember) ratesAt() int { return ar.nGrads + stepHeader + ar.ring.Size()*tagLen }

// noteRates keeps the rates of the step just summed for the next step's
// share, and says when this member's share leaves its equal share or
// comes back to it (not each step's small change).
func (w *Worker) noteRates() {
	ar := w.ar
	was := ar.balancing.on
	ar.rates = append(ar.rates[:0], ar.buf[ar.ratesAt():ar.ratesAt()+ar.ring.Size()]...)
	ar.balancing = ar.balancing.next(ar.rates)
	if ar.balancing.on != was {
		w.log.Info("step shares by the members' rates", "on", ar.balancing.on, "records", w.share(),
			"equal", stepShare(w.cfg.GlobalBatch, w.cfg.MinibatchSize, ar.ring.Rank(), ar.ring.Size()), "rates", ar.rates)
	}
}
