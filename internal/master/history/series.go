package history

import (
	"math"
	"time"

	"elasticdl/internal/decimate"
	"elasticdl/internal/master/job"
)

// The ETA's window: the mean rate over the last etaWindow of samples, once
// they span etaMinSpan.
const (
	etaWindow  = 30 * time.Second
	etaMinSpan = 10 * time.Second
)

// Sample is the job at time T. Records: training records trained so far
// (corrupt ones included). Loss and RPS are means over the interval since
// the previous sample: loss null when no step was reported in it, both
// null on the first sample and where Gap is set. Gap: the interval since
// the previous sample spans a failover (the master that died may have
// sampled it); a chart breaks its line there.
type Sample struct {
	T              time.Time `json:"t"`
	Records        int64     `json:"records"`
	Loss           *float64  `json:"loss"`
	RPS            *float64  `json:"rps"`
	WorkersRunning int       `json:"workers_running"`
	WorkersPending int       `json:"workers_pending"`
	PSRunning      int       `json:"ps_running"`
	Target         int       `json:"target"`
	ModelVersion   int64     `json:"model_version"`
	RingVersion    int64     `json:"ring_version"`
	WorldSize      int       `json:"world_size"`
	Epoch          int       `json:"epoch"`
	Gap            bool      `json:"gap,omitempty"`
}

// Totals are the view's cumulative counts at the last sample kept: the
// next sample's interval means are their differences.
type Totals struct {
	T       time.Time `json:"t"`
	Records int64     `json:"records"`
	LossSum float64   `json:"loss_sum"`
	Steps   int64     `json:"steps"`
}

// series is at most MaxSamples samples, stride apart: when full, every
// other one goes (first and last kept) and the stride doubles, so the
// series always spans the whole job.
type series struct {
	samples []Sample
	stride  time.Duration
	last    *Totals
	// gap: the next sample follows a failover (Restore).
	gap bool
}

func newSeries() series { return series{stride: time.Second} }

// Sample adds a sample of v at at, if one is due: a stride (less a
// quarter, at most decimate.Jitter) after the last. Calls in between, or with a
// time before the last, add nothing: added says whether it did.
func (h *History) Sample(v job.View, at time.Time) (added bool) {
	s := &h.series
	var last time.Time
	if n := len(s.samples); n > 0 {
		last = s.samples[n-1].T
	}
	if !decimate.Due(last, len(s.samples) > 0, at, s.stride) {
		return false
	}
	smp := Sample{T: at, Records: v.Records, WorkersRunning: v.WorkersRunning, WorkersPending: v.WorkersPending,
		PSRunning: v.PSRunning, Target: v.Target, ModelVersion: v.ModelVersion, RingVersion: v.RingVersion,
		WorldSize: v.WorldSize, Epoch: v.Progress.Epoch}
	switch last := s.last; {
	case last == nil:
	case s.gap || v.Records < last.Records || v.Steps < last.Steps || !at.After(last.T):
		smp.Gap = true
	default:
		rps := round2(float64(v.Records-last.Records) / at.Sub(last.T).Seconds())
		smp.RPS = &rps
		if d := v.Steps - last.Steps; d > 0 {
			loss := (v.LossSum - last.LossSum) / float64(d)
			smp.Loss = &loss
		}
	}
	s.gap = false
	s.last = &Totals{T: at, Records: v.Records, LossSum: v.LossSum, Steps: v.Steps}
	s.samples = append(s.samples, smp)
	if len(s.samples) > MaxSamples {
		s.thin()
	}
	return true
}

// thin keeps every other sample, the first and the last among them (the
// series is full plus one: an odd count), each kept one taking over the
// interval of the one dropped before it; the stride doubles.
func (s *series) thin() {
	s.samples = decimate.Halve(s.samples, merge)
	s.stride *= 2
}

// merge returns b, its interval extended back over a's (whose start is
// prev): the mean rate over both, and the mean loss weighted by records.
func merge(prev, a, b Sample) Sample {
	if a.Gap || b.Gap || a.RPS == nil || b.RPS == nil {
		b.Gap = b.Gap || a.Gap
		if b.Gap {
			b.RPS, b.Loss = nil, nil
		}
		return b
	}
	if dt := b.T.Sub(prev.T).Seconds(); dt > 0 {
		rps := round2(float64(b.Records-prev.Records) / dt)
		b.RPS = &rps
	}
	wa, wb := float64(a.Records-prev.Records), float64(b.Records-a.Records)
	switch {
	case a.Loss == nil:
	case b.Loss == nil:
		b.Loss = a.Loss
	case wa+wb > 0:
		loss := (*a.Loss*wa + *b.Loss*wb) / (wa + wb)
		b.Loss = &loss
	}
	return b
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// Samples returns a copy of the series and its stride.
func (h *History) Samples() (stride time.Duration, samples []Sample) {
	return h.series.stride, append([]Sample(nil), h.series.samples...)
}

// SamplesSince returns the stride and a copy of the samples from index n
// on, for a reader that holds the first n taken at stride: from is n, or
// 0 (all of them) when the series was thinned since (another stride) or
// is shorter.
func (h *History) SamplesSince(stride time.Duration, n int) (now time.Duration, from int, samples []Sample) {
	if stride != h.series.stride || n > len(h.series.samples) {
		n = 0
	}
	return h.series.stride, n, append([]Sample(nil), h.series.samples[n:]...)
}

// ETA is the time training needs to finish v's remaining training
// records at the mean rate of the last 30 s of samples (at least the last
// two; none across a gap); ok is false outside training, before the
// samples span 10 s, and while nothing is trained.
func (h *History) ETA(v job.View) (eta time.Duration, ok bool) {
	ss := h.series.samples
	if v.Phase != job.Training || v.Progress.RecordsTotal <= 0 || len(ss) < 2 {
		return 0, false
	}
	last := ss[len(ss)-1]
	first := len(ss) - 1
	for first > 0 && !ss[first].Gap && (first == len(ss)-1 || !ss[first-1].T.Before(last.T.Add(-etaWindow))) {
		first--
	}
	span := last.T.Sub(ss[first].T)
	if span < etaMinSpan {
		return 0, false
	}
	rate := float64(last.Records-ss[first].Records) / span.Seconds()
	if rate <= 0 {
		return 0, false
	}
	remaining := max(v.Progress.RecordsTotal-v.Progress.RecordsDone, 0)
	return time.Duration(float64(remaining) / rate * float64(time.Second)).Round(time.Second), true
}
