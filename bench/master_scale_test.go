package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master"
	"elasticdl/internal/ps"
	"elasticdl/internal/ps/client"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/proto/masterpb"
	"elasticdl/proto/pserverpb"
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

// scaleSimBackend launches nothing: an instance is Running as soon as it is
// launched (a worker's goroutine starts), and Exited when stopped or when
// its goroutine ends (a worker told DONE exits).
type scaleSimBackend struct {
	psAddr string
	events chan cluster.Event
	// start runs a worker for a launched worker instance; it returns a
	// function that stops it.
	start func(id, index int) (stop func())

	mu       sync.Mutex
	running  map[int]func() // worker ID → stop
	closed   bool
	launched int
}

func (s *scaleSimBackend) Launch(_ context.Context, spec cluster.InstanceSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("backend closed")
	}
	s.events <- cluster.Event{Role: spec.Role, ID: spec.ID, Index: spec.Index, Phase: cluster.Running}
	if spec.Role == cluster.Worker {
		s.launched++
		s.running[spec.ID] = s.start(spec.ID, spec.Index)
	}
	return nil
}

// exited reports worker id gone (requested: Stop asked for it).
func (s *scaleSimBackend) exited(role cluster.Role, id, index int, requested bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if role == cluster.Worker {
		if _, ok := s.running[id]; !ok {
			return
		}
		delete(s.running, id)
	}
	reason := cluster.Completed
	if requested {
		reason = cluster.Killed
	}
	s.events <- cluster.Event{Role: role, ID: id, Index: index, Phase: cluster.Exited, Reason: reason, Requested: requested}
}

func (s *scaleSimBackend) Stop(_ context.Context, role cluster.Role, id int) error {
	s.mu.Lock()
	stop := s.running[id]
	s.mu.Unlock()
	if role == cluster.Worker && stop != nil {
		stop()
		s.exited(role, id, 0, true)
	}
	return nil
}

func (s *scaleSimBackend) Events() <-chan cluster.Event                      { return s.events }
func (s *scaleSimBackend) Existing(context.Context) ([]cluster.Event, error) { return nil, nil }
func (s *scaleSimBackend) PSAddress(int) (cluster.Endpoint, error) {
	return cluster.Endpoint{Listen: s.psAddr, Dial: s.psAddr}, nil
}

func (s *scaleSimBackend) Close(context.Context) error {
	s.mu.Lock()
	stops := s.running
	s.running, s.closed = nil, true
	s.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	close(s.events)
	return nil
}

// scaleSimWorkers are the simulated workers and what they measured.
type scaleSimWorkers struct {
	addr  string
	ps    *ps.Server
	phase atomic.Int32 // 0 paced, 1 saturated
	// saturated is closed when the saturated phase starts; paced workers
	// that used up the paced budget wait for it.
	saturated   chan struct{}
	pacedBudget int64
	fetched     atomic.Int64
	reportedN   [2]atomic.Int64
	release     chan struct{} // closed once every worker is launched
	lastReport  atomic.Int64  // unix ns of the last report accepted
	origin      time.Time     // when release was closed
	exited      func(id, index int)

	mu       sync.Mutex
	wg       sync.WaitGroup
	res      masterScaleResult
	reported map[int64]int
	errs     map[string]int
}

func (p *scaleSimWorkers) fail(what string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs[what+": "+status.Code(err).String()]++
}

