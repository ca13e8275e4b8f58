// Package local holds integration tests that run whole elasticdl jobs on
// the local backend: real processes, real Fashion-MNIST, real faults.
package local

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/master"
	"elasticdl/internal/proctest"
)

const dataDir = "/usr/share/datasets/fashion-mnist"

var binary string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "elasticdl-it")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "elasticdl")
	tags := strings.TrimSpace(runOut("../../hack/blas-tags.sh"))
	build := exec.Command("go", "build", "-tags", tags, "-o", binary, "elasticdl/cmd/elasticdl")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build elasticdl:", err)
		return 1
	}
	return m.Run()
}

func runOut(name string, args ...string) string {
	out, _ := exec.Command(name, args...).Output()
	return string(out)
}

func needData(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
}

// job is one `elasticdl train` process under test.
type job struct {
	t   *testing.T
	cmd *exec.Cmd
	out string
	// remoteOut, when set, is the job's --output on object storage (out
	// is then its --work_dir): the summary is read from there.
	remoteOut string
	stdout    bytes.Buffer
	stderr    *lockedBuffer
	done      chan error
}

func startJob(t *testing.T, args ...string) *job {
	t.Helper()
	return startCmd(t, "train", args...)
}

// startCommand starts elasticdl args as a job whose output directory is
// out (empty: none).
func startCommand(t *testing.T, out string, args []string) *job {
	t.Helper()
	j := &job{t: t, out: out, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	j.cmd = exec.Command(binary, args...)
	j.cmd.Stdout = &j.stdout
	j.cmd.Stderr = j.stderr
	if err := j.cmd.Start(); err != nil {
		t.Fatalf("start elasticdl %s: %v", args[0], err)
	}
	go func() { j.done <- j.cmd.Wait() }()
	t.Cleanup(func() {
		if j.cmd.ProcessState == nil {
			j.cmd.Process.Kill()
			<-j.done
		}
		if t.Failed() {
			j.dumpLogs()
		}
	})
	return j
}

// dumpLogs logs the end of every process's log of a job whose test failed
// (the output directory goes with the test).
func (j *job) dumpLogs() {
	if j.out == "" {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(j.out, "logs", "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		j.t.Logf("---- %s (last 25 lines)\n%s", filepath.Base(l), strings.Join(lines[max(0, len(lines)-25):], "\n"))
	}
}

// wait waits for the job to exit and returns its exit code.
func (j *job) wait(limit time.Duration) int {
	j.t.Helper()
	select {
	case <-j.done:
	case <-time.After(limit):
		j.cmd.Process.Signal(syscall.SIGQUIT)
		j.t.Fatalf("job did not finish within %s\nstderr:\n%s", limit, j.stderr.String())
	}
	return j.cmd.ProcessState.ExitCode()
}

// succeeded waits for the job to exit 0 with a succeeded summary, and
// returns the summary.
func (j *job) succeeded(limit time.Duration) master.Summary {
	j.t.Helper()
	if code := j.wait(limit); code != 0 {
		j.t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	s := j.summary()
	if s.Status != "succeeded" {
		j.t.Fatalf("status %q: %s", s.Status, s.Error)
	}
	return s
}

func (j *job) summary() master.Summary {
	j.t.Helper()
	if j.remoteOut != "" {
		s, err := master.ReadSummary(j.remoteOut)
		if err != nil {
			j.t.Fatalf("read job summary: %v\nstderr:\n%s", err, j.stderr.String())
		}
		return *s
	}
	b, err := os.ReadFile(filepath.Join(j.out, "job_summary.json"))
	if err != nil {
		j.t.Fatalf("read job summary: %v\nstderr:\n%s", err, j.stderr.String())
	}
	var s master.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		j.t.Fatalf("decode job summary: %v", err)
	}
	return s
}

// children lists the PIDs of the job's processes of a role ("worker", "ps").
func (j *job) children(role string) []int {
	var pids []int
	for _, in := range proctest.Children(j.cmd.Process.Pid, role) {
		pids = append(pids, in.Pid)
	}
	return pids
}

func parentOf(pid int) int { return proctest.ParentOf(pid) }

// killWorkers kills (SIGKILL) kills workers one after another, each once
// the job's current epoch has trained another every records with two
// workers alive (workers lists their PIDs), never the same process twice.
func (j *job) killWorkers(kills int, every int64, workers func() []int) {
	t := j.t
	t.Helper()
	var killed []int
	for kill := 0; kill < kills; kill++ {
		var victim int
		waitFor(t, 3*time.Minute, "training progress and two live workers", func() bool {
			_, done := j.epochRecordsDone()
			w := workers()
			if done < every*int64(kill+1) || len(w) != 2 {
				return false
			}
			for _, pid := range w {
				if !contains(killed, pid) {
					victim = pid
					return true
				}
			}
			return false
		})
		if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
			t.Fatalf("kill worker %d: %v", victim, err)
		}
		killed = append(killed, victim)
		t.Logf("killed worker pid %d", victim)
	}
}

// killPS kills (SIGKILL) the job's PS once the current epoch has trained
// done records.
func (j *job) killPS(done int64) {
	t := j.t
	t.Helper()
	var ps []int
	waitFor(t, 2*time.Minute, "training progress", func() bool {
		_, d := j.epochRecordsDone()
		ps = j.children("ps")
		return d >= done && len(ps) == 1
	})
	if err := syscall.Kill(ps[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds or the limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// trainedRecords reads the latest progress line's records count.
func (j *job) epochRecordsDone() (epoch string, done int64) {
	sc := bufio.NewScanner(strings.NewReader(j.stderr.String()))
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "msg=progress") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "epoch="); ok {
				epoch = v
			}
			if v, ok := strings.CutPrefix(f, "records="); ok {
				n, _, _ := strings.Cut(v, "/")
				done, _ = strconv.ParseInt(n, 10, 64)
			}
		}
	}
	return epoch, done
}

// recordsDone is the training progress over every epoch, from the latest
// progress line.
func (j *job) recordsDone() int64 {
	var done int64
	sc := bufio.NewScanner(strings.NewReader(j.stderr.String()))
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, "msg=progress") {
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "records_done="); ok {
					done, _ = strconv.ParseInt(v, 10, 64)
				}
			}
		}
	}
	return done
}

func assertExactlyOnce(t *testing.T, s master.Summary, epochs int, records int64) {
	t.Helper()
	if len(s.Epochs) != epochs {
		t.Fatalf("summary has %d epochs, want %d: %+v", len(s.Epochs), epochs, s.Epochs)
	}
	for _, e := range s.Epochs {
		if e.Records != records || e.RecordsTrained != records || e.RecordsTrainedTwice != 0 || e.RecordsMissed != 0 {
			t.Errorf("epoch %d not exactly once: %+v", e.Epoch, e)
		}
	}
}

func noOrphans(t *testing.T, pids []int) {
	t.Helper()
	waitFor(t, 10*time.Second, "job processes to be gone", func() bool {
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil && parentOf(pid) > 1 {
				return false
			}
			if syscall.Kill(pid, 0) == nil && !isZombie(pid) {
				return false
			}
		}
		return true
	})
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	return len(f) > 0 && f[0] == "Z"
}
