// Package rounds is the autoscaler's recent past, for its dashboard: a
// series of what each round saw (capacity, the CPU services and each
// training job request, each job's target and workers), decimated as the
// job's history is (package decimate), and the latest target changes with
// their reasons. It is pure: no clock, no lock, no I/O; the caller serializes
// its calls.
//
// Nothing is persisted: the autoscaler is stateless (it reads the cluster
// anew each round), so a restarted autoscaler starts a new history.
package rounds

import (
	"time"

	"elasticdl/internal/decimate"
)

// Limits of what is kept.
const (
	// MaxSamples samples at most; when full, every other one goes and the
	// stride doubles, so the series spans every round since the start.
	MaxSamples = 720
	// MaxChanges target changes at most, the latest.
	MaxChanges = 200
	// Stride is the series' first stride: at most one sample a second,
	// however often rounds come (a change in the cluster brings one at
	// once).
	Stride = time.Second
)

// Round is what one round of the autoscaler saw and decided. CPU is in
// cores, as requested by pods bound to schedulable nodes.
type Round struct {
	At                 time.Time
	CapacityCPU        float64 // the schedulable nodes' allocatable
	ServicesCPU        float64 // every pod not of an ElasticDL job
	PendingServicePods int     // such pods waiting to be scheduled
	Jobs               []Job   // the autoscaled jobs, in decision order
	// Changes are the targets this round set, in the order it set them.
	Changes []Change
}

// Job is one autoscaled job in a round. Running and Pending count its
// worker pods bound to a node and waiting; CPU is what all its pods
// request (master and PS included).
type Job struct {
	Key      string
	Min, Max int
	Target   int
	Placed   int // how much of Target fits (autoscale.Decision)
	Running  int
	Pending  int
	CPU      float64
	Reason   string // autoscale.Decision's
}

// Change is a target the autoscaler set on a job: From is the job's
// target before (the master's --num_workers until an autoscaler set one).
type Change struct {
	At     time.Time `json:"at"`
	Job    string    `json:"job"`
	From   int       `json:"from"`
	To     int       `json:"to"`
	Reason string    `json:"reason"`
}

// Sample is the cluster as a round saw it at T.
type Sample struct {
	T           time.Time            `json:"t"`
	CapacityCPU float64              `json:"capacity_cpu"`
	ServicesCPU float64              `json:"services_cpu"`
	Jobs        map[string]JobSample `json:"jobs"`
}

// JobSample is one job in a Sample.
type JobSample struct {
	CPU     float64 `json:"cpu"`
	Target  int     `json:"target"`
	Running int     `json:"running"`
	Pending int     `json:"pending"`
}

// History is the series and the latest changes.
type History struct {
	samples []Sample
	stride  time.Duration
	changes []Change // oldest first
}

// New returns an empty history.
func New() *History { return &History{stride: Stride} }

// Added is what one Add added.
type Added struct {
	// Sample: a sample of the round was added (it is the last one).
	Sample bool
	// Thinned: the series was decimated, its stride doubled: samples
	// sent before are no longer all in it.
	Thinned bool
	// Changes: how many of the latest changes are the round's.
	Changes int
}

// Add records round r: a sample, if one is due (a stride after the last,
// as decimate.Due says), and its target changes.
func (h *History) Add(r Round) Added {
	var a Added
	n := len(h.samples)
	var last time.Time
	if n > 0 {
		last = h.samples[n-1].T
	}
	if decimate.Due(last, n > 0, r.At, h.stride) {
		h.samples = append(h.samples, sampleOf(r))
		a.Sample = true
		if len(h.samples) > MaxSamples {
			// A sample is a level, not an interval's mean: the kept one
			// stands as it is.
			h.samples = decimate.Halve(h.samples, func(_, _, kept Sample) Sample { return kept })
			h.stride *= 2
			a.Thinned = true
		}
	}
	if len(r.Changes) > 0 {
		h.changes = append(h.changes, r.Changes...)
		if over := len(h.changes) - MaxChanges; over > 0 {
			h.changes = append(h.changes[:0:0], h.changes[over:]...)
		}
		a.Changes = min(len(r.Changes), MaxChanges)
	}
	return a
}

func sampleOf(r Round) Sample {
	s := Sample{T: r.At, CapacityCPU: r.CapacityCPU, ServicesCPU: r.ServicesCPU, Jobs: make(map[string]JobSample, len(r.Jobs))}
	for _, j := range r.Jobs {
		s.Jobs[j.Key] = JobSample{CPU: j.CPU, Target: j.Target, Running: j.Running, Pending: j.Pending}
	}
	return s
}

// Samples returns the series, oldest first, and its stride. The slice is
// the caller's; the samples' maps are shared and never modified.
func (h *History) Samples() (stride time.Duration, samples []Sample) {
	return h.stride, append([]Sample(nil), h.samples...)
}

// Changes returns the latest changes, oldest first (the caller's slice).
func (h *History) Changes() []Change { return append([]Change(nil), h.changes...) }