// run is one worker: the loop of internal/worker without data or model.
func (p *scaleSimWorkers) run(ctx context.Context, id int32, index int, rng *rand.Rand) {
	defer p.wg.Done()
	var lat [2]masterScalePhase
	reported := map[int64]int{}
	done := false
	defer func() {
		p.mu.Lock()
		for ph := range lat {
			r := &p.res.phases[ph]
			r.get = append(r.get, lat[ph].get...)
			r.report = append(r.report, lat[ph].report...)
			r.heartbeat = append(r.heartbeat, lat[ph].heartbeat...)
			for sec, n := range lat[ph].slow {
				if r.slow == nil {
					r.slow = map[int]int{}
				}
				r.slow[sec] += n
			}
		}
		for t, n := range reported {
			p.reported[t] += n
		}
		p.mu.Unlock()
		if done {
			p.exited(int(id), index) // told DONE: the process exits
		}
	}()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.fail("dial", err)
		return
	}
	defer conn.Close()
	mc := masterpb.NewMasterClient(conn)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	select {
	case <-p.release:
	case <-ctx.Done():
		return
	}
	// Workers come up over a second, as processes do.
	if !sleep(time.Duration(rng.Int63n(int64(time.Second)))) {
		return
	}
	var hbMu sync.Mutex
	var hbLat [2][]time.Duration
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		tick := time.NewTicker(msHeartbeat)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ph := p.phase.Load()
			start := time.Now()
			resp, err := mc.Heartbeat(ctx, &masterpb.HeartbeatRequest{WorkerId: id})
			if err != nil {
				if ctx.Err() == nil {
					p.fail("heartbeat", err)
				}
				continue
			}
			hbMu.Lock()
			hbLat[ph] = append(hbLat[ph], time.Since(start))
			hbMu.Unlock()
			if resp.Stop {
				cancel()
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-hbDone
		for ph := range hbLat {
			lat[ph].heartbeat = hbLat[ph]
		}
	}()
	for ctx.Err() == nil {
		ph := p.phase.Load()
		if ph == 0 && p.fetched.Load() >= p.pacedBudget {
			select {
			case <-ctx.Done():
				return
			case <-p.saturated:
			}
			continue
		}
		start := time.Now()
		resp, err := mc.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: id})
		took := time.Since(start)
		if err != nil {
			if ctx.Err() != nil || status.Code(err) == codes.NotFound {
				return
			}
			p.fail("get task", err)
			if !sleep(100 * time.Millisecond) {
				return
			}
			continue
		}
		lat[ph].get = append(lat[ph].get, took)
		lat[ph].noteSlow(p.origin, start, took)
		switch resp.Action {
		case masterpb.GetTaskResponse_DONE:
			done = true
			return
		case masterpb.GetTaskResponse_WAIT:
			if !sleep(time.Duration(resp.WaitMs) * time.Millisecond) {
				return
			}
			continue
		}
		p.fetched.Add(1)
		if ph == 0 && !sleep(500*time.Millisecond+time.Duration(rng.Int63n(int64(time.Second)))) {
			return
		}
		t := resp.Task
		records := t.Shard.End - t.Shard.Start
		steps := (records + msMinibatch - 1) / msMinibatch
		for i := range int32(steps) {
			if _, err := p.ps.PushGradients(ctx, &pserverpb.PushGradientsRequest{WorkerId: id, Minibatch: &pserverpb.MinibatchKey{TaskId: t.Id, Index: i}}); err != nil {
				p.fail("record a minibatch on the PS", err)
			}
		}
		ph = p.phase.Load()
		start = time.Now()
		_, err = mc.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: id, TaskId: t.Id, Records: records, Steps: steps})
		took = time.Since(start)
		if err != nil {
			if ctx.Err() != nil || status.Code(err) == codes.NotFound {
				return
			}
			p.fail("report", err)
			continue
		}
		lat[ph].report = append(lat[ph].report, took)
		lat[ph].noteSlow(p.origin, start, took)
		reported[t.Id]++
		p.reportedN[ph].Add(1)
		p.lastReport.Store(time.Now().UnixNano())
	}
}

// The clients' process and the benchmark speak in lines: to the clients
// "start ID INDEX", "stop ID", "release" (every worker launched), "end"
// (the job is over); from them, prefixed with msLine, "ps ADDR" (where
// their PS serves), "exited ID INDEX" (a worker told DONE ends) and
// "result JSON" (msClientResult, after "end").
const (
	msLine       = "MSCALE "
	msClientsEnv = "ELASTICDL_MASTER_SCALE_CLIENTS" // the master's address
)

// msClientResult is what the clients measured.
type msClientResult struct {
	Phases [2]struct {
		Get, Report, Heartbeat []time.Duration
		Slow                   map[int]int
		Tasks                  int64
		Took                   time.Duration
	}
	Reported map[int64]int
	Errs     map[string]int
}

