package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master"
	"elasticdl/model"
	"elasticdl/model/zoo"
)

// BenchmarkMasterScale (issue 13, part 4) runs a real master — its gRPC
// server on 127.0.0.1, its core, its shell — with 1,000 simulated workers
// and no control plane: the backend (scaleSimBackend) reports each instance
// Running as soon as it is launched. The workers run in a second process
// (this test binary again, TestMasterScaleClients), so that the master's
// process holds the master only, as in a job (the clients' allocations
// would otherwise drive the master's garbage collector). For each worker
// launched, that process runs a goroutine with the instance's ID and its
// own gRPC connection (as every real worker has its own) that speaks the
// worker protocol without computing:
// GetTask, the task's minibatches recorded on the in-process PS (a push
// without gradients, so that the master's end-of-training check finds them),
// ReportTaskResult with the task's record count, and Heartbeat every 2 s
// (a worker's default).
//
// Fashion-MNIST in tasks of 4 records, 3 epochs: 45,000 tasks. Phases:
//   - paced: each worker "computes" 0.5–1.5 s per task (uniform, mean 1 s:
//     ~1,000 tasks/s, ~2,000 RPC/s + 500 heartbeats/s), workers starting
//     over the first second, until 12 tasks per worker have been fetched;
//   - saturated: no think time, to the end.
//
// Reported (client side, per phase): get-task and report p50/p99/max in
// ms, and tasks reported per second. Asserted: the job succeeds, every
// epoch's records were trained exactly once (the summary's ledger: none
// twice, none missed), the summary's completed tasks are the job's tasks
// and no task was accepted twice from the clients' side.
//
// The clients' process shares the machine's cores with the master: on a
// 2-core VM their gRPC work is a good part of the CPU. The PS lives in the
// clients' process (the master reaches it over gRPC).
//
//	go test ./bench -run '^$' -bench MasterScale -benchtime 1x -v
//
// $ELASTICDL_BENCH_WORKERS overrides the number of workers. To profile the
// master (the clients are in another process: the profiles are the
// master's), add -cpuprofile, -mutexprofile, -blockprofile.
func BenchmarkMasterScale(b *testing.B) {
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		b.Skip("Fashion-MNIST not installed")
	}
	workers := 1000
	if s := os.Getenv("ELASTICDL_BENCH_WORKERS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("ELASTICDL_BENCH_WORKERS=%q", s)
		}
		workers = n
	}
	var res masterScaleResult
	for i := 0; i < b.N; i++ {
		res = runMasterScale(b, workers)
	}
	for ph, name := range []string{"paced", "saturated"} {
		r := res.phases[ph]
		b.ReportMetric(ms(pct(r.get, 0.50)), name+"-get-p50-ms")
		b.ReportMetric(ms(pct(r.get, 0.99)), name+"-get-p99-ms")
		b.ReportMetric(ms(pct(r.get, 1)), name+"-get-max-ms")
		b.ReportMetric(ms(pct(r.report, 0.50)), name+"-report-p50-ms")
		b.ReportMetric(ms(pct(r.report, 0.99)), name+"-report-p99-ms")
		b.ReportMetric(ms(pct(r.report, 1)), name+"-report-max-ms")
		b.ReportMetric(float64(r.tasks)/r.took.Seconds(), name+"-tasks/s")
		b.Logf("%s: %.1fs, %d tasks reported (%.0f/s); get-task (%d calls) p50 %.2f p99 %.2f max %.2f ms; report (%d calls) p50 %.2f p99 %.2f max %.2f ms; heartbeat (%d calls) p99 %.2f ms",
			name, r.took.Seconds(), r.tasks, float64(r.tasks)/r.took.Seconds(),
			len(r.get), ms(pct(r.get, 0.5)), ms(pct(r.get, 0.99)), ms(pct(r.get, 1)),
			len(r.report), ms(pct(r.report, 0.5)), ms(pct(r.report, 0.99)), ms(pct(r.report, 1)),
			len(r.heartbeat), ms(pct(r.heartbeat, 0.99)))
		secs := slices.Sorted(maps.Keys(r.slow))
		var line []string
		for _, sec := range secs {
			line = append(line, fmt.Sprintf("%ds:%d", sec, r.slow[sec]))
		}
		b.Logf("%s: calls over 5 ms by second since the workers' release: %s", name, strings.Join(line, " "))
	}
	b.ReportMetric(0, "ns/op")
}

const (
	msMinibatch   = 4
	msMinibatches = 1
	msEpochs      = 3
	msTasks       = msEpochs * 60000 / (msMinibatch * msMinibatches)
	msHeartbeat   = 2 * time.Second // a worker's default
	msPacedPerW   = 12              // tasks fetched per worker in the paced phase
)

type masterScalePhase struct {
	get, report, heartbeat []time.Duration
	// slow: when (since the paced phase began, in whole seconds) calls of
	// over 5 ms started.
	slow  map[int]int
	tasks int64
	took  time.Duration
}

