package local

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/master"
	"elasticdl/internal/proctest"
)

// stragglerJob is 3 workers training the cnn for one epoch of file (of
// Fashion-MNIST), in PS mode or on AllReduce, evaluated on the test images
// when validate is set (not when a job's time is measured: the evaluation
// would dilute the ratio).
func stragglerJob(file string, allreduce, validate bool) []string {
	validation := ""
	if validate {
		validation = filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz")
	}
	args := []string{"--model_def=fashion_mnist.cnn", "--training_data=" + filepath.Join(dataDir, file),
		"--validation_data=" + validation, "--num_workers=3", "--num_epochs=1", "--log_interval=0"}
	// ELASTICDL_STRAGGLER_FLAGS: more flags, for measurements.
	args = append(args, strings.Fields(os.Getenv("ELASTICDL_STRAGGLER_FLAGS"))...)
	if allreduce {
		return append(args, "--distribution_strategy=AllreduceStrategy")
	}
	return append(args, "--num_ps_pods=1")
}

// runStraggler runs the job, with one worker held to fraction of a CPU
// from its start when fraction > 0, and returns the job, its summary and
// its time.
func runStraggler(t *testing.T, allreduce bool, fraction float64, file string, records int64, validate bool) (*job, master.Summary, time.Duration) {
	t.Helper()
	start := time.Now()
	j := startJob(t, stragglerJob(file, allreduce, validate)...)
	if fraction > 0 {
		var workers []proctest.Instance
		waitFor(t, time.Minute, "three workers", func() bool {
			workers = proctest.Children(j.cmd.Process.Pid, "worker")
			return len(workers) == 3
		})
		t.Logf("worker %d throttled: %s", workers[0].Pid, proctest.Throttle(t, workers[0].Pid, fraction))
	}
	s := j.succeeded(10 * time.Minute)
	assertExactlyOnce(t, s, 1, records)
	return j, s, time.Since(start)
}

// workerLogs is every worker log of a finished job, joined.
func (j *job) workerLogs(t *testing.T) string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(j.out, "logs", "worker-*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("worker logs of %s: %v, %v", j.out, logs, err)
	}
	var all strings.Builder
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	return all.String()
}

// sharesByRate is a worker's log line when its ring's step shares start
// to go by the members' rates (internal/worker/balance.go).
var sharesByRate = regexp.MustCompile(`msg="step shares by the members' rates" worker=\d+ on=true`)

