// Package policy decides, when a worker or parameter-server instance of an
// elastic training job exits, whether the master should relaunch it and
// whether the job must fail. It is pure (no I/O, no clock): the master feeds
// it exits and acts on its Decisions, and logs Decision.Reason.
//
// The rules, in order:
//   - the job has finished, or we asked the instance to stop: no relaunch;
//   - a parameter server lost for any reason: relaunch (the job cannot go on
//     without it) up to MaxPSRelaunches per PS, then fail the job;
//   - a worker that exited 0 before the job finished: no relaunch, not an
//     error (but the job fails if it was the last worker);
//   - a worker killed, preempted, deleted or OOM-killed: relaunch; these
//     count only toward the MaxTotalWorkerRelaunches crash-loop cap;
//   - a worker that failed (non-zero exit): relaunch up to
//     MaxWorkerFailureRelaunches times per worker slot;
//   - a worker not relaunched fails the job only if no worker is left.
package policy

import (
	"fmt"
	"maps"

	"elasticdl/internal/cluster"
)

// reasonWord is how the policy's messages name an exit reason; the zero
// ExitReason is unknown (classified from the exit code, see classify).
func reasonWord(r cluster.ExitReason) string {
	switch r {
	case 0:
		return "unknown"
	case cluster.Failed:
		return "error"
	case cluster.OOMKilled:
		return "OOMKilled"
	}
	return r.String()
}

// Exit describes one instance that exited.
type Exit struct {
	Role cluster.Role
	// ID is the instance's own id (unique per launch), used in messages.
	ID int
	// Slot identifies the lineage: a worker's slot is the ID of the first
	// worker launched in it and is inherited by every relaunch, so failure
	// counts follow the slot, not the instance. For a PS, Slot is its index.
	Slot     int
	ExitCode int
	// Reason is zero when unknown: it is then classified from ExitCode
	// (0 is completed, anything else an error), which keeps a forgotten
	// field on the safe side.
	Reason cluster.ExitReason
	// Message is the platform's or process's last words, quoted in Reason.
	Message string
	// Requested is true when the master asked the instance to stop (scale
	// down, job shutdown).
	Requested bool
	// LiveWorkers is the number of workers still running or pending, not
	// counting this one. A worker that is not relaunched fails the job only
	// when it is 0, because the job can go on with fewer workers.
	LiveWorkers int
}

// Config holds the relaunch limits. Use DefaultConfig for the defaults.
type Config struct {
	// MaxWorkerFailureRelaunches (--relaunch_on_worker_failure, default 1)
	// is how many times a worker slot is relaunched after error exits. It is
	// taken literally: 0 means failed workers are never relaunched.
	MaxWorkerFailureRelaunches int
	// MaxPSRelaunches caps relaunches of each parameter server. A safety
	// cap: 0 means the default (10), negative means never relaunch.
	MaxPSRelaunches int
	// MaxTotalWorkerRelaunches caps all worker relaunches of the job, for
	// any reason, against crash loops. A safety cap: 0 means the default
	// (100), negative means never relaunch.
	MaxTotalWorkerRelaunches int
}

// Defaults.
const (
	DefaultMaxWorkerFailureRelaunches = 1
	DefaultMaxPSRelaunches            = 10
	DefaultMaxTotalWorkerRelaunches   = 100
)

// DefaultConfig returns the default limits.
func DefaultConfig() Config {
	return Config{
		MaxWorkerFailureRelaunches: DefaultMaxWorkerFailureRelaunches,
		MaxPSRelaunches:            DefaultMaxPSRelaunches,
		MaxTotalWorkerRelaunches:   DefaultMaxTotalWorkerRelaunches,
	}
}

// Decision is what to do about an exit.
type Decision struct {
	Relaunch bool
	FailJob  bool
	// Reason explains the decision for logs and events; never empty.
	Reason string
}

// Policy applies the rules and keeps the relaunch counts they need. Create
// it with New. It is not safe for concurrent use; the master serialises
// calls.
type Policy struct {
	cfg            Config
	slotFailures   map[int]int // worker slot -> error exits
	psRelaunches   map[int]int // PS slot -> relaunches
	workerRelaunch int         // total worker relaunches
}

// New returns a Policy with cfg's limits, after applying the defaults
// described in Config.
func New(cfg Config) *Policy {
	cfg.MaxWorkerFailureRelaunches = max(cfg.MaxWorkerFailureRelaunches, 0)
	cfg.MaxPSRelaunches = capOrDefault(cfg.MaxPSRelaunches, DefaultMaxPSRelaunches)
	cfg.MaxTotalWorkerRelaunches = capOrDefault(cfg.MaxTotalWorkerRelaunches, DefaultMaxTotalWorkerRelaunches)
	return &Policy{cfg: cfg, slotFailures: make(map[int]int), psRelaunches: make(map[int]int)}
}

