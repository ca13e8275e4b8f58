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
