package bench

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"elasticdl/internal/proctest"
)

// BenchmarkMasterFailover measures how fast a local job hands out work
// again after its master is killed with SIGKILL: a 12-epoch
// fashion_mnist.mlp job with 3 workers and 2 PS; every 3 s the master
// process is killed, 5 times; `elasticdl train` starts a new one, which
// resumes from OUTPUT/master/state.json.{0,1} and adopts the workers and PS.
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
	killed, s := trainKilling(b, bin, []string{"--model_def=fashion_mnist.mlp", "--num_workers=3", "--num_ps_pods=2", "--num_epochs=12"},
		interval, interval, kills, func(train, k int) int {
			masters := proctest.Children(train, "master")
			if len(masters) != 1 {
				b.Fatalf("kill %d: %d masters running", k, len(masters))
			}
			return masters[0].Pid
		})
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
