// Package decimate keeps a time series of samples taken at most every
// stride bounded without losing its start: when full, every other sample
// goes and the stride doubles (1 s, 2 s, 4 s…), so a series of n samples
// always spans everything since the first. The job's history
// (internal/master/history) and the autoscaler's rounds
// (internal/autoscale/rounds) share it.
package decimate

import "time"

// Jitter is how much sooner than a stride after the last a sample is
// still taken: a ticker's ticks wobble.
const Jitter = 250 * time.Millisecond

// Due reports whether a sample at at is due when the last one was taken at
// last (ok false: none yet): a stride after it, less a quarter of the
// stride, at most Jitter. A time before the last is never due.
func Due(last time.Time, ok bool, at time.Time, stride time.Duration) bool {
	return !ok || !at.Before(last.Add(stride-min(stride/4, Jitter)))
}

// Halve keeps the first sample and every other one after it (of a series
// full plus one, an odd count: the last too), in place. Each kept sample
// takes over the interval of the one dropped before it: merge(prev,
// dropped, kept) returns it, prev being the kept sample before. The caller
// doubles its stride.
func Halve[T any](samples []T, merge func(prev, dropped, kept T) T) []T {
	if len(samples) == 0 {
		return samples
	}
	kept := samples[:1]
	for i := 2; i < len(samples); i += 2 {
		kept = append(kept, merge(samples[i-2], samples[i-1], samples[i]))
	}
	clear(samples[len(kept):])
	return kept
}
