// Package progress is what a job's master measures and publishes for a
// cluster scheduler (autoscale.Progress): its throughput at each worker
// count it has run with, and when a new value is worth publishing. It is
// pure: callers pass the times, and the master does the I/O.
package progress

import (
	"maps"
	"math"
	"slices"
	"time"

	"elasticdl/internal/autoscale"
)

// Settle is how long a worker count must have held before its intervals
// count: a task's records are counted when it is reported, so the first
// seconds at a new size still finish the previous size's tasks, and a new
// worker's first task includes its start.
const Settle = 10 * time.Second

// MaxInterval is the longest interval between observations that counts:
// a longer one (the master stalled, or a gap) may span anything.
const MaxInterval = 5 * time.Second

// Meter measures the training records/s at each number of running
// workers, from observations of the job's record counter. The zero value
// is ready.
type Meter struct {
	// SettleFor overrides Settle when positive (short jobs: experiments).
	SettleFor time.Duration

	sizes map[int]*size
	prev  *point
	// steady is when the worker count last changed.
	steady time.Time
}

type size struct {
	records, seconds float64
	count            int
}

type point struct {
	at      time.Time
	records int64
	workers int
}

// Restore is a Meter that goes on from samples (a previous master's).
func Restore(samples []autoscale.ProgressSample) *Meter {
	m := &Meter{}
	for _, s := range samples {
		if s.Workers < 1 || s.Count < 1 || !(s.Seconds > 0) || !(s.RecordsPerSecond >= 0) {
			continue
		}
		m.size(s.Workers).add(s.RecordsPerSecond*s.Seconds, s.Seconds, s.Count)
	}
	return m
}

func (m *Meter) size(w int) *size {
	if m.sizes == nil {
		m.sizes = map[int]*size{}
	}
	s := m.sizes[w]
	if s == nil {
		s = &size{}
		m.sizes[w] = s
	}
	return s
}

func (s *size) add(records, seconds float64, count int) {
	s.records += records
	s.seconds += seconds
	s.count += count
}

// Observe is the job at at: records trained so far, workers running. The
// interval since the previous observation counts toward workers' mean
// when the count held for it and Settle before it, it is at most
// MaxInterval, and the counter did not go back (a new master's).
func (m *Meter) Observe(at time.Time, records int64, workers int) {
	p := m.prev
	m.prev = &point{at: at, records: records, workers: workers}
	if p == nil || p.workers != workers {
		m.steady = at
		return
	}
	dt := at.Sub(p.at)
	settle := Settle
	if m.SettleFor > 0 {
		settle = m.SettleFor
	}
	if workers < 1 || dt <= 0 || dt > MaxInterval || records < p.records || p.at.Sub(m.steady) < settle {
		return
	}
	m.size(workers).add(float64(records-p.records), dt.Seconds(), 1)
}

// Samples are the means measured so far, by increasing workers.
func (m *Meter) Samples() []autoscale.ProgressSample {
	var out []autoscale.ProgressSample
	for _, w := range slices.Sorted(maps.Keys(m.sizes)) {
		s := m.sizes[w]
		out = append(out, autoscale.ProgressSample{Workers: w, RecordsPerSecond: s.records / s.seconds, Count: s.count, Seconds: s.seconds})
	}
	return out
}

// MinInterval is the least time between two publishes. The autoscaler's
// remaining policy does not resize a job for a gain smaller than a
// resize's cost (60 s by default) and looks 300 s ahead, so a value
// fresher than 30 s would not move its decisions; each publish is an API
// write and a round of every watcher of the Job.
const MinInterval = 30 * time.Second

// The changes worth publishing: the remaining work or a size's throughput
// by Relative or more, a size's measurements Growth times as many.
const (
	Relative = 0.05
	Growth   = 2
)

// Due says whether cur is worth publishing at now, the previous publish
// tried at tried and last the value published (nil: none yet): at most
// once per interval (MinInterval unless a job's flag says otherwise), and
// only when cur changed meaningfully.
func Due(last *autoscale.Progress, tried time.Time, cur autoscale.Progress, now time.Time, interval time.Duration) bool {
	if !tried.IsZero() && now.Sub(tried) < interval {
		return false
	}
	return last == nil || Changed(*last, cur)
}

// Changed says whether cur differs meaningfully from last: other bounds or
// sizes measured, the remaining work by Relative (or down to none), a
// size's throughput by Relative, or Growth times its measurements.
func Changed(last, cur autoscale.Progress) bool {
	if last.Min != cur.Min || last.Max != cur.Max || len(last.Samples) != len(cur.Samples) {
		return true
	}
	if (cur.Remaining == 0) != (last.Remaining == 0) || differ(float64(last.Remaining), float64(cur.Remaining)) {
		return true
	}
	for i, l := range last.Samples {
		c := cur.Samples[i]
		if l.Workers != c.Workers || differ(l.RecordsPerSecond, c.RecordsPerSecond) || c.Count >= Growth*l.Count {
			return true
		}
	}
	return false
}

// differ: a and b are Relative apart, relative to a.
func differ(a, b float64) bool {
	return math.Abs(b-a) >= Relative*math.Abs(a) && a != b
}
