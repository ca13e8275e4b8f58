package policy

import (
	"strings"
	"testing"

	"elasticdl/internal/cluster"
)

// The roles and reasons the tables use, in the policy's words.
const (
	Worker    = cluster.Worker
	PS        = cluster.PS
	Unknown   = cluster.ExitReason(0)
	Completed = cluster.Completed
	Killed    = cluster.Killed
	Preempted = cluster.Preempted
	OOMKilled = cluster.OOMKilled
	Error     = cluster.Failed
	Deleted   = cluster.Deleted
)

func worker(id, slot int, r cluster.ExitReason, live int) Exit {
	code := 0
	switch r {
	case Error:
		code = 1
	case Killed, OOMKilled:
		code = 137
	}
	return Exit{Role: Worker, ID: id, Slot: slot, Reason: r, ExitCode: code, LiveWorkers: live}
}

func ps(slot int, r cluster.ExitReason) Exit {
	return Exit{Role: PS, ID: slot, Slot: slot, Reason: r, ExitCode: 1}
}

func withRequested(e Exit) Exit { e.Requested = true; return e }

func withCode(e Exit, code int) Exit { e.ExitCode = code; return e }

func repeat(e Exit, n int) []Exit {
	out := make([]Exit, n)
	for i := range out {
		out[i] = e
	}
	return out
}

