package bench

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/master"
	"elasticdl/internal/proctest"
)

// BenchmarkAllReduceRecovery measures how fast an AllReduce job trains
// again after a worker is killed with SIGKILL, and how fast a new worker
// trains: a 3-worker fashion_mnist.cnn job; every 4 s one worker (another
// each time) is killed, 5 times; the master relaunches each. Reported,
// from the job's summary (ring.recoveries, ring.joins):
//
//   - recovery-median-s / recovery-max-s: from the kill to the survivors'
//     next committed step (issue 9 target: median <= 2 s; torchrun
//     restarts every worker: 8.8 s on this kind of machine);
//   - join-median-s / join-max-s: from a relaunched worker's process start
//     to its first committed step (target <= 2 s).
//
//	go test ./bench -run '^$' -bench AllReduceRecovery -benchtime 1x
func BenchmarkAllReduceRecovery(b *testing.B) {
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		b.Skip("Fashion-MNIST not installed")
	}
	bin := buildBinary(b, benchTags())
	var recoveries, joins []float64
	for i := 0; i < b.N; i++ {
		r, j := killDuringJob(b, bin, 5, 4*time.Second)
		recoveries, joins = append(recoveries, r...), append(joins, j...)
	}
	b.ReportMetric(median(recoveries), "recovery-median-s")
	b.ReportMetric(slices.Max(recoveries), "recovery-max-s")
	b.ReportMetric(median(joins), "join-median-s")
	b.ReportMetric(slices.Max(joins), "join-max-s")
	b.ReportMetric(0, "ns/op")
}

// killDuringJob runs the job, kills a worker kills times every interval,
// and returns each kill's time to the next committed step and each
// relaunched worker's time to its first committed step, in seconds.
func killDuringJob(b *testing.B, bin string, kills int, interval time.Duration) (recoveries, joins []float64) {
	b.Helper()
	out := b.TempDir()
	cmd := exec.Command(bin, "train", "--distribution_strategy=AllreduceStrategy", "--model_def=fashion_mnist.cnn",
		"--training_data="+filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
		"--num_workers=3", "--num_epochs=4", "--log_interval=0", "--output="+out)
	logs, err := os.Create(filepath.Join(out, "master.log"))
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
	time.Sleep(2 * interval) // started, ring formed, training
	var killed []time.Time
	for k := 0; k < kills; k++ {
		workers := proctest.Children(cmd.Process.Pid, "worker")
		if len(workers) == 0 {
			b.Fatalf("kill %d: no worker running", k)
		}
		slices.SortFunc(workers, func(x, y proctest.Instance) int { return workerID(x) - workerID(y) })
		victim := workers[k%len(workers)]
		killed = append(killed, time.Now())
		if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		time.Sleep(interval)
	}
	select {
	case err := <-done:
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(out, "master.log"))
			b.Fatalf("job: %v\n%s", err, log)
		}
	case <-time.After(10 * time.Minute):
		b.Fatal("job did not finish")
	}
	raw, err := os.ReadFile(filepath.Join(out, "job_summary.json"))
	if err != nil {
		b.Fatal(err)
	}
	var s master.Summary
	if err := json.Unmarshal(raw, &s); err != nil {
		b.Fatal(err)
	}
	if s.Ring == nil {
		b.Fatal("no ring in the summary")
	}
	for _, k := range killed {
		// The first change at or after the kill is its detection (the
		// process's exit, or a survivor reporting the broken ring).
		i := slices.IndexFunc(s.Ring.Recoveries, func(r master.RingRecovery) bool { return !r.At.Before(k.Add(-10 * time.Millisecond)) })
		if i < 0 {
			b.Fatalf("no recovery after the kill at %s: %+v", k, s.Ring.Recoveries)
		}
		r := s.Ring.Recoveries[i]
		recoveries = append(recoveries, r.At.Add(time.Duration(r.Seconds*float64(time.Second))).Sub(k).Seconds())
	}
	for _, j := range s.Ring.Joins {
		if j.Worker >= 3 { // relaunched: the first three started with the job
			joins = append(joins, j.Seconds)
		}
	}
	if len(joins) == 0 {
		b.Fatalf("no relaunched worker committed a step: %+v", s.Ring.Joins)
	}
	b.Logf("kill -> next committed step (s): %.2f; relaunched worker start -> first committed step (s): %.2f", recoveries, joins)
	return recoveries, joins
}

func workerID(in proctest.Instance) int {
	v, _ := in.Flag("worker_id")
	id, _ := strconv.Atoi(v)
	return id
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
