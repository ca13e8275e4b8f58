package job

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"elasticdl/internal/cluster"
)

// SetTarget asks the job to run Workers workers (the cluster's wish: an
// autoscaler, a user's `elasticdl scale`). It is clamped to the job's
// bounds, [MinWorkers, NumWorkers]. A higher target launches workers; a
// lower one lets workers go gracefully: those pending or idle at once, and
// a worker holding a task once it has reported it (see rescale).
type SetTarget struct {
	Workers int
	// Source says who asked, for the log and the Event.
	Source string
}

func (SetTarget) isEvent() {}

// minWorkers is the job's lower bound (at least 1).
func (j *Job) minWorkers() int { return max(1, min(j.cfg.MinWorkers, j.cfg.NumWorkers)) }

// MinWorkers is the job's lower bound, as the core applies it.
func (j *Job) MinWorkers() int { return j.minWorkers() }

// Target is the number of workers the job aims to run now.
func (j *Job) Target() int { return j.target }

func (j *Job) setTarget(now time.Time, ev SetTarget) {
	want := min(max(ev.Workers, j.minWorkers()), j.cfg.NumWorkers)
	if want == j.target {
		return
	}
	msg := fmt.Sprintf("target %d → %d workers (asked %d by %s; bounds %d..%d)", j.target, want, ev.Workers, ev.Source, j.minWorkers(), j.cfg.NumWorkers)
	j.log.Info("worker target changed", "from", j.target, "to", want, "asked", ev.Workers, "source", ev.Source)
	j.notice(false, "TargetChanged", msg)
	j.occur(Occurrence{Kind: OccurTarget, Role: cluster.Worker, Cause: ev.Source, From: j.target, To: want, Detail: msg})
	j.target, j.targetSource = want, ev.Source
	j.noteResize(now, "target")
	j.rescale(now)
}

// active are the workers the job counts toward its target: live and not
// being let go.
// A parked slot counts too: it is re-admitted, not replaced.
func (j *Job) active() int { return len(j.workers) - len(j.draining) + j.parkedNow() }

// rescale launches or lets go of workers until the active ones meet the
// target. Workers are let go by the least work they would leave unfinished:
// pending ones (they hold nothing and never ran), then running ones that
// hold no task, then those whose held tasks started the longest ago (the
// closest to done); a worker holding a task finishes it first (it is told
// DONE once it has reported, see drainOnGetTask). Ties go to the newest
// worker, so the oldest, warmest ones stay.
func (j *Job) rescale(now time.Time) {
	if j.phase == Starting || j.phase.over() {
		return
	}
	// Workers still finishing their last task are kept first: they run.
	for j.active() < j.target {
		var kept []int
		for id := range j.draining {
			if !j.beingParked(id) {
				kept = append(kept, id)
			}
		}
		if len(kept) == 0 {
			break
		}
		id := slices.Max(kept)
		delete(j.draining, id)
		delete(j.ring.leaving, id) // still in its ring: it stays there
		j.log.Info("worker kept after all (scale up)", "worker", id)
	}
	for j.active() < j.target {
		slot, ok := j.freeSlot()
		if !ok {
			break // every slot is taken by a worker still leaving
		}
		j.launchWorker(now, slot, causeScaleUp, "")
		j.summary.Workers.ScaledUp++
	}
	excess := j.active() - j.target
	for excess > 0 && j.dropParked() {
		excess-- // a parked slot goes first: it runs nothing
	}
	if excess <= 0 {
		return
	}
	type candidate struct {
		id    int
		rank  int       // 0 pending, 1 idle, 2 holding tasks
		since time.Time // the oldest held task's start
	}
	var cs []candidate
	for id, w := range j.workers {
		if _, leaving := j.draining[id]; leaving {
			continue
		}
		c := candidate{id: id}
		switch since, holds := j.disp.HeldSince(id); {
		case !w.running && !holds:
			c.rank = 0
		case !holds:
			c.rank = 1
		default:
			c.rank, c.since = 2, since
		}
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), a.since.Compare(b.since), cmp.Compare(b.id, a.id))
	})
	for _, c := range cs[:excess] {
		switch {
		case j.cfg.AllReduce && j.ring.stepping(c.id):
			// Stopping it would fail the ring's step in flight: it leaves
			// at a step boundary, handing back the rest of its task.
			j.leaveRing(now, c.id, "scale down")
		case c.rank < 2 || j.cfg.AllReduce:
			// An AllReduce worker not in a live ring is stopped at once:
			// its task resumes after what the ledger has of it.
			j.letGo(now, c.id, "scaled down")
		default:
			j.draining[c.id] = now
			j.log.Info("worker leaves once its task is reported (scale down)", "worker", c.id)
		}
	}
}

// freeSlot is the lowest worker slot no live worker has.
func (j *Job) freeSlot() (int, bool) {
	used := map[int]bool{}
	for _, w := range j.workers {
		used[w.index] = true
	}
	for slot, s := range j.parked {
		used[slot] = used[slot] || !s.until.IsZero()
	}
	for i := 0; i < j.cfg.NumWorkers; i++ {
		if !used[i] {
			return i, true
		}
	}
	return 0, false
}

// letGo stops worker id, which holds nothing, at the job's wish: not a
// loss, not relaunched.
func (j *Job) letGo(now time.Time, id int, why string) {
	w := j.workers[id]
	if w == nil {
		return
	}
	if !j.beingParked(id) {
		j.summary.Workers.ScaledDown++
	}
	delete(j.draining, id)
	j.stopWorker(now, w, why, OccurLetGo)
}

// stopWorker stops worker w on the job's own account (not a loss): it is
// told to stop, and its exit is taken now with cause, its tasks back to
// todo.
func (j *Job) stopWorker(now time.Time, w *instance, why, cause string) {
	j.released[w.id] = true
	j.ready.Stop = append(j.ready.Stop, StopInstance{Role: cluster.Worker, ID: w.id})
	j.exitedBecause(now, cluster.Event{
		Role: cluster.Worker, ID: w.id, Index: w.index, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Deleted,
		Message: why + ": stopped by the master", Requested: true,
	}, cause)
}

// leavesNow lets go of a leaving worker that asks for work and holds
// nothing any more (it is to be told DONE); one that still holds a task
// gets no new one (see getTask).
func (j *Job) leavesNow(now time.Time, worker int) bool {
	if _, leaving := j.draining[worker]; !leaving || len(j.disp.Held(worker)) > 0 {
		return false
	}
	if _, inRing := j.ring.leaving[worker]; inRing {
		return false // it leaves at the ring's step boundary (leaveRing)
	}
	j.letGo(now, worker, "scaled down after its last task")
	return true
}

// relaunchWanted says whether a lost worker is to be replaced: only while
// the job runs fewer workers than its target.
func (j *Job) relaunchWanted() bool { return j.active() < j.target }
