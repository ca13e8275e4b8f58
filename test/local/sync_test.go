package local

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// syncArgs is the mlp job in sync SGD: 3 workers, one averaged update per
// 3 gradients, gradients at most 1 version stale.
func syncArgs(epochs string) []string {
	return []string{
		"--model_def=fashion_mnist.mlp",
		"--training_data=" + filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
		"--validation_data=" + filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"),
		"--num_workers=3", "--num_ps_pods=1", "--num_epochs=" + epochs,
		"--use_async=false", "--grads_to_wait=3", "--sync_version_tolerance=1",
	}
}

// TestSyncWorkerKilled runs sync SGD and kills a worker with SIGKILL in the
// middle of training: the master tells the PS there are fewer live workers
// (no version waits for the dead one), relaunches it, and the job finishes
// with every record trained exactly once per epoch and a good model.
func TestSyncWorkerKilled(t *testing.T) {
	skipLong(t)
	j := startJob(t, syncArgs("3")...)
	var workers []int
	waitFor(t, 2*time.Minute, "training progress", func() bool {
		_, done := j.epochRecordsDone()
		workers = j.children("worker")
		return done >= 20000 && len(workers) == 3
	})
	if err := syscall.Kill(workers[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s := j.succeeded(5 * time.Minute)
	assertExactlyOnce(t, s, 3, 60000)
	if s.Workers.Lost != 1 || s.Workers.Launched != 4 {
		t.Errorf("workers %+v, want 4 launched, 1 lost", s.Workers)
	}
	if s.Eval == nil {
		t.Fatal("no evaluation")
	}
	// 3 epochs of 938 minibatches, 3 gradients an update: about 938
	// versions (fewer gradients per update while a worker was missing, and
	// redone minibatches are pushed once accepted).
	if s.ModelVersion < 900 || s.ModelVersion > 1500 {
		t.Errorf("model version %d, want about 938 (one update per 3 gradients)", s.ModelVersion)
	}
	psLog, _ := os.ReadFile(filepath.Join(j.out, "logs", "ps-0.log"))
	if !regexp.MustCompile(`msg="live workers" ps=0 live=2 was=3`).Match(psLog) {
		t.Errorf("the PS was not told of the lost worker; its log:\n%s", tail(psLog, 3000))
	}
	t.Logf("sync mlp 3 epochs, 3 workers, one killed: accuracy %.4f, loss %.4f, version %d, %.0f records/s",
		s.Eval.Accuracy, s.Eval.Loss, s.ModelVersion, s.RecordsPerSecond)
	if s.Eval.Accuracy < 0.84 {
		t.Errorf("accuracy %.4f < 0.84", s.Eval.Accuracy)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strconv.Quote(string(b))
}
