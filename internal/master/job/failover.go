package job

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"elasticdl/internal/cluster"
)

// Resumed is the first event of a core rebuilt by Resume after its master
// died: Instances is what the backend has of the job now (each instance as
// its latest event: pending, running, or exited while no master watched).
type Resumed struct {
	Instances []cluster.Event
}

func (Resumed) isEvent() {}

// goneWhileAway is the message of an instance the backend no longer has.
const goneWhileAway = "gone while the master was down"

// resumed adopts what still runs, learns what ended meanwhile, and
// restarts the clocks that ran while no master listened.
func (j *Job) resumed(now time.Time, ev Resumed) {
	j.summary.MasterRestarts++
	j.summary.Failovers = append(j.summary.Failovers, Failover{ResumedAt: now.UTC()})
	// First: what the adoption finds happened while no master listened.
	j.occur(Occurrence{Kind: OccurResumed, Cause: j.phase.String(), To: j.summary.MasterRestarts,
		Detail: fmt.Sprintf("a new master resumed the job (takeover %d) in phase %s", j.summary.MasterRestarts, j.phase)})
	j.restartClocks(now)
	if op := j.reshard; op != nil {
		// What was out with the dead master's shell is asked again
		// (staging and committing a layout are idempotent).
		op.CheckPending, op.Sent, op.RetryAt = false, false, time.Time{}
	}
	known := j.knownInstances()
	adopted := j.adopt(now, ev.Instances, known)
	j.notice(false, "MasterResumed", fmt.Sprintf("a new master resumed the job (takeover %d) in phase %s, adopting %d running instances; %d were gone",
		j.summary.MasterRestarts, j.phase, adopted, len(known)))
	j.loseGone(now, known)
	j.askAgain(now)
}

// restartClocks starts the clocks over: nobody could report to a dead
// master, so silence and task timeouts count from now, and ring deadlines
// start over.
func (j *Job) restartClocks(now time.Time) {
	for _, in := range j.workers {
		in.lastSeen = now
	}
	for _, in := range j.ps {
		in.lastSeen = now
	}
	j.disp.RestartClocks(now)
	if j.ring.forming {
		j.ring.deadline = now.Add(j.cfg.RingGrace)
	}
	for w := range j.ring.unsettled {
		j.ring.unsettled[w] = now.Add(j.settleTimeout())
	}
	if j.phase == Uploading {
		j.uploadingSince = now
	}
}

// instanceKey names an instance by role and ID.
type instanceKey struct {
	role cluster.Role
	id   int
}

// knownInstances is what the core counted on before hearing the backend,
// with each instance's index (a relaunch decided while adopting is not
// "gone").
func (j *Job) knownInstances() map[instanceKey]int {
	known := map[instanceKey]int{}
	for id, in := range j.workers {
		known[instanceKey{cluster.Worker, id}] = in.index
	}
	for _, in := range j.ps {
		known[instanceKey{cluster.PS, in.id}] = in.index
	}
	return known
}

// adopt passes the backend's view of each known instance to the core,
// stops what the core does not count on, and returns how many known
// instances still run. What it heard of leaves known: the rest is gone.
func (j *Job) adopt(now time.Time, have []cluster.Event, known map[instanceKey]int) (adopted int) {
	for _, e := range have {
		k := instanceKey{e.Role, e.ID}
		if _, ok := known[k]; !ok {
			// Launched after the last persisted state (or a leftover of an
			// older attempt): the core does not count on it.
			if e.Phase != cluster.Exited {
				j.ready.Stop = append(j.ready.Stop, StopInstance{Role: e.Role, ID: e.ID})
			}
			continue
		}
		delete(known, k)
		if e.Phase != cluster.Exited {
			adopted++
		}
		j.instanceEvent(now, e)
	}
	return adopted
}

// loseGone declares lost, in role and ID order, the known instances the
// backend no longer has.
func (j *Job) loseGone(now time.Time, gone map[instanceKey]int) {
	var lost []cluster.Event
	for k, index := range gone {
		lost = append(lost, cluster.Event{Role: k.role, ID: k.id, Index: index})
	}
	slices.SortFunc(lost, func(a, b cluster.Event) int {
		return cmp.Or(cmp.Compare(a.Role, b.Role), cmp.Compare(a.ID, b.ID))
	})
	for _, e := range lost {
		// Persisted as launched, never launched (the master died first),
		// or deleted meanwhile: lost, and the policy decides as for any.
		e.Phase, e.ExitCode, e.Reason, e.Message = cluster.Exited, -1, cluster.Deleted, goneWhileAway
		j.instanceEvent(now, e)
	}
}

// askAgain asks again what the dead master waited for (the PS check's
// answer, an AllReduce model) and carries out again an ending it decided.
func (j *Job) askAgain(now time.Time) {
	if j.check.pending {
		// Its answer was the dead master's to have: ask again.
		j.check.pending = false
		j.advance(now)
	}
	switch {
	case j.phase == Saving && j.cfg.AllReduce && j.cfg.training():
		// An AllReduce model lived in the dead master's memory: ask again.
		j.pendingSave = nil
		j.uploadingSince = now
		j.setPhase(Uploading)
	case j.phase == Saving && j.pendingSave != nil:
		s := *j.pendingSave
		j.ready.Save = &s
		j.ready.Ended = true
	case j.phase.over():
		j.ready.Ended = true
	}
}