func capOrDefault(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// Config returns the effective limits (defaults applied).
func (p *Policy) Config() Config { return p.cfg }

// SlotFailures returns how many error exits worker slot has had.
func (p *Policy) SlotFailures(slot int) int { return p.slotFailures[slot] }

// PSRelaunches returns how many times PS slot has been relaunched.
func (p *Policy) PSRelaunches(slot int) int { return p.psRelaunches[slot] }

// WorkerRelaunches returns the total number of worker relaunches decided.
func (p *Policy) WorkerRelaunches() int { return p.workerRelaunch }

// Decide returns what to do about exit e, given whether the job has
// finished. A Relaunch decision is recorded against the limits, so call
// Decide exactly once per exit.
func (p *Policy) Decide(e Exit, jobFinished bool) Decision {
	who := fmt.Sprintf("%s %d (slot %d)", e.Role, e.ID, e.Slot)
	reason := classify(e)
	what := fmt.Sprintf("%s exited: %s, code %d", who, reasonWord(reason), e.ExitCode)
	if e.Message != "" {
		what += fmt.Sprintf(", %q", e.Message)
	}
	switch {
	case jobFinished:
		return Decision{Reason: what + "; job finished, not relaunching"}
	case e.Requested:
		return Decision{Reason: what + "; stop was requested, not relaunching"}
	}
	switch e.Role {
	case cluster.PS:
		return p.decidePS(e, what)
	case cluster.Worker:
		return p.decideWorker(e, reason, what)
	}
	// A role we do not know is a bug in the caller; fail loudly rather than
	// guess.
	return Decision{FailJob: true, Reason: what + "; unknown role, failing the job"}
}

func classify(e Exit) cluster.ExitReason {
	if e.Reason != 0 {
		return e.Reason
	}
	if e.ExitCode == 0 {
		return cluster.Completed
	}
	return cluster.Failed
}

func (p *Policy) decidePS(e Exit, what string) Decision {
	n := p.psRelaunches[e.Slot]
	if n >= p.cfg.MaxPSRelaunches {
		return Decision{FailJob: true, Reason: fmt.Sprintf(
			"%s; PS already relaunched %d times (max %d) and the job cannot run without it, failing the job",
			what, n, p.cfg.MaxPSRelaunches)}
	}
	p.psRelaunches[e.Slot] = n + 1
	return Decision{Relaunch: true, Reason: fmt.Sprintf("%s; the job needs every PS, relaunching (PS relaunch %d of %d)",
		what, n+1, p.cfg.MaxPSRelaunches)}
}

func (p *Policy) decideWorker(e Exit, reason cluster.ExitReason, what string) Decision {
	switch reason {
	case cluster.Completed:
		return p.noRelaunch(e, what+"; worker completed before the job finished, not relaunching")
	case cluster.Failed:
		p.slotFailures[e.Slot]++
		n := p.slotFailures[e.Slot]
		if n > p.cfg.MaxWorkerFailureRelaunches {
			return p.noRelaunch(e, fmt.Sprintf("%s; slot failed %d times, over the %d relaunches allowed on failure, not relaunching",
				what, n, p.cfg.MaxWorkerFailureRelaunches))
		}
		return p.relaunchWorker(e, fmt.Sprintf("%s; relaunching after failure %d of %d allowed", what, n, p.cfg.MaxWorkerFailureRelaunches))
	case cluster.OOMKilled:
		return p.relaunchWorker(e, what+"; out of memory, relaunching with the same resources (raise the memory limit if it repeats)")
	case cluster.Killed, cluster.Preempted, cluster.Deleted:
		// The instance, not the program, was lost: relaunching is the
		// point of an elastic job.
		return p.relaunchWorker(e, what+"; instance lost, relaunching")
	}
	return Decision{FailJob: true, Reason: what + "; unknown exit reason, failing the job"}
}

func (p *Policy) relaunchWorker(e Exit, why string) Decision {
	if p.workerRelaunch >= p.cfg.MaxTotalWorkerRelaunches {
		return p.noRelaunch(e, fmt.Sprintf("%s; but the job already relaunched %d workers (max %d, crash loop?), not relaunching",
			why, p.workerRelaunch, p.cfg.MaxTotalWorkerRelaunches))
	}
	p.workerRelaunch++
	return Decision{Relaunch: true, Reason: fmt.Sprintf("%s (worker relaunch %d of %d)", why, p.workerRelaunch, p.cfg.MaxTotalWorkerRelaunches)}
}

// noRelaunch lets the job go on with fewer workers unless none is left.
func (p *Policy) noRelaunch(e Exit, why string) Decision {
	if e.LiveWorkers <= 0 {
		return Decision{FailJob: true, Reason: why + "; no workers left, failing the job"}
	}
	return Decision{Reason: fmt.Sprintf("%s; continuing with %d workers", why, e.LiveWorkers)}
}

// State is what a Policy counted, to persist (master failover).
type State struct {
	SlotFailures   map[int]int `json:"slot_failures,omitempty"`
	PSRelaunches   map[int]int `json:"ps_relaunches,omitempty"`
	WorkerRelaunch int         `json:"worker_relaunches"`
}

// State returns what p counted.
func (p *Policy) State() State {
	return State{SlotFailures: maps.Clone(p.slotFailures), PSRelaunches: maps.Clone(p.psRelaunches), WorkerRelaunch: p.workerRelaunch}
}

// Resume returns a Policy with cfg's limits that has counted s.
func Resume(cfg Config, s State) *Policy {
	p := New(cfg)
	maps.Copy(p.slotFailures, s.SlotFailures)
	maps.Copy(p.psRelaunches, s.PSRelaunches)
	p.workerRelaunch = s.WorkerRelaunch
	return p
}