func TestDecide(t *testing.T) {
	def := DefaultConfig()
	tests := []struct {
		name     string
		cfg      Config
		prior    []Exit // decided first, with jobFinished false
		exit     Exit
		finished bool
		relaunch bool
		failJob  bool
		says     []string // substrings of Reason
	}{
		// Finished job or requested stop: never relaunch, never fail.
		{name: "finished job, worker error", cfg: def, exit: worker(1, 1, Error, 0), finished: true, says: []string{"job finished"}},
		{name: "finished job, worker killed", cfg: def, exit: worker(1, 1, Killed, 3), finished: true, says: []string{"job finished"}},
		{name: "finished job, PS lost", cfg: def, exit: ps(0, Killed), finished: true, says: []string{"job finished"}},
		{name: "requested worker stop", cfg: def, exit: withRequested(worker(1, 1, Killed, 3)), says: []string{"requested"}},
		{name: "requested stop of last worker", cfg: def, exit: withRequested(worker(1, 1, Error, 0)), says: []string{"requested"}},
		{name: "requested PS stop", cfg: def, exit: withRequested(ps(0, Killed)), says: []string{"requested"}},

		// Worker lost by the platform: relaunch.
		{name: "worker killed", cfg: def, exit: worker(1, 1, Killed, 3), relaunch: true, says: []string{"killed", "instance lost", "relaunch 1 of 100"}},
		{name: "worker preempted", cfg: def, exit: worker(1, 1, Preempted, 0), relaunch: true, says: []string{"preempted"}},
		{name: "worker deleted", cfg: def, exit: worker(1, 1, Deleted, 3), relaunch: true, says: []string{"deleted"}},
		{name: "worker OOMKilled", cfg: def, exit: worker(1, 1, OOMKilled, 3), relaunch: true, says: []string{"OOMKilled", "out of memory", "memory limit"}},
		{name: "kills do not use the failure budget", cfg: def, prior: repeat(worker(1, 1, Killed, 3), 5),
			exit: worker(9, 1, Error, 3), relaunch: true, says: []string{"failure 1 of 1"}},
		{name: "OOM does not use the failure budget", cfg: def, prior: repeat(worker(1, 1, OOMKilled, 3), 3),
			exit: worker(9, 1, Error, 3), relaunch: true},

		// Worker errors: per-slot budget.
		{name: "first error relaunched", cfg: def, exit: worker(1, 1, Error, 3), relaunch: true, says: []string{"error, code 1", "failure 1 of 1"}},
		{name: "second error in slot, others alive", cfg: def, prior: []Exit{worker(1, 1, Error, 3)},
			exit: worker(1, 1, Error, 3), says: []string{"failed 2 times", "continuing with 3 workers"}},
		{name: "second error in slot, no worker left", cfg: def, prior: []Exit{worker(1, 1, Error, 3)},
			exit: worker(1, 1, Error, 0), failJob: true, says: []string{"no workers left"}},
		{name: "relaunched worker inherits slot count", cfg: def, prior: []Exit{worker(1, 1, Error, 3)},
			exit: worker(7, 1, Error, 3), says: []string{"worker 7 (slot 1)", "failed 2 times"}},
		{name: "other slot has its own budget", cfg: def, prior: []Exit{worker(1, 1, Error, 3)},
			exit: worker(2, 2, Error, 3), relaunch: true},
		{name: "failure relaunches disabled", cfg: Config{MaxWorkerFailureRelaunches: 0},
			exit: worker(1, 1, Error, 2), says: []string{"0 relaunches allowed"}},
		{name: "failure relaunches disabled, last worker", cfg: Config{MaxWorkerFailureRelaunches: 0},
			exit: worker(1, 1, Error, 0), failJob: true},
		{name: "negative failure relaunches means none", cfg: Config{MaxWorkerFailureRelaunches: -3},
			exit: worker(1, 1, Error, 2)},
		{name: "third of three", cfg: Config{MaxWorkerFailureRelaunches: 3}, prior: repeat(worker(1, 1, Error, 3), 2),
			exit: worker(1, 1, Error, 3), relaunch: true, says: []string{"failure 3 of 3"}},
		{name: "fourth of three", cfg: Config{MaxWorkerFailureRelaunches: 3}, prior: repeat(worker(1, 1, Error, 3), 3),
			exit: worker(1, 1, Error, 3)},

		// Worker exit 0 before the job finished.
		{name: "worker completed early", cfg: def, exit: worker(1, 1, Completed, 2), says: []string{"completed before the job finished"}},
		{name: "last worker completed early", cfg: def, exit: worker(1, 1, Completed, 0), failJob: true, says: []string{"no workers left"}},
		{name: "completed does not use the failure budget", cfg: def, prior: []Exit{worker(1, 1, Completed, 2)},
			exit: worker(1, 1, Error, 2), relaunch: true},

		// Unknown reason: classified from the exit code.
		{name: "unknown reason, exit 0", cfg: def, exit: worker(1, 1, Unknown, 2), says: []string{"completed"}},
		{name: "unknown reason, exit 2", cfg: def, exit: withCode(worker(1, 1, Unknown, 2), 2), relaunch: true, says: []string{"error, code 2"}},
		{name: "unknown reason, exit 2 twice", cfg: def, prior: []Exit{withCode(worker(1, 1, Unknown, 2), 2)},
			exit: withCode(worker(1, 1, Unknown, 2), 2)},

		// Crash-loop cap on all worker relaunches.
		{name: "total cap reached", cfg: Config{MaxWorkerFailureRelaunches: 1, MaxTotalWorkerRelaunches: 2},
			prior: []Exit{worker(1, 1, Preempted, 3), worker(2, 2, Error, 3)},
			exit:  worker(3, 3, Preempted, 3), says: []string{"already relaunched 2 workers", "continuing"}},
		{name: "total cap reached, last worker", cfg: Config{MaxWorkerFailureRelaunches: 1, MaxTotalWorkerRelaunches: 2},
			prior: repeat(worker(1, 1, Killed, 3), 2),
			exit:  worker(1, 1, OOMKilled, 0), failJob: true, says: []string{"crash loop", "no workers left"}},
		{name: "total cap blocks error relaunch", cfg: Config{MaxWorkerFailureRelaunches: 5, MaxTotalWorkerRelaunches: 1},
			prior: []Exit{worker(1, 1, Killed, 3)},
			exit:  worker(2, 2, Error, 3)},
		{name: "total cap default 100", cfg: Config{MaxWorkerFailureRelaunches: 1}, prior: repeat(worker(1, 1, Killed, 3), 99),
			exit: worker(1, 1, Killed, 3), relaunch: true, says: []string{"relaunch 100 of 100"}},
		{name: "total cap default 100, exceeded", cfg: Config{MaxWorkerFailureRelaunches: 1}, prior: repeat(worker(1, 1, Killed, 3), 100),
			exit: worker(1, 1, Killed, 3)},
		{name: "negative total cap: never relaunch", cfg: Config{MaxWorkerFailureRelaunches: 1, MaxTotalWorkerRelaunches: -1},
			exit: worker(1, 1, Preempted, 3)},
		{name: "requested stops do not use the cap", cfg: Config{MaxWorkerFailureRelaunches: 1, MaxTotalWorkerRelaunches: 1},
			prior: repeat(withRequested(worker(1, 1, Killed, 3)), 5),
			exit:  worker(1, 1, Killed, 3), relaunch: true},

		// Parameter servers: any loss is relaunched up to the cap, then the job fails.
		{name: "PS killed", cfg: def, exit: ps(0, Killed), relaunch: true, says: []string{"ps 0", "PS relaunch 1 of 10"}},
		{name: "PS error", cfg: def, exit: ps(0, Error), relaunch: true},
		{name: "PS OOMKilled", cfg: def, exit: ps(0, OOMKilled), relaunch: true},
		{name: "PS preempted", cfg: def, exit: ps(0, Preempted), relaunch: true},
		{name: "PS deleted", cfg: def, exit: ps(0, Deleted), relaunch: true},
		{name: "PS exited 0", cfg: def, exit: withCode(ps(0, Completed), 0), relaunch: true},
		{name: "PS at cap", cfg: Config{MaxPSRelaunches: 2}, prior: repeat(ps(0, Killed), 2),
			exit: ps(0, Killed), failJob: true, says: []string{"relaunched 2 times (max 2)", "cannot run without it"}},
		{name: "PS cap is per PS", cfg: Config{MaxPSRelaunches: 2}, prior: repeat(ps(0, Killed), 2),
			exit: ps(1, Killed), relaunch: true},
		{name: "PS default cap 10", cfg: Config{}, prior: repeat(ps(0, Error), 10), exit: ps(0, Error), failJob: true},
		{name: "PS relaunch disabled", cfg: Config{MaxPSRelaunches: -1}, exit: ps(0, Preempted), failJob: true},
		{name: "PS loss ignores live workers", cfg: def, exit: Exit{Role: PS, Reason: Killed, LiveWorkers: 0}, relaunch: true},
		{name: "worker relaunches do not use PS cap", cfg: Config{MaxPSRelaunches: 1}, prior: repeat(worker(1, 1, Killed, 3), 5),
			exit: ps(0, Killed), relaunch: true},

		// Caller bugs fail loudly.
		{name: "unknown role", cfg: def, exit: Exit{Role: cluster.Role("Role(7)"), Reason: Killed}, failJob: true, says: []string{"Role(7)", "unknown role"}},
		{name: "unknown reason value", cfg: def, exit: worker(1, 1, cluster.ExitReason(42), 3), failJob: true, says: []string{"reason(42)"}},

		// The message is quoted in the reason.
		{name: "message quoted", cfg: def, exit: Exit{Role: Worker, ID: 4, Slot: 2, Reason: Error, ExitCode: 3, Message: "CUDA error", LiveWorkers: 1},
			relaunch: true, says: []string{`worker 4 (slot 2) exited: error, code 3, "CUDA error"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := New(tc.cfg)
			for _, e := range tc.prior {
				p.Decide(e, false)
			}
			got := p.Decide(tc.exit, tc.finished)
			if got.Relaunch != tc.relaunch || got.FailJob != tc.failJob {
				t.Errorf("Decide = relaunch %v, fail %v; want %v, %v (reason %q)", got.Relaunch, got.FailJob, tc.relaunch, tc.failJob, got.Reason)
			}
			if got.Relaunch && got.FailJob {
				t.Errorf("relaunch and fail at once: %q", got.Reason)
			}
			if got.Reason == "" {
				t.Error("empty reason")
			}
			for _, s := range tc.says {
				if !strings.Contains(got.Reason, s) {
					t.Errorf("reason %q does not say %q", got.Reason, s)
				}
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Config
		want Config
	}{
		{"zero value", Config{}, Config{0, 10, 100}},
		{"defaults", DefaultConfig(), Config{1, 10, 100}},
		{"explicit", Config{3, 4, 5}, Config{3, 4, 5}},
		{"negative", Config{-1, -1, -1}, Config{0, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := New(tc.in).Config(); got != tc.want {
				t.Fatalf("New(%+v).Config() = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestCounters(t *testing.T) {
	p := New(DefaultConfig())
	steps := []struct {
		exit     Exit
		finished bool
	}{
		{worker(1, 1, Error, 3), false},                                      // slot 1 failure 1, relaunch
		{worker(5, 1, Error, 3), false},                                      // slot 1 failure 2, no relaunch
		{worker(2, 2, Preempted, 3), false},                                  // relaunch
		{withRequested(worker(3, 3, Error, 3)), false},                       // not counted
		{worker(4, 4, Error, 3), true},                                       // job finished: not counted
		{ps(0, Killed), false},                                               // PS 0 relaunch
		{ps(0, Error), false},                                                // PS 0 relaunch
		{ps(1, Killed), true},                                                // finished: not counted
		{withRequested(ps(1, Killed)), false},                                // requested: not counted
		{withCode(worker(6, 6, Unknown, 1), 1), false},                       // slot 6 failure, relaunch
		{withCode(worker(7, 7, Unknown, 0), 0), false},                       // completed: nothing
		{worker(8, 8, OOMKilled, 3), false},                                  // relaunch
		{Exit{Role: cluster.Role("Role(9)"), Reason: Killed, ID: 10}, false}, // fails, not counted
	}
	for _, s := range steps {
		p.Decide(s.exit, s.finished)
	}
	tests := []struct {
		name      string
		got, want int
	}{
		{"slot 1 failures", p.SlotFailures(1), 2},
		{"slot 2 failures", p.SlotFailures(2), 0},
		{"slot 3 failures", p.SlotFailures(3), 0},
		{"slot 4 failures", p.SlotFailures(4), 0},
		{"slot 6 failures", p.SlotFailures(6), 1},
		{"slot 7 failures", p.SlotFailures(7), 0},
		{"PS 0 relaunches", p.PSRelaunches(0), 2},
		{"PS 1 relaunches", p.PSRelaunches(1), 0},
		{"worker relaunches", p.WorkerRelaunches(), 4},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

// The words the policy's messages use for roles and exit reasons.
func TestWords(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{string(Worker), "worker"},
		{string(PS), "ps"},
		{reasonWord(Unknown), "unknown"},
		{reasonWord(Completed), "completed"},
		{reasonWord(Killed), "killed"},
		{reasonWord(Preempted), "preempted"},
		{reasonWord(OOMKilled), "OOMKilled"},
		{reasonWord(Error), "error"},
		{reasonWord(Deleted), "deleted"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
