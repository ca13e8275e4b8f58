package job

import (
	"fmt"
	"time"
)

// Trial parks (issue 34: "let it go from the ring when the ring is faster
// without it"). A member whose part of the steps stays below trialFraction
// of the others' (the shares by rate have cut it) but above the slow bar
// is not marked slow, yet every step may still wait for it: a CPU quota
// stops it in bursts inside the allreduce, and on a shared host the
// others would run faster without it. Its rate cannot say which: only the
// ring's rate without it can. So the master parks it on trial, measures
// the ring's records/s once the ring re-formed without it, and keeps it
// parked (the usual backoff, then a new worker on probation) when the ring
// is at least as fast as it was; else it launches a worker in its slot at
// once and tries that slot again only after a doubling backoff. The trial
// is not persisted: a master that takes over keeps the slot parked as any
// other.
const (
	// trialFraction: a member is tried below 0.7 of the others' median,
	// where the workers' shares by rate turn on (internal/worker); an
	// undisturbed ring's members stay within 0.86 of each other even on a
	// loaded 2-core machine (bench/RESULTS.md).
	trialFraction = 0.7
	// trialSpan: the ring's rate without the member covers this much of
	// its applied steps, after the first report of the new ring (which
	// spans its forming).
	trialSpan = 3 * time.Second
)

// parkTrial is a member parked on trial and what the ring did without it.
type parkTrial struct {
	worker, slot int
	// before: the ring's records/s over ringRateSpan when it was parked.
	before float64
	// version: the ring version measured (0: not formed without it yet);
	// records and secs: its applied records and their time so far.
	version int64
	records int64
	secs    float64
}

// trialKept decides a trial: the member stays parked when the ring
// trains at least as fast without it.
func trialKept(before, after float64) bool { return after >= before }

// judgeLag judges worker's rate against the trial bar (slow.go's windows
// and hysteresis) and parks it on trial when it falls below.
func (j *Job) judgeLag(now time.Time, worker int, w *workerRate, rate float64, others []float64) {
	if w.lagBelow == 0 {
		w.lagSince = now
	}
	lag, streak, _, judged := judgeSlow(windowFor(true), rate, others, trialFraction, w.lagging, w.lagBelow, now.Sub(w.lagSince))
	if !judged {
		return
	}
	w.lagBelow = streak
	if lag && !w.lagging {
		j.maybeTrial(now, worker)
	}
	w.lagging = lag
}

// maybeTrial parks worker on trial when the job allows a park, no trial
// runs, the ring's rate is known and the slot's trial backoff is over.
func (j *Job) maybeTrial(now time.Time, worker int) {
	w := j.workers[worker]
	if j.trial != nil || w == nil || j.ring.forming {
		return
	}
	before, ok := j.slow.ring.rate()
	if !ok || j.slow.ring.secs < ringRateSpan.Seconds() {
		return
	}
	if s := j.parked[w.index]; s != nil && now.Before(s.noTrialUntil) {
		return
	}
	if !j.park(now, worker, "lagging: on trial") {
		return
	}
	j.trial = &parkTrial{worker: worker, slot: w.index, before: before}
	j.summary.Workers.ParkTrials++
	j.log.Info("parked lagging worker on trial", "worker", worker, "ring_records_per_second", before)
}

// noteTrialParts adds a report's applied records (all members', over
// secs) to the trial, and decides it once it covers trialSpan.
func (j *Job) noteTrialParts(now time.Time, records int64, secs float64) {
	tr := j.trial
	if tr == nil {
		return
	}
	r := &j.ring
	if r.forming || r.members == nil || r.stepping(tr.worker) {
		return // not re-formed without it yet
	}
	if tr.version != r.version {
		if tr.version != 0 {
			j.trial = nil // the ring changed again: a park like any other
			return
		}
		tr.version = r.version // this report spans the forming: not counted
		return
	}
	tr.records += records
	tr.secs += secs
	if tr.secs < trialSpan.Seconds() {
		return
	}
	j.trial = nil
	after := float64(tr.records) / tr.secs
	if trialKept(tr.before, after) {
		j.log.Info("trial park kept: the ring is faster without the worker", "worker", tr.worker,
			"before", tr.before, "after", after)
		return
	}
	j.undoTrial(now, tr, after)
}

// undoTrial lets the slot of a trial that lost back at once: a worker on
// probation is launched in it as soon as the parked one is gone.
func (j *Job) undoTrial(now time.Time, tr *parkTrial, after float64) {
	s := j.parked[tr.slot]
	if s == nil || s.worker != tr.worker || s.until.IsZero() {
		return // a scale down gave the slot up, or it was re-admitted
	}
	s.until = now
	s.times = max(0, s.times-1) // a trial lost is no park: its backoff stays
	s.noTrialUntil = now.Add(parkBackoff(s.trials))
	s.trials++
	j.summary.Workers.ParkTrialsUndone++
	j.log.Info("trial park undone: the ring was faster with the worker", "worker", tr.worker,
		"before", tr.before, "after", after, "next_trial_after", s.noTrialUntil.Sub(now))
	j.noticeOccur(false, "WorkerUnparked", fmt.Sprintf("worker-%d's slot gets a worker again: the ring trained %.0f records/s without it, %.0f with", tr.worker, after, tr.before))
	j.unparkDue(now)
}
