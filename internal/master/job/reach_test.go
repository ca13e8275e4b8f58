package job

import (
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

const cannotReach = "exit 1: elasticdl worker: cannot reach the master at m:1: the name m does not resolve"

// reachStep is one event of a TestNeverReached scenario.
type reachStep struct {
	worker int
	why    cluster.ExitReason // exit with this reason; 0: a heartbeat
}

// TestNeverReached: a job whose workers exit before any of them reached
// the master fails once as many as the job's workers (at least 3) did,
// with the last one's cause; a job one of whose workers reached the master,
// or whose workers were preempted or deleted, goes on relaunching.
func TestNeverReached(t *testing.T) {
	exit := func(w int, why cluster.ExitReason) reachStep { return reachStep{w, why} }
	talk := func(w int) reachStep { return reachStep{w, 0} }
	for _, c := range []struct {
		name    string
		steps   []reachStep
		fails   bool
		relaunc int // workers relaunched
	}{
		{"two failures: relaunched", []reachStep{exit(0, cluster.Failed), exit(1, cluster.Failed)}, false, 2},
		{"three failures fail the job", []reachStep{exit(0, cluster.Failed), exit(1, cluster.Failed), exit(2, cluster.Failed)}, true, 2},
		{"OOM kills count", []reachStep{exit(0, cluster.OOMKilled), exit(1, cluster.Failed), exit(2, cluster.OOMKilled)}, true, 2},
		{"preempted and deleted do not count", []reachStep{exit(0, cluster.Preempted), exit(1, cluster.Deleted),
			exit(2, cluster.Preempted), exit(3, cluster.Failed), exit(4, cluster.Failed)}, false, 5},
		{"a worker reached the master", []reachStep{talk(1), exit(0, cluster.Failed), exit(2, cluster.Failed), exit(3, cluster.Failed),
			exit(1, cluster.Failed)}, false, 4},
		{"the worker that failed had talked", []reachStep{talk(0), exit(0, cluster.Failed), exit(1, cluster.Failed), exit(2, cluster.Failed)}, false, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, func(cfg *Config) { cfg.Policy = policyConfig(100, 2) })
			h.take()
			var last reachStep
			for _, s := range c.steps {
				if s.why == 0 {
					h.step(Heartbeat{Worker: s.worker})
					continue
				}
				h.running(cluster.Worker, s.worker)
				h.step(Instance{cluster.Event{Role: cluster.Worker, ID: s.worker, Phase: cluster.Exited, ExitCode: 1, Reason: s.why, Message: cannotReach}})
				last = s
			}
			rd := h.take()
			if got := len(rd.Launch); got != c.relaunc {
				t.Errorf("%d workers relaunched, want %d", got, c.relaunc)
			}
			if !c.fails {
				if h.j.Phase() == Failed {
					t.Fatalf("the job failed: %v", h.j.Err())
				}
				return
			}
			want := "no worker has reached the master: 3 workers exited before any did; the last, worker-" + string(rune('0'+last.worker))
			if h.j.Phase() != Failed || !strings.Contains(h.j.Err().Error(), want) || !strings.HasSuffix(h.j.Err().Error(), cannotReach) {
				t.Fatalf("phase %v, error %v; want failed with %q and the worker's cause", h.j.Phase(), h.j.Err(), want)
			}
		})
	}
}

// TestNeverReachedLimitFollowsTheJobsSize: every worker of a larger job
// may fail once before the job does.
func TestNeverReachedLimitFollowsTheJobsSize(t *testing.T) {
	h := newHarness(t, func(cfg *Config) { cfg.NumWorkers, cfg.Policy = 5, policyConfig(100, 5) })
	h.take()
	for w := range 5 {
		if h.j.Phase() == Failed {
			t.Fatalf("failed after %d exits: %v", w, h.j.Err())
		}
		h.exit(cluster.Worker, w, cluster.Failed)
	}
	if h.j.Phase() != Failed {
		t.Fatalf("phase %v after 5 of 5 workers failed without reaching the master", h.j.Phase())
	}
}

// TestNeverReachedSurvivesFailover: a master that takes over keeps the
// count, and a worker's reaching the first master.
func TestNeverReachedSurvivesFailover(t *testing.T) {
	h := newHarness(t, func(cfg *Config) { cfg.Policy = policyConfig(100, 2) })
	h.exit(cluster.Worker, 0, cluster.Failed)
	h.exit(cluster.Worker, 1, cluster.Failed)
	j, _, err := resumeThroughJSON(h.j.cfg, h.j)
	if err != nil {
		t.Fatal(err)
	}
	h.j = j
	h.exit(cluster.Worker, 2, cluster.Failed)
	if h.j.Phase() != Failed {
		t.Fatalf("phase %v: the third exit after a failover did not fail the job", h.j.Phase())
	}

	h = newHarness(t, func(cfg *Config) { cfg.Policy = policyConfig(100, 2) })
	h.step(Heartbeat{Worker: 0})
	if j, _, err = resumeThroughJSON(h.j.cfg, h.j); err != nil {
		t.Fatal(err)
	}
	h.j = j
	for w := 1; w <= 4; w++ {
		h.exit(cluster.Worker, w, cluster.Failed)
	}
	if h.j.Phase() == Failed {
		t.Fatalf("failed after a worker had reached the first master: %v", h.j.Err())
	}
}

// TestWorkerThatNeverTalkedGetsItsOwnTimeout: a running worker that never
// made a request is stopped as silent only after the heartbeat timeout and
// its own retry limit, so that it exits with its cause first; once it has
// talked, the heartbeat timeout alone applies.
func TestWorkerThatNeverTalkedGetsItsOwnTimeout(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.HeartbeatTimeout, c.WorkerMasterTimeout = 10*time.Second, 20*time.Second })
	h.take()
	h.running(cluster.Worker, 0)
	h.running(cluster.Worker, 1)
	h.step(Heartbeat{Worker: 1})
	h.advance(11 * time.Second)
	h.step(Tick{})
	if rd := h.take(); len(rd.Stop) != 1 || rd.Stop[0].ID != 1 {
		t.Fatalf("stops %+v after 11 s, want worker 1 (it talked, then went silent) alone", rd.Stop)
	}
	h.advance(20 * time.Second)
	h.step(Tick{})
	rd := h.take()
	if len(rd.Stop) != 1 || rd.Stop[0].ID != 0 {
		t.Fatalf("stops %+v after 31 s, want worker 0", rd.Stop)
	}
	if n := len(rd.Notices); n == 0 || !strings.Contains(rd.Notices[n-1].Message, "silent for over 30s") {
		t.Errorf("notices %+v, want worker 0 silent for over 30s", rd.Notices)
	}
}
