package job

import (
	"fmt"
	"slices"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/policy"
)

// launchPS launches shard index's PS; cause is the launched occurrence's,
// relaunch the loss it replaces.
func (j *Job) launchPS(now time.Time, index int, cause, relaunch string) {
	id := j.nextPSID
	j.nextPSID++
	live := j.runningWorkers()
	if j.nextWorkerID == 0 {
		live = j.cfg.NumWorkers // the first PS start before the workers
	}
	j.ps[index] = &instance{id: id, index: index, lastSeen: now}
	j.summary.PS.Launched++
	j.occurInstance(OccurLaunched, cluster.PS, j.ps[index], cause)
	j.ready.Launch = append(j.ready.Launch, Launch{Role: cluster.PS, ID: id, Index: index, LiveWorkers: live, Relaunch: relaunch, Shards: j.psShards(index)})
}

// launchWorker launches a worker in slot index; cause and relaunch as for
// launchPS.
func (j *Job) launchWorker(now time.Time, index int, cause, relaunch string) {
	id := j.nextWorkerID
	j.nextWorkerID++
	avoid := j.avoidFor(index)
	j.workers[id] = &instance{id: id, index: index, lastSeen: now, launchedAt: now, avoid: avoid, replacement: cause == causeReplace}
	j.summary.Workers.Launched++
	j.occurInstance(OccurLaunched, cluster.Worker, j.workers[id], cause)
	j.ready.Launch = append(j.ready.Launch, Launch{Role: cluster.Worker, ID: id, Index: index, Relaunch: relaunch, AvoidNodes: avoid})
	// No live-worker count: a launched worker does not run yet.
}

// launchFailed: a worker that could not be launched is forgotten; either
// way the job cannot have what it needs, and fails.
func (j *Job) launchFailed(ev LaunchFailed) {
	l := ev.Launch
	if in := j.lookup(l.Role, l.ID); in != nil && l.Role == cluster.Worker {
		// Forgotten here; a PS that failed to launch ends with the job.
		j.occur(Occurrence{Kind: OccurExited, Role: l.Role, ID: l.ID, Slot: in.index, Cause: causeLaunchFailed, Detail: ev.Err.Error()})
	}
	if l.Role == cluster.Worker {
		delete(j.workers, l.ID)
	}
	err := ev.Err
	if l.Relaunch != "" {
		err = fmt.Errorf("relaunch after %s: %w", l.Relaunch, err)
	}
	j.fail(err)
}

// sendLiveWorkers tells every PS how many workers run now (sync SGD only),
// so that no version waits for a gone worker; flush also makes them apply
// what they accumulated (end of training). Each count carries a higher
// generation, so that a PS never takes an older count over a newer one.
func (j *Job) sendLiveWorkers(flush bool) {
	if !j.cfg.SyncSGD || !j.liveSending || j.phase.over() {
		return // after the tasks, Save carries the last count
	}
	j.liveGen++
	j.ready.LiveWorkers = append(j.ready.LiveWorkers, LiveWorkers{Live: j.runningWorkers(), Gen: j.liveGen, Flush: flush})
}

// runningWorkers counts the workers that run (a pending pod is not a
// worker a sync version may wait for).
func (j *Job) runningWorkers() int {
	n := 0
	for _, w := range j.workers {
		if w.running {
			n++
		}
	}
	return n
}

// RunningWorkers is the number of workers that run now.
func (j *Job) RunningWorkers() int { return j.runningWorkers() }

// seen marks the worker making a request alive (and running: a pod that
// talks runs, whatever the backend said so far, and its start is timed
// from here when the backend has not said it yet). A worker this master
// did not launch, or already gave up on, is refused.
func (j *Job) seen(id int, now time.Time) error {
	w, ok := j.workers[id]
	if !ok {
		return fmt.Errorf("%w %d: not launched by this master or already lost", ErrUnknownWorker, id)
	}
	w.lastSeen, w.talked = now, true
	j.reach.Reached = true
	if !w.running {
		w.running, w.startedAt = true, now
		j.noteRunning(cluster.Worker, w)
	}
	return nil
}

