package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/proctest"
)

// BenchmarkMasterFailover measures how fast a local job hands out work
// again after its master is killed with SIGKILL: a 12-epoch
// fashion_mnist.mlp job with 3 workers and 2 PS; every 3 s the master
// process is killed, 5 times; `elasticdl train` starts a new one, which
// resumes from OUTPUT/master/state.json and adopts the workers and PS.
// Reported, from the job's summary (failovers):
//
//   - resume-median-s / resume-max-s: from the kill to the new master
//     having resumed (process start, state loaded, instances adopted);
//
//   - first-task-median-s / first-task-max-s: from the kill to the first
//     task handed out by the new master (issue 10 target: <= 2 s).
//
//     go test ./bench -run '^$' -bench MasterFailover -benchtime 1x
func BenchmarkMasterFailover(b *testing.B) {
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		b.Skip("Fashion-MNIST not installed")
	}
	bin := buildBinary(b, benchTags())
	var resumed, firstTask []float64
	for i := 0; i < b.N; i++ {
		r, f := killMasterDuringJob(b, bin, 5, 3*time.Second)
		resumed, firstTask = append(resumed, r...), append(firstTask, f...)
	}
	b.ReportMetric(median(resumed), "resume-median-s")
	b.ReportMetric(slices.Max(resumed), "resume-max-s")
	b.ReportMetric(median(firstTask), "first-task-median-s")
	b.ReportMetric(slices.Max(firstTask), "first-task-max-s")
	b.ReportMetric(0, "ns/op")
}

func killMasterDuringJob(b *testing.B, bin string, kills int, interval time.Duration) (resumed, firstTask []float64) {
	b.Helper()
	out := b.TempDir()
	cmd := exec.Command(bin, "train", "--model_def=fashion_mnist.mlp",
		"--training_data="+filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
		"--num_workers=3", "--num_ps_pods=2", "--num_epochs=12", "--log_interval=0", "--output="+out)
	logs, err := os.Create(filepath.Join(out, "train.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logs.Close()
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	time.Sleep(interval)
	var killed []time.Time
	for k := 0; k < kills; k++ {
		masters := proctest.Children(cmd.Process.Pid, "master")
		if len(masters) != 1 {
			b.Fatalf("kill %d: %d masters running", k, len(masters))
		}
		killed = append(killed, time.Now())
		if err := syscall.Kill(masters[0].Pid, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		time.Sleep(interval)
	}
	select {
	case err := <-done:
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(out, "train.log"))
			b.Fatalf("job: %v\n%s", err, log)
		}
	case <-time.After(10 * time.Minute):
		b.Fatal("job did not finish")
	}
	s := readSummary(b, out)
	if len(s.Failovers) != kills {
		b.Fatalf("%d failovers in the summary, want %d: %+v", len(s.Failovers), kills, s.Failovers)
	}
	for i, k := range killed {
		f := s.Failovers[i]
		if f.FirstTaskAt == nil {
			b.Fatalf("failover %d handed out no task", i)
		}
		resumed = append(resumed, f.ResumedAt.Sub(k).Seconds())
		firstTask = append(firstTask, f.FirstTaskAt.Sub(k).Seconds())
	}
	b.Logf("kill -> resumed (s): %.3f; kill -> first task (s): %.3f", resumed, firstTask)
	return resumed, firstTask
}
