package local

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/proctest"
)

// TestReplaceSlowWorker: with --replace_slow_workers, a worker held to a
// tenth of a CPU for good (a bad host) is marked slow, then stopped and
// replaced by a new worker in its slot: a new process, outside the
// throttle. It does not count as lost, every record is trained once per
// epoch, and the model reaches an undisturbed job's accuracy.
func TestReplaceSlowWorker(t *testing.T) {
	skipLong(t)
	args := append(stragglerJob("train-images-idx3-ubyte.gz", false, true),
		"--num_epochs=2", "--replace_slow_workers", "--replace_slow_after=2s")
	j := startJob(t, args...)
	var workers []proctest.Instance
	waitFor(t, time.Minute, "three workers", func() bool {
		workers = proctest.Children(j.cmd.Process.Pid, "worker")
		return len(workers) == 3
	})
	victim, _ := workers[0].Flag("worker_id")
	t.Logf("worker %s (pid %d) throttled: %s", victim, workers[0].Pid, throttle(t, workers[0].Pid, 0.1))
	s := j.succeeded(10 * time.Minute)
	assertExactlyOnce(t, s, 2, 60000)
	t.Logf("slow marks %+v, workers %+v, tasks %+v", s.SlowWorkers, s.Workers, s.Tasks)
	if s.Workers.Replaced < 1 || s.Workers.Lost != 0 || s.Workers.Launched != 3+s.Workers.Replaced+s.Workers.AvoidanceDropped {
		t.Errorf("workers %+v: want the throttled worker replaced, none lost", s.Workers)
	}
	if line := grepLine(j.stderr.String(), `msg="replacing slow worker"`); !strings.Contains(line, "worker="+victim+" ") {
		t.Errorf("the first replacement %q is not of the throttled worker %s", line, victim)
	}
	if s.Eval == nil || s.Eval.Records != 10000 || s.Eval.Accuracy < 0.85 {
		t.Errorf("eval %+v, want 10000 records and accuracy >= 0.85", s.Eval)
	} else {
		t.Logf("test accuracy %.4f after replacing a worker at a tenth of a CPU", s.Eval.Accuracy)
	}
	// The replacement trained: its log says so.
	logs, _ := filepath.Glob(filepath.Join(j.out, "logs", "worker-3.log"))
	if len(logs) != 1 {
		t.Errorf("no log of the replacement worker-3: %v", logs)
	}
}

// grepLine is the first line of s that contains sub ("" if none).
func grepLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
