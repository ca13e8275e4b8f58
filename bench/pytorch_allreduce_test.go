package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/master"
	"elasticdl/internal/proctest"
)

// ddpSteps is torchrun's timed steps: about what each worker of the
// 3-epoch ring job times (469 steps of 128 records an epoch), and at
// least 15 s of them on the 2-core VM.
const ddpSteps = 1400

// BenchmarkPyTorchAllReduce times the example's CNN trained by two
// processes, side by side in each iteration: torchrun with DDP over gloo
// (bench/torchrun_ddp.py), then a 2-worker AllReduce job of
// bench/pytorch_loop.py workers (the Go ring, through the SDK's ringd).
// Both take 64 records of a 128-record global batch a step, Adam, one
// thread, the first 20 steps untimed. Reported: rank 0's steps/s, the
// mean of the two workers' steps/s, and their ratio (target >= 0.95).
//
//	go test ./bench -run '^$' -bench 'PyTorchAllReduce$' -benchtime 1x -count 1
func BenchmarkPyTorchAllReduce(b *testing.B) {
	py, bin := pytorchSetup(b)
	var ddp, ring float64
	for i := 0; i < b.N; i++ {
		d := loopResults(b, torchrun(py, b.TempDir(), fmt.Sprintf("--steps=%d", ddpSteps)))
		out := b.TempDir()
		ws := loopResults(b, pytorchRingJob(bin, py, out, "--num_workers=2", "--num_epochs=3"))
		if len(ws) != 2 {
			b.Fatalf("%d workers reported, want 2: %+v", len(ws), ws)
		}
		var mean float64
		for _, w := range ws {
			mean += w.Steps / w.Seconds / float64(len(ws))
		}
		ddp, ring = ddp+d[0].Steps/d[0].Seconds, ring+mean
		s := readSummary(b, out)
		b.Logf("ddp: %.0f steps in %.1f s; ring workers: %s; %s", d[0].Steps, d[0].Seconds, workerRates(ws), allreduceCost(s))
	}
	b.ReportMetric(ddp/float64(b.N), "ddp-steps/s")
	b.ReportMetric(ring/float64(b.N), "ring-steps/s")
	b.ReportMetric(ring/ddp, "ring/ddp")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPyTorchAllReduceRecovery measures what a kill -9 costs, ours
// against torchrun's. Ours: a 3-worker AllReduce job of pytorch_loop.py
// workers (--min_workers=2); a worker is killed 5 times, each once the
// survivors and the last kill's replacement have trained 20 steps; then
// one is let go and one added (elasticdl scale). From the summary:
//
//   - ring-recovery-s: kill -> the survivors' next committed step
//     (ring.recoveries), median of the kills (target <= 2 s);
//
//   - newcomer-s: a newcomer's (each replacement, the added worker)
//     process start -> its first committed step (ring.joins), median
//     (target <= 3 s).
//
// torchrun-restart-s: torchrun_ddp.py under torchrun --max_restarts=5
// (its default --monitor_interval, 5 s); a rank is killed 5 times, each
// once the restarted group has trained 20 steps; kill -> the restarted
// group's first step, median.
//
//	go test ./bench -run '^$' -bench 'PyTorchAllReduceRecovery' -benchtime 1x -count 1
func BenchmarkPyTorchAllReduceRecovery(b *testing.B) {
	py, bin := pytorchSetup(b)
	const kills = 5
	var recoveries, joins, restarts []float64
	for i := 0; i < b.N; i++ {
		r, j := pytorchRingKills(b, bin, py, kills)
		recoveries, joins = append(recoveries, r...), append(joins, j...)
		restarts = append(restarts, torchrunKills(b, py, kills)...)
	}
	b.ReportMetric(median(recoveries), "ring-recovery-s")
	b.ReportMetric(slices.Max(recoveries), "ring-recovery-max-s")
	b.ReportMetric(median(restarts), "torchrun-restart-s")
	b.ReportMetric(median(joins), "newcomer-s")
	b.ReportMetric(slices.Max(joins), "newcomer-max-s")
	b.ReportMetric(0, "ns/op")
}

// torchrun is `torchrun --nproc_per_node=2 --standalone torchrun_ddp.py
// --model=cnn` with args, the ranks' output under logDir; an arg starting
// --max_restarts goes to torchrun, the others to the script.
func torchrun(py, logDir string, args ...string) *exec.Cmd {
	// torch 1.13 under Python 3.11 fails on --redirects and --tee of 0 (its
	// Std.from_str finds no zero flag member): a rank's stdout goes to its
	// file, its stderr to the file and the console.
	run := []string{"-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
		"--redirects=1", "--tee=2", "--log_dir=" + logDir}
	script := []string{"torchrun_ddp.py", "--model=cnn"}
	for _, a := range args {
		if strings.HasPrefix(a, "--max_restarts") {
			run = append(run, a)
		} else {
			script = append(script, a)
		}
	}
	return exec.Command(py, slices.Concat(run, script)...)
}

// pytorchRingJob is `elasticdl train` of an AllReduce job whose workers
// are pytorch_loop.py with the CNN, writing to out.
func pytorchRingJob(bin, py, out string, args ...string) *exec.Cmd {
	return exec.Command(bin, append([]string{"train", "--distribution_strategy=AllreduceStrategy",
		"--worker_command=" + py + " pytorch_loop.py --model=cnn", "--optimizer=adam:learning_rate=0.001",
		"--training_data=" + filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
		"--log_interval=0", "--output=" + out}, args...)...)
}

func workerRates(ws []loopResult) string {
	var parts []string
	for _, w := range ws {
		id := -1
		if w.Worker != nil {
			id = *w.Worker
		}
		parts = append(parts, fmt.Sprintf("worker %d %.0f steps in %.1f s (%.1f/s)", id, w.Steps, w.Seconds, w.Steps/w.Seconds))
	}
	return strings.Join(parts, ", ")
}

// allreduceCost is the summary's collective counters (every worker's,
// summed), per collective.
func allreduceCost(s master.Summary) string {
	if s.Ring == nil || s.Ring.Allreduce.Ops == 0 {
		return "no allreduce counters"
	}
	a := s.Ring.Allreduce
	return fmt.Sprintf("the workers' ringd helpers: %d collectives in all, %.2f ms busy and %.2f MB sent each",
		a.Ops, 1e3*a.Seconds/float64(a.Ops), float64(a.Bytes)/float64(a.Ops)/1e6)
}

// pytorchRingKills runs the recovery job (see
// BenchmarkPyTorchAllReduceRecovery) and returns each kill's time to the
// survivors' next committed step and each newcomer's time from process
// start to its first committed step, in seconds.
func pytorchRingKills(b *testing.B, bin, py string, kills int) (recoveries, joins []float64) {
	b.Helper()
	out := b.TempDir()
	steps := &stepLog{path: filepath.Join(out, "steps.txt")}
	cmd := pytorchRingJob(bin, py, out, "--num_workers=3", "--min_workers=2", "--num_epochs=6")
	cmd.Env = append(os.Environ(), "ELASTICDL_BENCH_STEPS="+steps.path)
	job := startProc(b, cmd, filepath.Join(out, "train.log"))
	start := time.Now()
	steps.await(b, job, "3 workers training", func() bool { return steps.trained(start, 0, 20) >= 3 })
	var killed []time.Time
	for k := 0; k < kills; k++ {
		pid := ringVictim(b, job, steps, k)
		at := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		killed = append(killed, at)
		steps.await(b, job, fmt.Sprintf("kill %d: the survivors and a replacement training", k+1),
			func() bool { return steps.trained(at, 0, 20) >= 3 })
	}
	scaleRing(b, bin, out, job, steps)
	job.wait(b, 6*time.Minute)
	s := readSummary(b, out)
	if s.Ring == nil {
		b.Fatal("no ring in the summary")
	}
	var entries []float64
	for _, k := range killed {
		r := recoveryAfter(b, s.Ring.Recoveries, k)
		recoveries = append(recoveries, r.At.Add(time.Duration(r.Seconds*float64(time.Second))).Sub(k).Seconds())
		entries = append(entries, r.Seconds)
	}
	for _, j := range s.Ring.Joins {
		if j.Worker >= 3 { // the first three started with the job
			joins = append(joins, j.Seconds)
		}
	}
	if len(joins) != kills+1 {
		b.Fatalf("joins %+v: want %d newcomers' (each replacement, the added worker)", s.Ring.Joins, kills+1)
	}
	b.Logf("kill -> next committed step (s): %.2f (ring.recoveries' own seconds, from the change's detection: %.2f); "+
		"newcomer start -> first committed step (s): %.2f", recoveries, entries, joins)
	return recoveries, joins
}

// ringVictim picks the k-th kill's worker: another each time, by worker id.
func ringVictim(b *testing.B, job *proc, steps *stepLog, k int) int {
	b.Helper()
	var pids []int
	for _, in := range proctest.Children(job.cmd.Process.Pid, "pytorch_loop.py") {
		pids = append(pids, in.Pid)
	}
	if len(pids) == 0 {
		b.Fatalf("kill %d: no worker running", k+1)
	}
	ids := steps.members()
	slices.SortFunc(pids, func(x, y int) int { return ids[x] - ids[y] })
	return pids[k%len(pids)]
}

// scaleRing lets one of the job's 3 workers go, then adds one, each once
// the ring has trained 20 steps after the change.
func scaleRing(b *testing.B, bin, out string, job *proc, steps *stepLog) {
	b.Helper()
	scale := func(n int) {
		if o, err := exec.Command(bin, "scale", "--output="+out, fmt.Sprintf("--workers=%d", n)).CombinedOutput(); err != nil {
			b.Fatalf("elasticdl scale --workers=%d: %v\n%s", n, err, o)
		}
	}
	scale(2)
	steps.await(b, job, "a worker let go", func() bool {
		return len(proctest.Children(job.cmd.Process.Pid, "pytorch_loop.py")) == 2
	})
	at := time.Now()
	steps.await(b, job, "2 workers training", func() bool { return steps.trained(at, 0, 20) >= 2 })
	at = time.Now()
	scale(3)
	steps.await(b, job, "an added worker training", func() bool { return steps.trained(at, 0, 20) >= 3 })
}

// recoveryAfter is the first membership change at or after a kill: its
// detection (the process's exit, or a survivor reporting the ring broken).
func recoveryAfter(b *testing.B, rs []master.RingRecovery, kill time.Time) master.RingRecovery {
	b.Helper()
	i := slices.IndexFunc(rs, func(r master.RingRecovery) bool { return !r.At.Before(kill.Add(-10 * time.Millisecond)) })
	if i < 0 {
		b.Fatalf("no recovery after the kill at %s: %+v", kill, rs)
	}
	if c := rs[i].Cause; !strings.Contains(c, "lost") && !strings.Contains(c, "broken") {
		b.Fatalf("the first change after the kill at %s is not the loss: %+v", kill, rs[i])
	}
	return rs[i]
}

// torchrunKills runs torchrun_ddp.py under torchrun --max_restarts=kills,
// kills -9 a rank kills times (rank 0, then 1, ...), each once the group
// has trained 20 steps, and returns each kill's time to the restarted
// group's first step, in seconds.
func torchrunKills(b *testing.B, py string, kills int) []float64 {
	b.Helper()
	dir := b.TempDir()
	steps := &stepLog{path: filepath.Join(dir, "steps.txt")}
	cmd := torchrun(py, dir, fmt.Sprintf("--max_restarts=%d", kills), "--steps=100000000")
	cmd.Env = append(os.Environ(), "ELASTICDL_BENCH_STEPS="+steps.path)
	p := startProc(b, cmd, filepath.Join(dir, "torchrun.log"))
	defer p.stop()
	steps.await(b, p, "2 ranks training", func() bool { return steps.trained(time.Time{}, 0, 20) >= 2 })
	var restarts []float64
	for k := 0; k < kills; k++ {
		restart := steps.lastRestart()
		pid := steps.rankPid(restart, k%2)
		if pid <= 0 {
			b.Fatalf("kill %d: no rank %d in restart %d", k+1, k%2, restart)
		}
		at := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		steps.await(b, p, fmt.Sprintf("kill %d: the restarted group training", k+1),
			func() bool { return steps.trained(at, restart+1, 20) >= 2 })
		restarts = append(restarts, steps.firstOf(restart+1).Sub(at).Seconds())
	}
	b.Logf("torchrun: kill -> restarted group's first step (s): %.2f", restarts)
	return restarts
}

// proc is a started command whose output goes to a file.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startProc starts cmd in its own process group, its output to log; the
// benchmark's cleanup stops it.
func startProc(b *testing.B, cmd *exec.Cmd, log string) *proc {
	b.Helper()
	f, err := os.Create(log)
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		b.Fatal(err)
	}
	p := &proc{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	b.Cleanup(p.stop)
	return p
}

// stop ends p if it runs: SIGTERM (torchrun stops its ranks, elasticdl
// its job), then SIGKILL to its process group.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// wait waits for p to succeed.
func (p *proc) wait(b *testing.B, timeout time.Duration) {
	b.Helper()
	select {
	case <-p.done:
		if p.err != nil {
			b.Fatalf("%s: %v\n%s", p.cmd.Args[0], p.err, p.tail())
		}
	case <-time.After(timeout):
		b.Fatalf("%s did not end within %s\n%s", p.cmd.Args[0], timeout, p.tail())
	}
}

// tail is the end of p's output.
func (p *proc) tail() string {
	out, _ := os.ReadFile(p.log)
	return string(out[max(0, len(out)-4000):])
}

// stepEvent is one line of $ELASTICDL_BENCH_STEPS: a step a process
// applied (pytorch_loop.py, torchrun_ddp.py).
type stepEvent struct {
	at                          time.Time
	pid, restart, member, index int
}

// stepLog reads a step file as it grows.
type stepLog struct {
	path   string
	off    int64
	rest   []byte // a line not yet complete
	events []stepEvent
}

func (l *stepLog) poll() {
	f, err := os.Open(l.path)
	if err != nil {
		return // nothing written yet
	}
	defer f.Close()
	if _, err := f.Seek(l.off, io.SeekStart); err != nil {
		return
	}
	data, _ := io.ReadAll(f)
	l.off += int64(len(data))
	buf := append(l.rest, data...)
	end := bytes.LastIndexByte(buf, '\n')
	if end < 0 {
		l.rest = buf
		return
	}
	for _, line := range strings.Split(string(buf[:end]), "\n") {
		var e stepEvent
		var ts float64
		if n, _ := fmt.Sscanf(line, "%f %d %d %d %d", &ts, &e.pid, &e.restart, &e.member, &e.index); n == 5 {
			e.at = time.Unix(0, int64(ts*1e9))
			l.events = append(l.events, e)
		}
	}
	l.rest = slices.Clone(buf[end+1:])
}

// await polls the file until ok, failing b if p ends first or after two
// minutes.
func (l *stepLog) await(b *testing.B, p *proc, what string, ok func() bool) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l.poll()
		if ok() {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within 2 minutes\n%s", what, p.tail())
		}
		select {
		case <-p.done:
			b.Fatalf("%s: %s ended first (%v)\n%s", what, p.cmd.Args[0], p.err, p.tail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// trained counts the processes that applied at least steps steps since a
// moment, in restart (torchrun's count) or a later one.
func (l *stepLog) trained(since time.Time, restart, steps int) int {
	per := map[int]int{}
	for _, e := range l.events {
		if !e.at.Before(since) && e.restart >= restart {
			per[e.pid]++
		}
	}
	n := 0
	for _, c := range per {
		if c >= steps {
			n++
		}
	}
	return n
}

// members maps each process to its worker id (rank under torchrun).
func (l *stepLog) members() map[int]int {
	ids := map[int]int{}
	for _, e := range l.events {
		ids[e.pid] = e.member
	}
	return ids
}

func (l *stepLog) lastRestart() int {
	r := 0
	for _, e := range l.events {
		r = max(r, e.restart)
	}
	return r
}

// rankPid is the process of rank in restart.
func (l *stepLog) rankPid(restart, rank int) int {
	for _, e := range slices.Backward(l.events) {
		if e.restart == restart && e.member == rank {
			return e.pid
		}
	}
	return -1
}

// firstOf is when restart's first step was applied.
func (l *stepLog) firstOf(restart int) time.Time {
	var first time.Time
	for _, e := range l.events {
		if e.restart == restart && (first.IsZero() || e.at.Before(first)) {
			first = e.at
		}
	}
	return first
}