// TestMasterScaleClients is BenchmarkMasterScale's workers (and PS), in a
// process of their own; it does nothing unless the benchmark runs it.
func TestMasterScaleClients(t *testing.T) {
	addr := os.Getenv(msClientsEnv)
	if addr == "" {
		t.Skip("run by BenchmarkMasterScale")
	}
	if err := masterScaleClients(addr, os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

func masterScaleClients(addr string, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, msLine+format+"\n", args...)
	}
	// The PS, holding the model's initial parameters (the first worker
	// would push them): the master asks it what it holds and saves the
	// model from it.
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		return err
	}
	spec, err := reg.Lookup("fashion_mnist.mlp")
	if err != nil {
		return err
	}
	opt, err := optimizer.Parse(spec.Optimizer)
	if err != nil {
		return err
	}
	psSrv, err := ps.NewServer(ps.Config{Index: 0, NumPS: 1, Optimizer: opt})
	if err != nil {
		return err
	}
	defer psSrv.Close()
	psLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	psGRPC := grpc.NewServer()
	psSrv.Register(psGRPC)
	go psGRPC.Serve(psLis)
	defer psGRPC.Stop()
	pc, err := client.Dial(ctx, []string{psLis.Addr().String()})
	if err != nil {
		return err
	}
	if err := pc.PushModel(ctx, spec.Build(rand.New(rand.NewSource(1))).Params()); err != nil {
		return err
	}
	pc.Close()

	pool := &scaleSimWorkers{
		addr: addr, ps: psSrv, saturated: make(chan struct{}), release: make(chan struct{}),
		reported: map[int64]int{}, errs: map[string]int{},
	}
	pool.exited = func(id, index int) { say("exited %d %d", id, index) }
	stops := map[int]context.CancelFunc{}
	var seed int64
	say("ps %s", psLis.Addr())
	sc := bufio.NewScanner(in)
	var pacedStart, pacedEnd time.Time
	pacedDone := make(chan struct{})
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "start":
			id, _ := strconv.Atoi(f[1])
			index, _ := strconv.Atoi(f[2])
			wctx, stop := context.WithCancel(ctx)
			stops[id] = stop
			seed++
			pool.wg.Add(1)
			go pool.run(wctx, int32(id), index, rand.New(rand.NewSource(seed)))
		case "stop":
			id, _ := strconv.Atoi(f[1])
			if stop := stops[id]; stop != nil {
				stop()
			}
		case "release":
			pool.pacedBudget = int64(len(stops) * msPacedPerW)
			pacedStart = time.Now()
			pool.origin = pacedStart
			close(pool.release)
			go func() {
				// Paced until the budget is fetched and reported (or 5 s after).
				defer close(pacedDone)
				var budgetAt time.Time
				for {
					if pool.fetched.Load() >= pool.pacedBudget && budgetAt.IsZero() {
						budgetAt = time.Now()
					}
					if !budgetAt.IsZero() && (pool.reportedN[0].Load() >= pool.pacedBudget || time.Since(budgetAt) > 5*time.Second) {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				pacedEnd = time.Now()
				pool.phase.Store(1)
				close(pool.saturated)
			}()
		case "end":
			cancel()
			pool.wg.Wait()
			if pacedStart.IsZero() {
				return errors.New("ended before the workers were released")
			}
			<-pacedDone
			var res msClientResult
			for ph := range res.Phases {
				r, o := &pool.res.phases[ph], &res.Phases[ph]
				o.Get, o.Report, o.Heartbeat, o.Slow = r.get, r.report, r.heartbeat, r.slow
				o.Tasks = pool.reportedN[ph].Load()
			}
			res.Phases[0].Took = pacedEnd.Sub(pacedStart)
			res.Phases[1].Took = time.Unix(0, pool.lastReport.Load()).Sub(pacedEnd)
			res.Reported, res.Errs = pool.reported, pool.errs
			b, err := json.Marshal(res)
			if err != nil {
				return err
			}
			say("result %s", b)
			return nil
		}
	}
	return fmt.Errorf("the benchmark went away: %v", sc.Err())
}

// msClients is the clients' process, seen from the benchmark.
type msClients struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	in     io.WriteCloser
	psAddr chan string
	result chan msClientResult
	exited func(id, index int)
}

func (c *msClients) send(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.in, format+"\n", args...)
}

func startMSClients(b *testing.B, masterAddr string, exited func(id, index int)) *msClients {
	cmd := exec.Command(os.Args[0], "-test.run=^TestMasterScaleClients$", "-test.count=1")
	cmd.Env = append(os.Environ(), msClientsEnv+"="+masterAddr)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &msClients{cmd: cmd, in: in, psAddr: make(chan string, 1), result: make(chan msClientResult, 1), exited: exited}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<30)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), msLine)
			if !ok {
				continue
			}
			kind, rest, _ := strings.Cut(line, " ")
			switch kind {
			case "ps":
				c.psAddr <- rest
			case "exited":
				f := strings.Fields(rest)
				id, _ := strconv.Atoi(f[0])
				index, _ := strconv.Atoi(f[1])
				c.exited(id, index)
			case "result":
				var r msClientResult
				if err := json.Unmarshal([]byte(rest), &r); err != nil {
					b.Errorf("clients' result: %v", err)
				}
				c.result <- r
			}
		}
		close(c.result)
	}()
	return c
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
