package master

import (
	"context"
	"fmt"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/policy"
)

// handleEvent turns one backend event into dispatcher and policy inputs and
// carries out the decision (relaunch, fail the job, nothing).
func (m *Master) handleEvent(ctx context.Context, ev cluster.Event) {
	name := cluster.InstanceName(ev.Role, ev.ID)
	switch ev.Phase {
	case cluster.Pending:
		m.log.Info("instance pending", "instance", name)
		return
	case cluster.Running:
		m.mu.Lock()
		if in := m.lookup(ev.Role, ev.ID); in != nil && !in.running {
			// Silence is measured from here: a pending pod is not silent.
			in.running, in.lastSeen = true, m.now()
			m.noteRunningLocked(ev.Role)
		}
		m.mu.Unlock()
		m.log.Debug("instance running", "instance", name)
		return
	case cluster.Exited:
	default:
		return
	}

	m.mu.Lock()
	in := m.lookup(ev.Role, ev.ID)
	if in == nil {
		// An instance this master no longer tracks (already replaced).
		m.mu.Unlock()
		return
	}
	requested := ev.Requested
	exit := policy.Exit{
		Role:      toPolicyRole(ev.Role),
		ID:        ev.ID,
		Slot:      in.index,
		ExitCode:  ev.ExitCode,
		Reason:    toPolicyReason(ev.Reason),
		Message:   ev.Message,
		Requested: requested,
	}
	lost := !requested && ev.Reason != cluster.Completed
	if lost && ev.Reason == cluster.Preempted {
		if ev.Role == cluster.Worker {
			m.summary.Workers.Preempted++
		} else {
			m.summary.PS.Preempted++
		}
	}
	var index = in.index
	switch ev.Role {
	case cluster.Worker:
		delete(m.workers, ev.ID)
		requeued := m.disp.WorkerLost(ev.ID, m.now())
		if lost {
			m.summary.Workers.Lost++
		}
		exit.LiveWorkers = len(m.workers)
		m.sendLiveWorkersLocked(false)
		if len(requeued) > 0 {
			m.summary.Tasks.Requeued += int64(len(requeued))
			m.log.Info("tasks of a lost worker back to todo", "instance", name, "tasks", len(requeued))
		}
	case cluster.PS:
		delete(m.ps, in.index)
		if lost {
			m.summary.PS.Lost++
		}
	}
	decision := m.policy.Decide(exit, m.finished)
	m.mu.Unlock()

	level := m.log.Info
	if lost {
		level = m.log.Warn
	}
	level("instance exited", "instance", name, "reason", ev.Reason, "exit_code", ev.ExitCode,
		"message", ev.Message, "relaunch", decision.Relaunch, "decision", decision.Reason)

	if lost {
		msg := fmt.Sprintf("%s %s (exit %d): %s", name, ev.Reason, ev.ExitCode, ev.Message)
		if decision.Relaunch {
			msg += "; relaunching"
		}
		m.notify.Notify(true, notifyReason(ev.Role, ev.Reason), msg)
	}
	switch {
	case decision.FailJob:
		m.fail(fmt.Errorf("%s %s: %s", name, ev.Reason, decision.Reason))
	case decision.Relaunch:
		var err error
		if ev.Role == cluster.Worker {
			err = m.launchWorker(ctx, index)
			m.mu.Lock()
			m.summary.Workers.Relaunched++
			m.mu.Unlock()
		} else {
			err = m.launchPS(ctx, index)
			m.mu.Lock()
			m.summary.PS.Relaunched++
			m.mu.Unlock()
		}
		if err != nil {
			m.fail(fmt.Errorf("relaunch after %s %s: %w", name, ev.Reason, err))
		}
	}
}

