package task

import (
	"cmp"
	"slices"
)

// rangeKey identifies a record range of a shard.
type rangeKey struct {
	shard      string
	start, end int64
}

// coverage counts, for one epoch, how many times each record range was
// reported trained. Tasks of an epoch never overlap, so in practice each key
// is one task; coverage is nevertheless computed with a sweep over interval
// boundaries so that overlapping ranges would be counted correctly too.
type coverage map[rangeKey]int

func (c coverage) add(t Task) { c[rangeKey{t.Shard, t.Start, t.End}]++ }

// addCov counts t's records once more in the epoch's coverage.
func (ep *epochState) addCov(t Task) {
	ep.cov.add(t)
	ep.measured = false
}

// dropCov counts t's records once less (a done task reopened).
func (ep *epochState) dropCov(t Task) {
	if k := (rangeKey{t.Shard, t.Start, t.End}); ep.cov[k] > 0 {
		ep.cov[k]--
	}
	ep.measured = false
}

// measure is cov's measure, kept until cov changes.
func (ep *epochState) measure() (once, twice int64) {
	if !ep.measured {
		ep.once, ep.twice = ep.cov.measure()
		ep.measured = true
	}
	return ep.once, ep.twice
}

// measure returns the number of records covered at least once and at least
// twice.
func (c coverage) measure() (once, twice int64) {
	type event struct {
		shard string
		pos   int64
		delta int
	}
	events := make([]event, 0, 2*len(c))
	for k, n := range c {
		if n == 0 || k.end <= k.start {
			continue
		}
		events = append(events, event{k.shard, k.start, n}, event{k.shard, k.end, -n})
	}
	slices.SortFunc(events, func(a, b event) int {
		return cmp.Or(cmp.Compare(a.shard, b.shard), cmp.Compare(a.pos, b.pos))
	})
	depth := 0
	for i, ev := range events {
		// Measure the gap since the previous boundary at the depth that held
		// over it; depth is 0 between shards, so shards never mix.
		if i > 0 && depth > 0 {
			w := ev.pos - events[i-1].pos
			once += w
			if depth >= 2 {
				twice += w
			}
		}
		depth += ev.delta
	}
	return once, twice
}

// Coverage returns, for each epoch created so far, how many of its training
// records were reported trained once, twice or more, or (for finished
// epochs) never. It is an audit independent of task states: it is computed
// from the record ranges of every successful report, late ones included.
func (d *Dispatcher) Coverage() []EpochCoverage {
	out := make([]EpochCoverage, len(d.epochs))
	for i := range d.epochs {
		out[i], _ = d.EpochCoverage(i + 1)
	}
	return out
}

// EpochCoverage is Coverage of one epoch (1-based); false if the epoch does
// not exist yet. It costs a sort of that epoch's reports only.
func (d *Dispatcher) EpochCoverage(epoch int) (EpochCoverage, bool) {
	if epoch < 1 || epoch > len(d.epochs) {
		return EpochCoverage{}, false
	}
	ep := &d.epochs[epoch-1]
	once, twice := ep.measure()
	c := EpochCoverage{
		Epoch:               epoch,
		Records:             d.epochTotal,
		RecordsTrained:      once,
		RecordsTrainedTwice: twice,
		Finished:            ep.tasksDone == ep.tasks,
	}
	if c.Finished {
		c.RecordsMissed = d.epochTotal - once
	}
	return c, true
}