// noteRunning raises in's running occurrence and updates what depends on
// the number of running workers.
func (j *Job) noteRunning(r cluster.Role, in *instance) {
	j.occurInstance(OccurRunning, r, in, "")
	if r != cluster.Worker {
		return
	}
	j.summary.Workers.MaxRunning = max(j.summary.Workers.MaxRunning, j.runningWorkers())
	j.sendLiveWorkers(false)
}

func (j *Job) lookup(r cluster.Role, id int) *instance {
	switch r {
	case cluster.Worker:
		return j.workers[id]
	case cluster.PS:
		for _, in := range j.ps {
			if in.id == id {
				return in
			}
		}
	}
	return nil
}

func (j *Job) instanceEvent(now time.Time, ev cluster.Event) {
	name := cluster.InstanceName(ev.Role, ev.ID)
	if in := j.lookup(ev.Role, ev.ID); in != nil && ev.Node != "" {
		in.node = ev.Node
	}
	switch ev.Phase {
	case cluster.Pending:
		j.log.Info("instance pending", "instance", name)
	case cluster.Running:
		if in := j.lookup(ev.Role, ev.ID); in != nil && !in.running {
			// Silence is measured from here: a pending pod is not silent.
			in.running, in.lastSeen, in.startedAt = true, now, now
			j.noteRunning(ev.Role, in)
		}
		j.log.Debug("instance running", "instance", name)
	case cluster.Exited:
		j.exited(now, ev)
	}
}

// exited forgets an instance that ended and decides, with the policy, what
// follows: its tasks back to todo, a relaunch, or the end of the job.
func (j *Job) exited(now time.Time, ev cluster.Event) { j.exitedBecause(now, ev, "") }

// exitedBecause is exited with the cause its occurrence names: "" for
// the event's reason, causeSilent, or OccurLetGo (the job let it go).
func (j *Job) exitedBecause(now time.Time, ev cluster.Event, cause string) {
	in := j.lookup(ev.Role, ev.ID)
	if in == nil {
		return // an instance this master no longer tracks (already replaced)
	}
	if j.phase.over() {
		// The job is done: workers exit, the backend stops the rest.
		j.occurExit(ev, in, cause, false, "")
		j.forget(ev.Role, in)
		return
	}
	name := cluster.InstanceName(ev.Role, ev.ID)
	lost := j.countLoss(ev)
	j.forget(ev.Role, in)
	if ev.Role == cluster.Worker {
		if lost {
			j.noteResize(now, "lost")
		}
		if j.cfg.AllReduce && j.ring.everMember[ev.ID] && len(j.disp.Held(ev.ID)) > 0 {
			// The survivors may owe it commits: its tasks wait for them.
			j.ring.unsettled[ev.ID] = now.Add(j.settleTimeout())
		} else {
			j.requeueLost(now, ev.ID)
		}
		j.ringMemberLost(now, ev.ID)
		j.sendLiveWorkers(false)
	}
	decision := j.policy.Decide(policy.Exit{
		Role: ev.Role, ID: ev.ID, Slot: in.index, ExitCode: ev.ExitCode, Reason: ev.Reason,
		Message: ev.Message, Requested: ev.Requested, LiveWorkers: len(j.workers),
	}, false)
	j.occurExit(ev, in, cause, lost, decision.Reason)
	level := j.log.Info
	if lost {
		level = j.log.Warn
	}
	level("instance exited", "instance", name, "reason", ev.Reason, "exit_code", ev.ExitCode,
		"message", ev.Message, "relaunch", decision.Relaunch, "decision", decision.Reason)
	if lost {
		msg := fmt.Sprintf("%s %s (exit %d)", name, ev.Reason, ev.ExitCode)
		if ev.Message != "" {
			msg += ": " + ev.Message
		}
		if decision.Relaunch {
			msg += "; relaunching"
		}
		j.notice(true, noticeReason(ev.Role, ev.Reason), msg)
	}
	if err := j.neverReached(ev, in); err != nil {
		j.fail(err)
		return
	}
	switch {
	case decision.FailJob:
		j.fail(fmt.Errorf("%s %s: %s", name, ev.Reason, decision.Reason))
	case decision.Relaunch && ev.Role == cluster.Worker && !j.relaunchWanted():
		j.log.Info("lost worker not replaced: the job runs its target", "instance", name, "target", j.target)
	case decision.Relaunch && ev.Role == cluster.Worker:
		j.launchWorker(now, in.index, causeRelaunch, name+" "+ev.Reason.String())
		j.summary.Workers.Relaunched++
	case decision.Relaunch:
		j.launchPS(now, in.index, causeRelaunch, name+" "+ev.Reason.String())
		j.summary.PS.Relaunched++
		j.psRelaunched()
	}
	if ev.Role == cluster.Worker && j.cfg.training() && j.trainingStart.IsZero() && !j.phase.over() && len(j.workers) < j.minWorkers() {
		// Training waits for MinWorkers, which can no longer run.
		j.fail(fmt.Errorf("%d workers left of the %d training waits for (--min_workers) after %s %s", len(j.workers), j.minWorkers(), name, ev.Reason))
	}
}

