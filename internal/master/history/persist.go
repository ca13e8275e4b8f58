package history

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"elasticdl/internal/master/job"
)

// Format is the version of Persisted's shape.
const Format = 1

// Persisted is what a master saves of its history and the next one
// restores: JSON, its field names part of the dashboard's documented API.
type Persisted struct {
	Format int `json:"format"`
	// NextSeq is the number the next event gets.
	NextSeq  int64     `json:"next_seq"`
	Events   []Event   `json:"events"`
	Segments []Segment `json:"segments"`
	// StrideSeconds: the samples' spacing now.
	StrideSeconds float64  `json:"stride_seconds"`
	Samples       []Sample `json:"samples"`
	// Last: the totals at the last sample (the next one's interval start).
	Last *Totals `json:"last,omitempty"`
}

// Persisted returns a copy of the history, shared with nothing History
// changes later.
func (h *History) Persisted() Persisted {
	_, events := h.Events(0, 0)
	p := Persisted{Format: Format, NextSeq: h.nextSeq, Events: events, Segments: h.Segments(),
		StrideSeconds: h.series.stride.Seconds(), Samples: slices.Clone(h.series.samples)}
	if h.series.last != nil {
		last := *h.series.last
		p.Last = &last
	}
	return p
}

// Restore replaces the history with p, a dead master's: the next sample
// is marked as a gap. Call Reconcile once the job has resumed.
func (h *History) Restore(p Persisted) error {
	if p.Format != Format {
		return fmt.Errorf("history format %d, this master reads %d", p.Format, Format)
	}
	*h = *New()
	h.events = slices.Clone(p.Events[max(len(p.Events)-MaxEvents, 0):])
	h.nextSeq = max(p.NextSeq, 1)
	if n := len(h.events); n > 0 {
		h.nextSeq = max(h.nextSeq, h.events[n-1].Seq+1)
	}
	h.segments = slices.Clone(p.Segments)
	h.reindex()
	h.trimSegments()
	if p.StrideSeconds >= 1 {
		h.series.stride = time.Duration(p.StrideSeconds * float64(time.Second))
	}
	h.series.samples = slices.Clone(p.Samples)
	for len(h.series.samples) > MaxSamples {
		h.series.thin()
	}
	if p.Last != nil {
		last := *p.Last
		h.series.last = &last
	}
	h.series.gap = true
	for _, e := range h.events {
		h.restoredUpTo = latest(h.restoredUpTo, e.At)
	}
	if n := len(h.series.samples); n > 0 {
		h.restoredUpTo = latest(h.restoredUpTo, h.series.samples[n-1].T)
	}
	return nil
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Reconcile squares a restored history with v, the job as a master that
// took over found it: segments whose instance v lacks end at at, cause
// "unknown (failover)"; instances v has that no open segment covers get
// one, launch cause "adopted"; a notice (ReasonGap) says since when
// events may be missing.
func (h *History) Reconcile(v job.View, at time.Time) {
	if !h.restoredUpTo.IsZero() {
		h.addEvent(job.Occurrence{At: at, Kind: job.OccurNotice, Reason: ReasonGap,
			Detail: fmt.Sprintf("the history may miss events after %s, its last save before the takeover", h.restoredUpTo.UTC().Format(time.RFC3339))})
		h.restoredUpTo = time.Time{}
	}
	live := make(map[instanceKey]bool, len(v.Instances))
	for _, in := range v.Instances {
		k := instanceKey{in.Role, in.ID}
		live[k] = true
		if _, ok := h.open[k]; ok {
			continue
		}
		s := Segment{Role: in.Role, Slot: in.Slot, ID: in.ID, LaunchCause: CauseAdopted, Launched: at}
		if in.Running {
			started := at
			if !in.StartedAt.IsZero() {
				started = in.StartedAt
			}
			s.Running = &started
		}
		h.openSegment(s)
	}
	for k, i := range h.open {
		if live[k] {
			continue
		}
		end := at
		h.segments[i].Ended = &end
		h.segments[i].Cause = CauseFailover
		delete(h.open, k)
	}
}

// Encode returns p as JSON of at most MaxEncoded bytes: the oldest events
// go first, then the oldest closed segments. p is not changed.
func Encode(p Persisted) ([]byte, error) {
	data, err := json.Marshal(p)
	if err != nil || len(data) <= MaxEncoded {
		return data, err
	}
	excess := len(data) - MaxEncoded + 1 // a list emptied loses one comma less
	events := p.Events
	for len(events) > 0 && excess > 0 {
		e, err := json.Marshal(events[0])
		if err != nil {
			return nil, fmt.Errorf("encode event %d: %w", events[0].Seq, err)
		}
		excess -= len(e) + 1 // and its comma
		events = events[1:]
	}
	p.Events = events
	if excess > 0 {
		segs, err := dropOldestClosed(p.Segments, excess)
		if err != nil {
			return nil, err
		}
		p.Segments = segs
	}
	return json.Marshal(p)
}

// dropOldestClosed returns segs less the oldest closed segments whose
// encodings total at least excess bytes.
func dropOldestClosed(segs []Segment, excess int) ([]Segment, error) {
	kept := make([]Segment, 0, len(segs))
	for _, s := range segs {
		if excess > 0 && s.Ended != nil {
			b, err := json.Marshal(s)
			if err != nil {
				return nil, fmt.Errorf("encode segment: %w", err)
			}
			excess -= len(b) + 1
			continue
		}
		kept = append(kept, s)
	}
	if excess > 0 {
		return nil, fmt.Errorf("history over %d bytes with its live segments and samples alone", MaxEncoded)
	}
	return kept, nil
}
