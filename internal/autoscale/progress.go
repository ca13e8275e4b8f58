package autoscale

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// ProgressVersion is the encoding of Progress that EncodeProgress writes
// and DecodeProgress reads: a reader refuses others rather than guess.
const ProgressVersion = 1

// MaxProgressSamples bounds the sizes a Progress carries (an annotation
// must stay small): EncodeProgress keeps those measured longest.
const MaxProgressSamples = 64

// Progress is what a job's master publishes for the remaining policy (on
// Kubernetes, the annotation AnnotationProgress of its master Job).
type Progress struct {
	Version int `json:"v"`
	// Remaining is the training records left over all epochs.
	Remaining int64 `json:"remaining"`
	// Min and Max are the job's worker bounds, as its master applies them.
	Min int `json:"min"`
	Max int `json:"max"`
	// Samples are the throughputs measured, one per worker count, by
	// increasing Workers.
	Samples []ProgressSample `json:"samples,omitempty"`
}

// ProgressSample is the mean throughput at one worker count: Count
// measurement intervals of Seconds in all (what a master that takes over
// needs to go on adding to the mean).
type ProgressSample struct {
	Workers          int     `json:"w"`
	RecordsPerSecond float64 `json:"rps"`
	Count            int     `json:"n"`
	Seconds          float64 `json:"s"`
}

// EncodeProgress is p as the annotation's value: JSON, Version set, at
// most MaxProgressSamples samples (the longest measured), sorted.
func EncodeProgress(p Progress) (string, error) {
	p.Version = ProgressVersion
	p.Samples = slices.Clone(p.Samples)
	if len(p.Samples) > MaxProgressSamples {
		slices.SortStableFunc(p.Samples, func(a, b ProgressSample) int { return cmp.Compare(b.Seconds, a.Seconds) })
		p.Samples = p.Samples[:MaxProgressSamples]
	}
	slices.SortFunc(p.Samples, func(a, b ProgressSample) int { return a.Workers - b.Workers })
	if err := p.check(); err != nil {
		return "", fmt.Errorf("progress: %w", err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("progress: %w", err)
	}
	return string(b), nil
}

// DecodeProgress reads an annotation EncodeProgress wrote; a value that is
// not one (garbled, another version, impossible numbers) is an error
// saying what is wrong.
func DecodeProgress(v string) (Progress, error) {
	var p Progress
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return Progress{}, fmt.Errorf("progress %.40q: not JSON: %w", v, err)
	}
	if p.Version != ProgressVersion {
		return Progress{}, fmt.Errorf("progress: version %d, want %d", p.Version, ProgressVersion)
	}
	if err := p.check(); err != nil {
		return Progress{}, fmt.Errorf("progress: %w", err)
	}
	return p, nil
}

// check says what makes p impossible.
func (p Progress) check() error {
	if p.Remaining < 0 {
		return fmt.Errorf("remaining %d records", p.Remaining)
	}
	if p.Min < 0 || p.Max < p.Min {
		return fmt.Errorf("bounds [%d, %d]", p.Min, p.Max)
	}
	if len(p.Samples) > MaxProgressSamples {
		return fmt.Errorf("%d samples, at most %d", len(p.Samples), MaxProgressSamples)
	}
	for i, s := range p.Samples {
		if s.Workers < 1 || s.Count < 1 || !finite(s.RecordsPerSecond) || s.RecordsPerSecond < 0 || !finite(s.Seconds) || s.Seconds <= 0 {
			return fmt.Errorf("sample %d %+v: want workers, count and seconds positive, records/s not negative", i, s)
		}
		if i > 0 && s.Workers <= p.Samples[i-1].Workers {
			return fmt.Errorf("sample %d: %d workers after %d (want increasing)", i, s.Workers, p.Samples[i-1].Workers)
		}
	}
	return nil
}

// Work is what DecideRemaining knows of a job that published p and runs
// current workers: its speed-up fitted from p's samples (with prior).
func (p Progress) Work(current int, prior Prior) Work {
	samples := make([]Sample, len(p.Samples))
	for i, s := range p.Samples {
		samples[i] = Sample{Workers: s.Workers, RecordsPerSecond: s.RecordsPerSecond, Count: s.Count}
	}
	m, known := FitSpeedup(samples, prior)
	return Work{Remaining: float64(p.Remaining), Speedup: m, Known: known, Current: current, Samples: samples}
}

// UnknownWork is a job that published nothing (or nothing readable):
// DecideRemaining gives it the equal share.
func UnknownWork(current int) Work { return Work{Remaining: -1, Current: current} }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