type masterScaleResult struct {
	phases [2]masterScalePhase
}

// noteSlow counts a call that started at start and took took in its
// second of the run, when it took over 5 ms.
func (r *masterScalePhase) noteSlow(origin, start time.Time, took time.Duration) {
	if took <= 5*time.Millisecond {
		return
	}
	if r.slow == nil {
		r.slow = map[int]int{}
	}
	r.slow[int(start.Sub(origin)/time.Second)]++
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the q-quantile of d (sorted in place); q=1 is the max.
func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.5) - 1
	return d[max(0, min(i, len(d)-1))]
}

func runMasterScale(b *testing.B, workers int) masterScaleResult {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	be := &scaleSimBackend{events: make(chan cluster.Event, 4*workers+64), running: map[int]func(){}}
	clients := startMSClients(b, lis.Addr().String(), func(id, index int) { be.exited(cluster.Worker, id, index, false) })
	defer clients.cmd.Wait()
	defer clients.in.Close()
	select {
	case be.psAddr = <-clients.psAddr:
	case <-time.After(time.Minute):
		b.Fatal("the clients' process did not start its PS")
	}
	be.start = func(id, index int) func() {
		clients.send("start %d %d", id, index)
		return func() { clients.send("stop %d", id) }
	}

	cfg := master.DefaultConfig()
	cfg.JobName = "master-scale"
	cfg.ModelDef = "fashion_mnist.mlp"
	cfg.TrainingData = filepath.Join(dataDir, "train-images-idx3-ubyte.gz")
	cfg.MinibatchSize, cfg.NumMinibatchesPerTask = msMinibatch, msMinibatches
	cfg.NumEpochs = msEpochs
	cfg.NumWorkers, cfg.NumPS = workers, 1
	cfg.Output = b.TempDir()
	cfg.ProgressInterval = 0
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("ELASTICDL_BENCH_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	m, err := master.New(cfg, master.Deps{Backend: be, Registry: reg, Logger: logger, Listener: lis})
	if err != nil {
		b.Fatal(err)
	}
	type result struct {
		s   *master.Summary
		err error
	}
	runDone := make(chan result, 1)
	runStart := time.Now()
	go func() {
		s, err := m.Run(ctx)
		runDone <- result{s, err}
	}()
	// Every worker launched, then all released at once (each starts within
	// a second).
	for {
		be.mu.Lock()
		n := be.launched
		be.mu.Unlock()
		if n >= workers {
			break
		}
		select {
		case r := <-runDone:
			b.Fatalf("the job ended before its workers were launched: %v", r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	launched := time.Since(runStart)
	clients.send("release")
	r := <-runDone
	runEnd := time.Now()
	clients.send("end")
	cr, ok := <-clients.result
	if !ok {
		b.Fatal("the clients' process ended without a result")
	}
	if r.err != nil {
		b.Fatalf("job: %v", r.err)
	}
	s := r.s
	var res masterScaleResult
	for ph := range res.phases {
		o, c := &res.phases[ph], cr.Phases[ph]
		o.get, o.report, o.heartbeat, o.slow, o.tasks, o.took = c.Get, c.Report, c.Heartbeat, c.Slow, c.Tasks, c.Took
	}
	b.Logf("%d workers launched in %.2fs; run %.1fs; summary: status %s, tasks %+v, workers %+v",
		workers, launched.Seconds(), runEnd.Sub(runStart).Seconds(), s.Status, s.Tasks, s.Workers)

	// Exactly once.
	if s.Status != "succeeded" || len(s.Epochs) != msEpochs {
		b.Errorf("summary: status %q (%s), %d epochs, want succeeded and %d", s.Status, s.Error, len(s.Epochs), msEpochs)
	}
	for _, e := range s.Epochs {
		if e.Records != 60000 || e.RecordsTrained != e.Records || e.RecordsTrainedTwice != 0 || e.RecordsMissed != 0 {
			b.Errorf("epoch %d: %d records, %d trained, %d twice, %d missed; want 60000 exactly once",
				e.Epoch, e.Records, e.RecordsTrained, e.RecordsTrainedTwice, e.RecordsMissed)
		}
	}
	twice := 0
	for _, n := range cr.Reported {
		if n > 1 {
			twice++
		}
	}
	if s.Tasks.Completed != msTasks || len(cr.Reported) != msTasks || twice != 0 {
		b.Errorf("tasks: summary completed %d, clients saw %d distinct tasks accepted (%d more than once); want %d, once each",
			s.Tasks.Completed, len(cr.Reported), twice, msTasks)
	}
	if s.Workers.Launched != workers || s.Workers.Lost != 0 {
		b.Errorf("workers: %+v, want %d launched, none lost", s.Workers, workers)
	}
	if len(cr.Errs) > 0 {
		b.Errorf("client errors: %v", cr.Errs)
	}
	return res
}
