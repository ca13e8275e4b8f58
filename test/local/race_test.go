package local

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestJobUnderRaceDetector runs a short job whose master, workers and PS
// are all built with -race (GORACE halt_on_error: a race fails the process
// and so the job), killing a worker on the way, so the concurrent paths of
// whole processes — not only unit tests — are checked for data races.
func TestJobUnderRaceDetector(t *testing.T) {
	needData(t)
	if testing.Short() {
		t.Skip("builds a -race binary")
	}
	bin := filepath.Join(t.TempDir(), "elasticdl-race")
	build := exec.Command("go", "build", "-race", "-o", bin, "elasticdl/cmd/elasticdl")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -race: %v\n%s", err, out)
	}
	t.Setenv("GORACE", "halt_on_error=1 exitcode=66")
	saved := binary
	binary = bin
	defer func() { binary = saved }()

	// The 10,000-record test set: small enough for race-instrumented training.
	j := startJob(t, "--model_def=fashion_mnist.mlp",
		"--training_data="+filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"),
		"--validation_data="+filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"),
		// Four epochs: the 10,000 records train in under a second even
		// with -race, and progress is logged each second, so a kill on a
		// line of an epoch before the last lands while tasks remain and
		// must count as a loss (one after the last task is not).
		"--num_workers=2", "--num_ps_pods=2", "--num_epochs=4",
		// The worker's concurrent path: pushes on their way while the
		// next minibatch computes.
		"--overlap_push")
	var victim []int
	waitFor(t, 3*time.Minute, "training progress", func() bool {
		epoch, done := j.epochRecordsDone()
		if epoch == "4/4" {
			t.Fatalf("no progress line before the last epoch")
		}
		victim = j.children("worker")
		return (done >= 1000 || epoch > "1/4") && len(victim) == 2
	})
	syscall.Kill(victim[0], syscall.SIGKILL)
	epoch, done := j.epochRecordsDone()
	t.Logf("killed worker pid %d in epoch %s at %d records", victim[0], epoch, done)
	if code := j.wait(8 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	s := j.summary()
	assertExactlyOnce(t, s, 4, 10000)
	if s.Workers.Lost != 1 {
		t.Errorf("workers %+v\nstderr:\n%s", s.Workers, j.stderr.String())
	}
	logs, _ := filepath.Glob(filepath.Join(j.out, "logs", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if containsRace(b) {
			t.Errorf("%s reports a data race:\n%s", l, b)
		}
	}
}

func containsRace(b []byte) bool { return bytes.Contains(b, []byte("WARNING: DATA RACE")) }
