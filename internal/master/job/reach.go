package job

import (
	"errors"
	"fmt"
	"time"

	"elasticdl/internal/cluster"
)

// A job none of whose workers can reach its master (a Service name the
// cluster does not resolve, a port nothing forwards) would otherwise
// relaunch them for as long as the relaunch budget lasts, training
// nothing. Once a worker has reached the master, the job's workers can:
// later losses are the relaunch policy's. Until then, the job fails after
// unreachedLimit workers exited without a word to the master, with the
// last one's cause (the worker says why in its exit message).

// ErrNoWorkerReached fails a job whose workers never reached its master.
var ErrNoWorkerReached = errors.New("no worker has reached the master")

// reachState is persisted: a master that takes over keeps counting.
type reachState struct {
	// Reached: a worker has made a request of the master.
	Reached bool `json:"reached,omitempty"`
	// Unreached counts the workers that exited before any worker reached
	// the master, without having made a request themselves.
	Unreached int `json:"unreached,omitempty"`
}

// unreachedLimit is how many such exits fail the job: every worker of the
// job at least once, and never fewer than 3 (a single crash on a bad node
// is not the job's fault).
func (j *Job) unreachedLimit() int { return max(3, j.cfg.NumWorkers) }

// silentAfter is how long worker w may go without a request before the
// master stops it. A worker that never talked may still be retrying an
// unreachable master: it gets its own retry limit on top, so that it ends
// with its cause rather than the master's stop.
func (j *Job) silentAfter(w *instance) time.Duration {
	if w.talked {
		return j.cfg.HeartbeatTimeout
	}
	return j.cfg.HeartbeatTimeout + j.cfg.WorkerMasterTimeout
}

// neverReached counts the exit ev of worker in, when neither it nor any
// other worker ever reached the master, and returns the job's failure
// once unreachedLimit is reached.
func (j *Job) neverReached(ev cluster.Event, in *instance) error {
	if j.reach.Reached || ev.Role != cluster.Worker || in.talked || ev.Requested {
		return nil
	}
	switch ev.Reason {
	case cluster.Failed, cluster.Killed, cluster.OOMKilled:
	default:
		return nil // preempted, deleted, completed: not the job's fault
	}
	j.reach.Unreached++
	if j.reach.Unreached < j.unreachedLimit() {
		return nil
	}
	why := ev.Message
	if why == "" {
		why = fmt.Sprintf("exit %d", ev.ExitCode)
	}
	return fmt.Errorf("%w: %d workers exited before any did; the last, %s, %s: %s", ErrNoWorkerReached,
		j.reach.Unreached, cluster.InstanceName(ev.Role, ev.ID), ev.Reason, why)
}