// notifyReason is the Kubernetes-style Event reason of a lost instance,
// e.g. WorkerPreempted, PSOOMKilled.
func notifyReason(r cluster.Role, why cluster.ExitReason) string {
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

// announceEpochsLocked notifies the end of each epoch whose tasks are all
// done. Caller holds m.mu.
func (m *Master) announceEpochsLocked() {
	// Coverage sorts every reported range of every epoch: computing it on
	// each report made reports (and, through the lock, GetTask) cost O(tasks)
	// — 76 tasks/s and a GetTask p99 of 3 s with 200 workers. Only look when
	// an epoch not yet announced may have finished.
	if m.disp.Progress().EpochsDone <= m.epochsAnnounced {
		return
	}
	cov := m.disp.Coverage()
	for m.epochsAnnounced < len(cov) && cov[m.epochsAnnounced].Finished {
		c := cov[m.epochsAnnounced]
		m.epochsAnnounced++
		m.notify.Notify(false, "EpochFinished", fmt.Sprintf("epoch %d/%d: %d/%d records trained, %d twice, %d missed",
			c.Epoch, m.cfg.NumEpochs, c.RecordsTrained, c.Records, c.RecordsTrainedTwice, c.RecordsMissed))
	}
}

// noteRunningLocked updates what depends on the number of running
// instances. Caller holds m.mu.
func (m *Master) noteRunningLocked(r cluster.Role) {
	if r != cluster.Worker {
		return
	}
	n := m.runningWorkersLocked()
	m.summary.Workers.MaxRunning = max(m.summary.Workers.MaxRunning, n)
	m.sendLiveWorkersLocked(false)
}

func (m *Master) lookup(r cluster.Role, id int) *instance {
	switch r {
	case cluster.Worker:
		return m.workers[id]
	case cluster.PS:
		for _, in := range m.ps {
			if in.id == id {
				return in
			}
		}
	}
	return nil
}

// tick applies timeouts: tasks held too long go back to todo, and a worker
// that went silent (alive to the backend, but hung) is stopped and treated
// at once as lost — its tasks requeued, a replacement launched — without
// waiting for a hung process to die. Its real exit is then ignored.
func (m *Master) tick(ctx context.Context) {
	m.mu.Lock()
	now := m.now()
	if requeued := m.disp.Tick(now); len(requeued) > 0 {
		m.summary.Tasks.Requeued += int64(len(requeued))
		m.log.Warn("tasks timed out, back to todo", "tasks", len(requeued), "timeout", m.cfg.TaskTimeout)
	}
	var silent []cluster.Event
	if !m.finished {
		for id, w := range m.workers {
			if w.running && now.Sub(w.lastSeen) > m.cfg.HeartbeatTimeout {
				silent = append(silent, cluster.Event{
					Role: cluster.Worker, ID: id, Index: w.index, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed,
					Message: fmt.Sprintf("silent for over %s: stopped by the master", m.cfg.HeartbeatTimeout),
				})
			}
		}
	}
	err := m.disp.Err()
	m.mu.Unlock()
	for _, ev := range silent {
		if err := m.backend.Stop(ctx, cluster.Worker, ev.ID); err != nil {
			m.log.Warn("stop silent worker", "instance", cluster.InstanceName(cluster.Worker, ev.ID), "err", err)
		}
		m.handleEvent(ctx, ev)
	}
	if err != nil {
		m.fail(err)
	}
}

// fail ends the job with err (the first error wins).
func (m *Master) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endLocked(err)
}

func (m *Master) endLocked(err error) {
	if m.finished {
		return
	}
	m.finished = true
	m.jobErr = err
	close(m.done)
}

func toPolicyRole(r cluster.Role) policy.Role {
	if r == cluster.PS {
		return policy.PS
	}
	return policy.Worker
}

func toPolicyReason(r cluster.ExitReason) policy.ExitReason {
	switch r {
	case cluster.Completed:
		return policy.Completed
	case cluster.Killed:
		return policy.Killed
	case cluster.Preempted:
		return policy.Preempted
	case cluster.OOMKilled:
		return policy.OOMKilled
	case cluster.Deleted:
		return policy.Deleted
	default:
		return policy.Error
	}
}
