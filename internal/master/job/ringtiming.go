package job

import "time"

// How quickly an AllReduce job trains again after its membership changes,
// and what its collectives cost: the figures the targets are
// about (a killed worker, a new worker), kept in the summary and the
// metrics.

// RingRecovery is one membership change: from the moment the version
// moved (a loss, a join, a reported break; changes that follow before a
// step is committed count as one) to the next committed step.
type RingRecovery struct {
	Version int64     `json:"version"`
	Cause   string    `json:"cause"`
	At      time.Time `json:"at"`
	Seconds float64   `json:"seconds"`
}

// RingJoin is a worker's first committed step, Seconds after its process
// was seen running (pod running, or process started).
type RingJoin struct {
	Worker  int     `json:"worker"`
	Seconds float64 `json:"seconds"`
}

// ringTiming is the rendezvous's record of the above.
type ringTiming struct {
	changeStart time.Time // zero: no change waits for a committed step
	changeCause string
	// changeVersion: the first ring version after the change; a step
	// applied by it (or a later one) ends the change.
	changeVersion int64
	recoveries    []RingRecovery
	joins         []RingJoin
	committed     map[int]bool // workers that committed a step
	// collective holds each worker's latest counters, kept after it is
	// lost: the job's totals are their sum.
	collective map[int]CollectiveStats
}

// noteChange starts timing a membership change unless one is timed
// already; the first ring's forming is the job's start, not a change.
func (r *rendezvous) noteChange(now time.Time, why string) {
	if r.lineage > 0 && r.changeStart.IsZero() {
		r.changeStart, r.changeCause, r.changeVersion = now, why, r.version+1
	}
}

// noteApplied is a step of ring version, with a part of worker's,
// reported applied (committed: it is in the state the job keeps).
func (j *Job) noteApplied(now time.Time, version int64, worker int) {
	r := &j.ring
	if !r.changeStart.IsZero() && version >= r.changeVersion {
		d := now.Sub(r.changeStart)
		r.recoveries = append(r.recoveries, RingRecovery{Version: r.version, Cause: r.changeCause, At: r.changeStart.UTC(), Seconds: d.Seconds()})
		j.ready.RingRecovered = append(j.ready.RingRecovered, d)
		j.occur(Occurrence{Kind: OccurRingRecovered, Cause: r.changeCause, Version: r.version, Seconds: d.Seconds()})
		r.changeStart = time.Time{}
	}
	if r.committed == nil {
		r.committed = map[int]bool{}
	}
	if !r.committed[worker] {
		r.committed[worker] = true
		if in := j.workers[worker]; in != nil && !in.startedAt.IsZero() {
			r.joins = append(r.joins, RingJoin{Worker: worker, Seconds: now.Sub(in.startedAt).Seconds()})
		}
	}
}

// noteCollective keeps a worker's counters (they only grow).
func (r *rendezvous) noteCollective(worker int, s CollectiveStats) {
	if s == (CollectiveStats{}) {
		return
	}
	if r.collective == nil {
		r.collective = map[int]CollectiveStats{}
	}
	old := r.collective[worker]
	r.collective[worker] = CollectiveStats{Ops: max(old.Ops, s.Ops), Bytes: max(old.Bytes, s.Bytes), Seconds: max(old.Seconds, s.Seconds)}
}

// collectiveTotal sums every worker's counters.
func (r *rendezvous) collectiveTotal() CollectiveStats {
	var t CollectiveStats
	for _, s := range r.collective {
		t.Ops += s.Ops
		t.Bytes += s.Bytes
		t.Seconds += s.Seconds
	}
	return t
}
