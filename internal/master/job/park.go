package job

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Parking slow AllReduce workers. Every ring step waits for its slowest
// member, and step shares by rate (the workers' side) cannot mend a member
// stopped in bursts (a CFS quota): each allreduce chunk that needs it
// waits. So when the core marks an AllReduce worker slow (slow.go), it
// parks it: the worker leaves the ring at a step boundary and is stopped,
// exactly as a scale down lets a member go (leaveRing, letGo), so its held
// tasks go back after the survivors settle what their state holds of them
// (ledger.go) and every record is still trained once. Its slot stays the
// job's: after a backoff (parkBackoff, doubling each time the slot is
// parked again) a new worker is launched in it on probation; if it is
// slow too, it is marked and parked again. A parked worker is stopped,
// not kept idle: the workers (and the SDK's) need no new protocol, and a
// new pod may land on a healthy node. Parks are persisted (State.Parked):
// a master that takes over keeps the slot parked and re-admits it when its
// backoff ends.
const (
	// parkFirst: the first park of a slot; each next one doubles, up to
	// parkMax.
	parkFirst = 30 * time.Second
	parkMax   = 8 * time.Minute
	causePark = "park"
)

// parkedSlot is a worker slot whose worker was parked.
type parkedSlot struct {
	worker int       // the worker parked last
	times  int       // the slot's parks so far
	until  time.Time // when it is re-admitted; zero once it was
	// trials: the slot's trial parks undone (trial.go); noTrialUntil:
	// none before then.
	trials       int
	noTrialUntil time.Time
}

// mayPark decides whether a worker marked slow is parked: active counts
// the live workers neither let go nor parked (the slow one included),
// parked the slots parked now. The ring keeps at least minWorkers (and at
// least 1) members, and the parked stay a minority of the job's workers.
func mayPark(active, parked, minWorkers int) bool {
	return active-1 >= max(1, minWorkers) && 2*(parked+1) < active+parked
}

// parkBackoff is how long a slot parked times times before stays parked.
func parkBackoff(times int) time.Duration {
	d := parkFirst
	for range times {
		if d >= parkMax {
			break
		}
		d *= 2
	}
	return min(d, parkMax)
}

// parkedNow counts the slots parked and not yet re-admitted.
func (j *Job) parkedNow() int {
	n := 0
	for _, s := range j.parked {
		if !s.until.IsZero() {
			n++
		}
	}
	return n
}

// beingParked reports whether worker is the parked one of its slot.
func (j *Job) beingParked(worker int) bool {
	for _, s := range j.parked {
		if s.worker == worker && !s.until.IsZero() {
			return true
		}
	}
	return false
}

// maybePark parks worker, just marked slow, when the job allows it.
func (j *Job) maybePark(now time.Time, worker int) {
	j.park(now, worker, "parked (slow)")
}

// park lets worker go from the ring for its slot's backoff when the job
// allows a park (why says what for), and reports whether it did.
func (j *Job) park(now time.Time, worker int, why string) bool {
	w := j.workers[worker]
	if !j.cfg.AllReduce || !j.cfg.ParkSlowWorkers || j.phase != Training || w == nil {
		return false
	}
	if _, leaving := j.draining[worker]; leaving {
		return false
	}
	active, parked := len(j.workers)-len(j.draining), j.parkedNow()
	if !mayPark(active, parked, j.minWorkers()) {
		j.log.Info("slow worker not parked: the ring would be too small", "worker", worker,
			"active", active, "parked", parked, "min_workers", j.minWorkers())
		return false
	}
	s := j.parked[w.index]
	if s == nil {
		s = &parkedSlot{}
		j.parked[w.index] = s
	}
	backoff := parkBackoff(s.times)
	s.worker, s.until = worker, now.Add(backoff)
	j.avoidParked(w.index, w.node)
	s.times++
	j.summary.Workers.Parked++
	j.log.Info("parked slow worker", "worker", worker, "slot", w.index, "for", backoff, "times", s.times, "why", why)
	j.noticeOccur(true, "WorkerParked", fmt.Sprintf("worker-%d is slow: it leaves the ring; a new worker takes its slot in %s", worker, backoff))
	if j.ring.stepping(worker) {
		j.leaveRing(now, worker, why)
		return true
	}
	j.letGo(now, worker, why)
	return true
}

// unparkDue launches a worker on probation in each parked slot whose
// backoff is over and whose parked worker is gone.
func (j *Job) unparkDue(now time.Time) {
	if j.phase != Training {
		return
	}
	for _, slot := range slices.Sorted(maps.Keys(j.parked)) {
		s := j.parked[slot]
		if s.until.IsZero() || now.Before(s.until) {
			continue
		}
		if _, alive := j.workers[s.worker]; alive {
			continue // still leaving its ring
		}
		s.until = time.Time{}
		j.summary.Workers.Unparked++
		j.log.Info("unparked slot of a slow worker: a new worker on probation", "slot", slot, "parked", s.worker, "times", s.times)
		j.launchWorker(now, slot, causeUnpark, "")
	}
}

// dropParked gives up one parked slot (a scale down takes it first).
func (j *Job) dropParked() bool {
	for _, slot := range slices.Sorted(maps.Keys(j.parked)) {
		if !j.parked[slot].until.IsZero() {
			delete(j.parked, slot)
			return true
		}
	}
	return false
}
