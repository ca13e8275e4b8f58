// Package history keeps what a job's dashboard shows of its past: the
// latest events (the core's occurrences, numbered), one timeline segment
// per instance by slot, and a series of samples thinned to cover the
// whole job, all bounded. It lives beside the core's persisted state, not
// in it, so that the core's group commits stay small; the master saves it
// lazily (Persisted) and a master that takes over restores it (Restore,
// Reconcile).
//
// It is pure: it reads no clock (callers pass times), takes no lock and
// does no I/O. The master serialises its calls.
package history

import (
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
)

// The limits: what a history holds at most, and the size Encode keeps to.
const (
	MaxEvents   = 1000
	MaxSegments = 2048
	MaxSamples  = 720
	MaxEncoded  = 512 << 10
)

// Segment causes History sets itself (the others are the occurrences').
const (
	// CauseAdopted: Reconcile found an instance the history lacked (its
	// launch fell in a gap); a segment's launch_cause.
	CauseAdopted = "adopted"
	// CauseFailover: Reconcile found the instance gone; how it ended is
	// unknown. A segment's cause.
	CauseFailover = "unknown (failover)"
	// CauseUnknown: the launch of an instance seen ending is not in the
	// history.
	CauseUnknown = "unknown"
	// CauseJobEnded: the instance was still up when the job ended and was
	// stopped with it (the PS, a worker that had not exited yet); End sets
	// it. Not lost.
	CauseJobEnded = "stopped (job ended)"
	// ReasonGap is the reason of the notice Reconcile adds: the history
	// may miss what happened between the dead master's last save and the
	// takeover.
	ReasonGap = "HistoryGap"
)

// Event is an occurrence and its number: numbers grow by one per event,
// across failovers, so a reader asks for those after the last it has.
type Event struct {
	Seq int64 `json:"seq"`
	job.Occurrence
}

// Segment is one instance's life in its slot: launched, running (null
// until seen running), ended (null while it lives). LaunchCause: start,
// relaunch, scale-up, adopted. Cause is how it ended: the exit's cause
// (killed, preempted, oom-killed, deleted, failed, completed, silent,
// launch-failed), let-go, or "unknown (failover)"; Reason the relaunch
// policy's decision, or for let-go the source of the target that let it
// go; Lost: it counted as lost.
type Segment struct {
	Role        cluster.Role `json:"role"`
	Slot        int          `json:"slot"`
	ID          int          `json:"id"`
	LaunchCause string       `json:"launch_cause,omitempty"`
	Launched    time.Time    `json:"launched"`
	Running     *time.Time   `json:"running"`
	Ended       *time.Time   `json:"ended"`
	Cause       string       `json:"cause,omitempty"`
	Reason      string       `json:"reason,omitempty"`
	Lost        bool         `json:"lost,omitempty"`
	ExitCode    int          `json:"exit_code,omitempty"`
}

// instanceKey names an instance: IDs are unique within a role.
type instanceKey struct {
	role cluster.Role
	id   int
}

// History is a job's bounded history. The zero value is not ready: use New.
type History struct {
	// events is a ring: once full, head is the oldest.
	events  []Event
	head    int
	nextSeq int64

	segments []Segment
	open     map[instanceKey]int // live instances' segments, by index

	series series
	// restoredUpTo: the latest time a restored history knew of, until
	// Reconcile says what may be missing after it.
	restoredUpTo time.Time
	// over: End was called; the timeline is final.
	over bool
}

// New returns an empty history.
func New() *History {
	return &History{nextSeq: 1, open: map[instanceKey]int{}, series: newSeries()}
}

// Add records occurrences, in order: O(1) each (amortised), so the master
// may call it under its lock.
func (h *History) Add(occurrences []job.Occurrence) {
	for _, o := range occurrences {
		h.addEvent(o)
		if h.over {
			continue
		}
		switch o.Kind {
		case job.OccurLaunched:
			h.launched(o)
		case job.OccurRunning:
			if i, ok := h.open[instanceKey{o.Role, o.ID}]; ok && h.segments[i].Running == nil {
				at := o.At
				h.segments[i].Running = &at
			}
		case job.OccurExited, job.OccurLetGo:
			h.ended(o)
		}
	}
}