// TestStraggler holds one worker of three to a tenth of a CPU for the
// whole job (one epoch of the 60,000 training images, evaluated on the
// test images): every record is still trained once and the model reaches
// an undisturbed job's accuracy; in PS mode the throttled worker's last
// task gets a backup copy that wins; on AllReduce the members' step
// shares go by their rates (that takes a few steps), and once marked slow
// (3 s of 2 s rates) it is parked: it leaves the ring.
// How much of the job's time that wins back is a measurement, not a test:
// ELASTICDL_STRAGGLER_PAIRS=N runs N side-by-side pairs (undisturbed, and
// at ELASTICDL_STRAGGLER_CPU of a CPU, 0.35 by default) of each mode and
// logs their ratios (bench/RESULTS.md).
func TestStraggler(t *testing.T) {
	skipLong(t)
	pairs, _ := strconv.Atoi(os.Getenv("ELASTICDL_STRAGGLER_PAIRS"))
	fraction := 0.35
	if v, err := strconv.ParseFloat(os.Getenv("ELASTICDL_STRAGGLER_CPU"), 64); err == nil && v > 0 {
		fraction = v
	}
	for _, c := range []struct {
		name      string
		allreduce bool
	}{{"ps", false}, {"allreduce", true}} {
		t.Run(c.name, func(t *testing.T) {
			if pairs > 0 {
				for i := range pairs {
					_, calm, calmTook := runStraggler(t, c.allreduce, 0, "train-images-idx3-ubyte.gz", 60000, false)
					sj, slow, slowTook := runStraggler(t, c.allreduce, fraction, "train-images-idx3-ubyte.gz", 60000, false)
					t.Logf("%s pair %d: job %.1f s undisturbed, %.1f s with a worker at %.0f%% of a CPU: %.2f×; training %.1f s / %.1f s; parked %d / %d",
						c.name, i, calmTook.Seconds(), slowTook.Seconds(), 100*fraction, slowTook.Seconds()/calmTook.Seconds(),
						calm.TrainingSeconds, slow.TrainingSeconds, calm.Workers.Parked, slow.Workers.Parked)
					t.Logf("%s pair %d: throttled job's last rates %+v", c.name, i, slow.WorkerRates)
					if c.allreduce {
						shares := 0
						for _, l := range strings.Split(sj.workerLogs(t), "\n") {
							if sharesByRate.MatchString(l) {
								shares++
							}
						}
						t.Logf("%s pair %d: step shares went by rate %d times (a line per member)", c.name, i, shares)
					}
					if slow.StartedAt != nil && len(slow.SlowWorkers) > 0 {
						t.Logf("%s pair %d: first slow mark %.1f s after the job's start", c.name, i, slow.SlowWorkers[0].At.Sub(*slow.StartedAt).Seconds())
					}
				}
				return
			}
			j, s, _ := runStraggler(t, c.allreduce, 0.1, "train-images-idx3-ubyte.gz", 60000, true)
			t.Logf("%s: slow marks %+v, rates %+v, tasks %+v, workers %+v", c.name, s.SlowWorkers, s.WorkerRates, s.Tasks, s.Workers)
			// Backups, parks and uneven step shares change which worker
			// trains what and when, not what the model learns: undisturbed,
			// one epoch of the cnn reached 0.880-0.883 in PS mode and
			// 0.869-0.875 on AllReduce (2026-12-02), throttled 0.880 and 0.872.
			if s.Eval == nil || s.Eval.Records != 10000 || s.Eval.Accuracy < 0.85 {
				t.Errorf("eval %+v, want 10000 records and accuracy >= 0.85", s.Eval)
			} else {
				t.Logf("%s: test accuracy %.4f with a worker at a tenth of a CPU", c.name, s.Eval.Accuracy)
			}
			if c.allreduce && !sharesByRate.MatchString(j.workerLogs(t)) {
				t.Error("no worker's step shares went by the members' rates")
			}
			// AllReduce: the throttled member, marked slow, left the ring
			// (parked) and the others went on without it.
			if c.allreduce && (s.Workers.Parked == 0 || !strings.Contains(j.stderr.String(), "parked slow worker")) {
				t.Errorf("workers %+v: want the throttled member parked", s.Workers)
			}
			// PS mode: the throttled worker's last task, held long after the
			// queue emptied, went to an idle worker too, and that copy won.
			if !c.allreduce && (s.Tasks.Backups == 0 || s.Tasks.BackupsWon == 0) {
				t.Errorf("tasks %+v: want a backup of the throttled worker's task that won", s.Tasks)
			}
		})
	}
}

// TestNoFalseStragglers runs ELASTICDL_STRAGGLER_CALM undisturbed 3-worker
// jobs (one epoch of the cnn, alternately PS and AllReduce) and checks
// that the master marks (and parks) no worker slow in any: the detection's false
// positives (bench/RESULTS.md). Skipped without it: minutes of jobs.
func TestNoFalseStragglers(t *testing.T) {
	skipLong(t)
	runs, _ := strconv.Atoi(os.Getenv("ELASTICDL_STRAGGLER_CALM"))
	if runs <= 0 {
		t.Skip("ELASTICDL_STRAGGLER_CALM=N runs N undisturbed jobs")
	}
	for i := range runs {
		_, s, took := runStraggler(t, i%2 == 1, 0, "train-images-idx3-ubyte.gz", 60000, false)
		t.Logf("run %d: %.1f s, slow marks %d, rates %+v", i, took.Seconds(), len(s.SlowWorkers), s.WorkerRates)
		if len(s.SlowWorkers) > 0 || s.Workers.Parked > 0 {
			t.Errorf("run %d (allreduce %v): an undisturbed job marked workers slow: %+v, parked %d", i, i%2 == 1, s.SlowWorkers, s.Workers.Parked)
		}
	}
}