func (j *Job) forget(r cluster.Role, in *instance) {
	if r == cluster.Worker {
		delete(j.workers, in.id)
		delete(j.draining, in.id)
		j.forgetRate(in.id)
	} else {
		delete(j.ps, in.index)
	}
}

// countLoss counts an exit the master did not ask for (and not a clean
// completion) as a loss, and reports whether it was one.
func (j *Job) countLoss(ev cluster.Event) bool {
	if ev.Requested || ev.Reason == cluster.Completed {
		return false
	}
	lost, preempted := &j.summary.Workers.Lost, &j.summary.Workers.Preempted
	if ev.Role == cluster.PS {
		lost, preempted = &j.summary.PS.Lost, &j.summary.PS.Preempted
	}
	*lost++
	if ev.Reason == cluster.Preempted {
		*preempted++
	}
	return true
}

// requeueLost gives a lost worker's tasks back to todo.
func (j *Job) requeueLost(now time.Time, worker int) {
	if requeued := j.disp.WorkerLost(worker, now); len(requeued) > 0 {
		j.summary.Tasks.Requeued += int64(len(requeued))
		j.log.Info("tasks of a lost worker back to todo", "instance", cluster.InstanceName(cluster.Worker, worker), "tasks", len(requeued))
	}
}

// noticeReason is the Kubernetes-style Event reason of a lost instance,
// e.g. WorkerPreempted, PSOOMKilled.
func noticeReason(r cluster.Role, why cluster.ExitReason) string {
	role := "Worker"
	if r == cluster.PS {
		role = "PS"
	}
	switch why {
	case cluster.Preempted:
		return role + "Preempted"
	case cluster.OOMKilled:
		return role + "OOMKilled"
	case cluster.Deleted:
		return role + "Deleted"
	case cluster.Killed:
		return role + "Killed"
	}
	return role + "Failed"
}

// tick applies timeouts: tasks held too long go back to todo, and a worker
// that went silent (alive to the backend, but hung) is stopped and treated
// at once as lost — its tasks requeued, a replacement launched — without
// waiting for a hung process to die. Its real exit is then ignored.
func (j *Job) tick(now time.Time) {
	if requeued := j.disp.Tick(now); len(requeued) > 0 {
		j.summary.Tasks.Requeued += int64(len(requeued))
		j.log.Warn("tasks timed out, back to todo", "tasks", len(requeued), "timeout", j.cfg.Tasks.TaskTimeout)
	}
	if !j.phase.over() {
		var silent []int
		for id, w := range j.workers {
			if w.running && now.Sub(w.lastSeen) > j.silentAfter(w) {
				silent = append(silent, id)
			}
		}
		slices.Sort(silent) // a deterministic order of decisions
		for _, id := range silent {
			j.ready.Stop = append(j.ready.Stop, StopInstance{Role: cluster.Worker, ID: id})
			j.exitedBecause(now, cluster.Event{
				Role: cluster.Worker, ID: id, Index: j.workers[id].index, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed,
				Message: fmt.Sprintf("silent for over %s: stopped by the master", j.silentAfter(j.workers[id])),
			}, causeSilent)
		}
	}
	j.replaceDue(now)
	if j.cfg.AllReduce {
		j.maybeForm(now)
		j.unparkDue(now)
		j.uploadOverdue(now)
		j.requeueUnsettled(now, func(deadline time.Time) bool { return !now.Before(deadline) })
	}
	if err := j.disp.Err(); err != nil {
		j.fail(err)
	}
	j.advanceReshard(now)
	if j.checkOpen() {
		j.advance(now) // a check that failed is due again
	}
}