func (h *History) addEvent(o job.Occurrence) {
	e := Event{Seq: h.nextSeq, Occurrence: o}
	h.nextSeq++
	if len(h.events) < MaxEvents {
		h.events = append(h.events, e)
		return
	}
	h.events[h.head] = e
	h.head = (h.head + 1) % len(h.events)
}

func (h *History) launched(o job.Occurrence) {
	k := instanceKey{o.Role, o.ID}
	if _, ok := h.open[k]; ok {
		return // launched twice: the first one stands
	}
	h.openSegment(Segment{Role: o.Role, Slot: o.Slot, ID: o.ID, LaunchCause: o.Cause, Launched: o.At})
}

func (h *History) openSegment(s Segment) {
	h.open[instanceKey{s.Role, s.ID}] = len(h.segments)
	h.segments = append(h.segments, s)
	h.trimSegments()
}

func (h *History) ended(o job.Occurrence) {
	k := instanceKey{o.Role, o.ID}
	i, ok := h.open[k]
	if !ok {
		// Its launch is not here (dropped, or in a failover's gap).
		h.segments = append(h.segments, Segment{Role: o.Role, Slot: o.Slot, ID: o.ID, LaunchCause: CauseUnknown, Launched: o.At})
		i = len(h.segments) - 1
	}
	delete(h.open, k)
	s := &h.segments[i]
	at := o.At
	s.Ended = &at
	s.Cause, s.Reason, s.Lost, s.ExitCode = o.Cause, o.Reason, o.Warning, o.ExitCode
	if o.Kind == job.OccurLetGo {
		s.Cause, s.Reason = job.OccurLetGo, o.Cause
	}
	if !ok {
		h.trimSegments()
	}
}

// End closes, at at, the segments still open when the job ended: the
// master stops those instances after its last step, so no occurrence
// ends them. A history that ended stays as it was shown.
func (h *History) End(at time.Time) {
	h.over = true
	for k, i := range h.open {
		end := at
		h.segments[i].Ended = &end
		h.segments[i].Cause = CauseJobEnded
		delete(h.open, k)
	}
}

// trimSegments drops the oldest closed segments once there are more than
// MaxSegments, an eighth at a time so that Add stays O(1) amortised.
// Live instances' segments are never dropped.
func (h *History) trimSegments() {
	if len(h.segments) <= MaxSegments {
		return
	}
	h.dropClosed(len(h.segments) - (MaxSegments - MaxSegments/8))
}

// dropClosed drops up to n of the oldest closed segments.
func (h *History) dropClosed(n int) {
	kept := h.segments[:0]
	for _, s := range h.segments {
		if n > 0 && s.Ended != nil {
			n--
			continue
		}
		kept = append(kept, s)
	}
	clear(h.segments[len(kept):])
	h.segments = kept
	h.reindex()
}

func (h *History) reindex() {
	clear(h.open)
	for i, s := range h.segments {
		if s.Ended == nil {
			h.open[instanceKey{s.Role, s.ID}] = i
		}
	}
}

// Events returns the events numbered after since, oldest first, at most
// limit (≤ 0: all), and the oldest number held: oldest > since+1 says
// some were dropped.
func (h *History) Events(since int64, limit int) (oldest int64, events []Event) {
	n := len(h.events)
	if n == 0 {
		return h.nextSeq, nil
	}
	oldest = h.events[h.head].Seq
	for i := range n {
		e := h.events[(h.head+i)%n]
		if e.Seq <= since {
			continue
		}
		if limit > 0 && len(events) == limit {
			break
		}
		events = append(events, e)
	}
	return oldest, events
}

// Segments returns a copy of the timeline, in launch order.
func (h *History) Segments() []Segment {
	return append([]Segment(nil), h.segments...)
}
