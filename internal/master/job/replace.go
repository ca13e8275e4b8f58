package job

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Replacing persistently slow workers (--replace_slow_workers). Backup
// tasks mend the end of an epoch and parking mends a ring, but a worker
// on a bad node (a noisy neighbour, a throttled or failing host) trains
// slowly all job long. Once a worker has been marked slow (slow.go) for
// ReplaceSlowAfter, the core stops it and launches a new worker in its
// slot that avoids the nodes the slot was slow on (a required node
// anti-affinity on Kubernetes; DLRover avoids failed hosts the same way).
// Its held task goes back to todo, as for a worker lost; the PS's
// minibatch keys keep the ledger exact. A replacement that stays pending
// for ReplaceSlowAfter, because only the avoided nodes have room, is
// relaunched without the avoidance: a slow worker beats none.
//
// On AllReduce a slow member is parked (park.go); with the flag, the new
// worker launched in a parked slot avoids its node too.
const (
	// maxAvoidNodes bounds a slot's avoid list: the oldest are dropped
	// (a cluster can run out of healthy nodes).
	maxAvoidNodes = 8
	causeReplace  = "replace"
)

// replacedSlot is a worker slot whose slow worker was replaced.
type replacedSlot struct {
	times     int       // the slot's replacements so far
	notBefore time.Time // no replacement before then (a backoff)
	avoid     []string  // the nodes it was slow on, oldest first
}

// mayReplace decides whether a worker marked slow since slowSince is
// replaced at now: marked for at least after, past its slot's backoff
// (notBefore), no other replacement still on its way (replacing), and the
// slow workers a minority of the live ones (when most are slow, the job
// or its PS is, not a node).
func mayReplace(now, slowSince, notBefore time.Time, after time.Duration, replacing, slow, live int) bool {
	return !slowSince.IsZero() && now.Sub(slowSince) >= after && !now.Before(notBefore) &&
		replacing == 0 && 2*slow < live
}

// withAvoided appends node to a slot's avoid list, once, keeping the
// newest maxAvoidNodes.
func withAvoided(avoid []string, node string) []string {
	if node == "" || slices.Contains(avoid, node) {
		return avoid
	}
	avoid = append(avoid, node)
	if len(avoid) > maxAvoidNodes {
		avoid = avoid[len(avoid)-maxAvoidNodes:]
	}
	return avoid
}

// replacing counts the replacements of slow workers on their way: not
// yet running, or not yet rated (their first task not done).
func (j *Job) replacing() int {
	n := 0
	for id, w := range j.workers {
		if r := j.slow.workers[id]; w.replacement && (!w.running || r == nil || !r.warm) {
			n++
		}
	}
	return n
}

// replaceDue replaces the workers slow for long enough, and relaunches
// without avoidance the replacements pending too long (each tick).
func (j *Job) replaceDue(now time.Time) {
	if !j.cfg.ReplaceSlowWorkers || j.phase != Training {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(j.workers)) {
		w := j.workers[id]
		if w == nil || w.running || len(w.avoid) == 0 || now.Sub(w.launchedAt) < j.cfg.ReplaceSlowAfter {
			continue
		}
		j.log.Warn("replacement pending: relaunched without avoiding nodes", "worker", id, "slot", w.index,
			"avoided", w.avoid, "pending_for", now.Sub(w.launchedAt))
		j.noticeOccur(true, "AvoidanceDropped", fmt.Sprintf("worker-%d pending for %s on nodes other than %v: relaunched anywhere",
			id, now.Sub(w.launchedAt).Round(time.Second), w.avoid))
		if s := j.replaced[w.index]; s != nil {
			s.avoid = nil
		}
		j.summary.Workers.AvoidanceDropped++
		j.stopAndRelaunch(now, id, "pending while avoiding slow nodes")
	}
	if j.cfg.AllReduce {
		return // a slow member is parked
	}
	slow := j.SlowWorkers()
	for _, id := range slow {
		w, r := j.workers[id], j.slow.workers[id]
		if _, leaving := j.draining[id]; w == nil || !w.running || leaving {
			continue
		}
		s := j.replaced[w.index]
		if s == nil {
			s = &replacedSlot{}
		}
		if !mayReplace(now, r.slowSince, s.notBefore, j.cfg.ReplaceSlowAfter, j.replacing(), len(slow), len(j.workers)) {
			continue
		}
		j.replaced[w.index] = s
		s.times++
		s.notBefore = now.Add(parkBackoff(s.times - 1))
		s.avoid = withAvoided(s.avoid, w.node)
		j.summary.Workers.Replaced++
		rate, _ := r.rate()
		j.log.Warn("replacing slow worker", "worker", id, "slot", w.index, "node", w.node, "slow_for", now.Sub(r.slowSince),
			"records_per_s", rate, "avoid", s.avoid, "times", s.times)
		j.noticeOccur(true, "WorkerReplaced", fmt.Sprintf("worker-%d slow for %s on node %q: replaced by a worker that avoids %v",
			id, now.Sub(r.slowSince).Round(time.Second), w.node, s.avoid))
		j.stopAndRelaunch(now, id, "slow")
		return // one at a time: the next waits for this one to be rated
	}
}

// stopAndRelaunch stops worker id (its tasks back to todo, not a loss)
// and launches a new worker in its slot, avoiding the slot's nodes.
func (j *Job) stopAndRelaunch(now time.Time, id int, why string) {
	w := j.workers[id]
	j.stopWorker(now, w, "replaced ("+why+")", causeReplace)
	j.launchWorker(now, w.index, causeReplace, "")
}

// avoidFor is the nodes a new worker in slot avoids.
func (j *Job) avoidFor(slot int) []string {
	if !j.cfg.ReplaceSlowWorkers {
		return nil
	}
	if s := j.replaced[slot]; s != nil {
		return slices.Clone(s.avoid)
	}
	return nil
}

// avoidParked adds a parked worker's node to its slot's avoid list, so
// that the worker on probation lands elsewhere.
func (j *Job) avoidParked(slot int, node string) {
	if !j.cfg.ReplaceSlowWorkers || node == "" {
		return
	}
	s := j.replaced[slot]
	if s == nil {
		s = &replacedSlot{}
		j.replaced[slot] = s
	}
	s.avoid = withAvoided(s.avoid, node)
}
