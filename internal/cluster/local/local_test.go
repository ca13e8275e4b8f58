package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

// fakeEnv, when set, makes the test binary act as an instance instead of
// running tests: `<test binary> <role> <mode> <args...>`.
const fakeEnv = "ELASTICDL_LOCAL_TEST_FAKE"

// eventWait bounds every wait for an event; generous because the machine
// is shared and the children are race-instrumented binaries.
const eventWait = 20 * time.Second

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "1" {
		os.Exit(fakeInstance(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeInstance is what a launched instance runs; args are role, mode and
// the mode's arguments.
func fakeInstance(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "fake instance: want <role> <mode> [args]")
		return 2
	}
	role, mode, rest := args[0], args[1], args[2:]
	switch mode {
	case "exit": // exit CODE [LINE...]: print the lines, exit with CODE
		code, err := strconv.Atoi(rest[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		for _, l := range rest[1:] {
			fmt.Println(l)
		}
		return code
	case "args": // print role and arguments, one per line, and a stderr line
		fmt.Println("role=" + role)
		for _, a := range rest {
			fmt.Println("arg=" + a)
		}
		fmt.Fprintln(os.Stderr, "to stderr")
		return 0
	case "env": // env KEY...: print KEY=value for each
		for _, k := range rest {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
		return 0
	case "pgid":
		fmt.Printf("pid=%d pgid=%d\n", os.Getpid(), syscall.Getpgrp())
		return 0
	case "sleep": // until a signal's default action ends it
		fmt.Println("ready")
		sleepForever()
	case "trap": // exit 0 on SIGTERM
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		<-c
		fmt.Println("got SIGTERM")
		return 0
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		sleepForever()
	case "master": // master LOGDIR: launch a sleeping worker, print its pid
		return fakeMaster(rest[0])
	}
	fmt.Fprintln(os.Stderr, "fake instance: unknown mode", mode)
	return 2
}

func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

func fakeMaster(logDir string) int {
	b, err := New(Config{LogDir: logDir, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	spec := cluster.InstanceSpec{Role: cluster.Worker, ID: 1, Args: []string{"sleep"}}
	if err := b.Launch(context.Background(), spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pid, _ := b.Pid(cluster.Worker, 1)
	fmt.Printf("PID %d\n", pid)
	sleepForever()
	return 0
}

// newBackend returns a Backend running the test binary as its instances,
// closed when the test ends.
func newBackend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Binary = exe
	}
	if cfg.LogDir == "" {
		cfg.LogDir = t.TempDir()
	}
	// GORACE: a race-instrumented child otherwise lingers a second at exit.
	cfg.Env = append([]string{fakeEnv + "=1", "GORACE=atexit_sleep_ms=0"}, cfg.Env...)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), eventWait)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		// Let the event pump finish.
		timeout := time.After(eventWait)
		for {
			select {
			case _, ok := <-b.Events():
				if !ok {
					return
				}
			case <-timeout:
				t.Error("Events not closed after Close")
				return
			}
		}
	})
	return b
}

func launch(t *testing.T, b *Backend, role cluster.Role, id int, args ...string) cluster.InstanceSpec {
	t.Helper()
	spec := cluster.InstanceSpec{Role: role, ID: id, Index: id + 100, Args: args}
	if err := b.Launch(context.Background(), spec); err != nil {
		t.Fatalf("Launch %s: %v", spec.Name(), err)
	}
	return spec
}

func nextEvent(t *testing.T, b *Backend) cluster.Event {
	t.Helper()
	select {
	case ev, ok := <-b.Events():
		if !ok {
			t.Fatal("Events closed unexpectedly")
		}
		return ev
	case <-time.After(eventWait):
		t.Fatal("no event")
	}
	panic("unreachable")
}

// expectRunning and expectExited read the next event and check that it is
// the given phase of spec's instance.
func expectRunning(t *testing.T, b *Backend, spec cluster.InstanceSpec) {
	t.Helper()
	ev := nextEvent(t, b)
	want := cluster.Event{Role: spec.Role, ID: spec.ID, Index: spec.Index, Phase: cluster.Running}
	if ev != want {
		t.Fatalf("got %+v, want %+v", ev, want)
	}
}

func expectExited(t *testing.T, b *Backend, spec cluster.InstanceSpec) cluster.Event {
	t.Helper()
	ev := nextEvent(t, b)
	if ev.Role != spec.Role || ev.ID != spec.ID || ev.Index != spec.Index || ev.Phase != cluster.Exited {
		t.Fatalf("got %+v, want Exited of %s (index %d)", ev, spec.Name(), spec.Index)
	}
	return ev
}

func logPath(b *Backend, role cluster.Role, id int) string {
	return filepath.Join(b.logDir, cluster.InstanceName(role, id)+".log")
}

// waitLog waits until the instance's log contains s (e.g. "ready": the
// fake has installed its signal handling).
func waitLog(t *testing.T, b *Backend, role cluster.Role, id int, s string) {
	t.Helper()
	path := logPath(b, role, id)
	deadline := time.Now().Add(eventWait)
	for time.Now().Before(deadline) {
		if data, _ := os.ReadFile(path); strings.Contains(string(data), s) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never contained %q", path, s)
}

// gone reports whether pid no longer runs: no such process, or a zombie
// that its (new) parent has not reaped yet.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// Format: pid (comm) state ...; comm may contain spaces and parens.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestExitZeroIsCompleted(t *testing.T) {
	b := newBackend(t, Config{})
	spec := launch(t, b, cluster.Worker, 1, "exit", "0")
	expectRunning(t, b, spec)
	ev := expectExited(t, b, spec)
	if ev.Reason != cluster.Completed || ev.ExitCode != 0 || ev.Requested || ev.Message != "" {
		t.Errorf("got %+v, want completed, code 0, not requested, no message", ev)
	}
	if _, ok := b.Pid(cluster.Worker, 1); ok {
		t.Error("Pid of an exited instance reported ok")
	}
	if err := b.Stop(context.Background(), cluster.Worker, 1); err != nil {
		t.Errorf("Stop after exit: %v", err)
	}
}

func TestNonZeroExitIsFailedWithLogTail(t *testing.T) {
	b := newBackend(t, Config{})
	spec := launch(t, b, cluster.PS, 2, "exit", "3", "starting", "", "boom: bad shard", "  ")
	expectRunning(t, b, spec)
	ev := expectExited(t, b, spec)
	if ev.Reason != cluster.Failed || ev.ExitCode != 3 || ev.Requested {
		t.Errorf("got %+v, want failed, code 3, not requested", ev)
	}
	if want := "starting\nboom: bad shard"; ev.Message != want {
		t.Errorf("Message = %q, want %q", ev.Message, want)
	}
}

func TestFailedWithEmptyLog(t *testing.T) {
	b := newBackend(t, Config{})
	spec := launch(t, b, cluster.Worker, 1, "exit", "4")
	expectRunning(t, b, spec)
	ev := expectExited(t, b, spec)
	if ev.Reason != cluster.Failed || ev.ExitCode != 4 || !strings.Contains(ev.Message, "exit status 4") {
		t.Errorf("got %+v, want failed, code 4, message naming the status", ev)
	}
}

func TestKillFromOutsideIsKilled(t *testing.T) {
	b := newBackend(t, Config{})
	spec := launch(t, b, cluster.Worker, 1, "sleep")
	expectRunning(t, b, spec)
	pid, ok := b.Pid(cluster.Worker, 1)
	if !ok {
		t.Fatal("no pid for a running instance")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ev := expectExited(t, b, spec)
	if ev.Reason != cluster.Killed || ev.ExitCode != -1 || ev.Requested || ev.Message != "killed by signal: killed" {
		t.Errorf("got %+v, want killed, code -1, not requested, message about SIGKILL", ev)
	}
	if !gone(pid) {
		t.Errorf("pid %d still there", pid)
	}
}

func TestStopIsRequested(t *testing.T) {
	b := newBackend(t, Config{})
	spec := launch(t, b, cluster.Worker, 1, "sleep")
	expectRunning(t, b, spec)
	if err := b.Stop(context.Background(), cluster.Worker, 1); err != nil {
		t.Fatal(err)
	}
	ev := expectExited(t, b, spec)
	if !ev.Requested || ev.Reason != cluster.Killed || ev.Message != "killed by signal: terminated" {
		t.Errorf("got %+v, want requested, killed by SIGTERM", ev)
	}
	if err := b.Stop(context.Background(), cluster.Worker, 1); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestStopGracefulExitIsCompletedAndRequested(t *testing.T) {
	b := newBackend(t, Config{})
	spec := launch(t, b, cluster.Worker, 1, "trap")
	expectRunning(t, b, spec)
	waitLog(t, b, cluster.Worker, 1, "ready")
	if err := b.Stop(context.Background(), cluster.Worker, 1); err != nil {
		t.Fatal(err)
	}
	ev := expectExited(t, b, spec)
	if !ev.Requested || ev.Reason != cluster.Completed || ev.ExitCode != 0 {
		t.Errorf("got %+v, want requested and completed", ev)
	}
	waitLog(t, b, cluster.Worker, 1, "got SIGTERM")
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	const grace = 300 * time.Millisecond
	b := newBackend(t, Config{GracePeriod: grace})
	spec := launch(t, b, cluster.Worker, 1, "ignoreterm")
	expectRunning(t, b, spec)
	waitLog(t, b, cluster.Worker, 1, "ready")
	start := time.Now()
	if err := b.Stop(context.Background(), cluster.Worker, 1); err != nil {
		t.Fatal(err)
	}
	ev := expectExited(t, b, spec)
	if elapsed := time.Since(start); elapsed < grace {
		t.Errorf("killed after %v, before the %v grace period", elapsed, grace)
	}
	if !ev.Requested || ev.Reason != cluster.Killed || ev.ExitCode != -1 || ev.Message != "killed by signal: killed" {
		t.Errorf("got %+v, want requested, killed by SIGKILL", ev)
	}
}

func TestStopUnknownInstance(t *testing.T) {
	b := newBackend(t, Config{})
	err := b.Stop(context.Background(), cluster.Worker, 42)
	if !errors.Is(err, ErrUnknownInstance) || !strings.Contains(err.Error(), "worker-42") {
		t.Errorf("Stop unknown = %v, want ErrUnknownInstance naming worker-42", err)
	}
}

func TestLaunchMissingBinary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-binary")
	b := newBackend(t, Config{Binary: missing})
	err := b.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 1})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Launch = %v, want an error naming %s", err, missing)
	}
	if _, ok := b.Pid(cluster.Worker, 1); ok {
		t.Error("failed launch has a pid")
	}
	if err := b.Stop(context.Background(), cluster.Worker, 1); !errors.Is(err, ErrUnknownInstance) {
		t.Errorf("Stop after failed launch = %v, want ErrUnknownInstance", err)
	}
	select {
	case ev := <-b.Events():
		t.Errorf("failed launch emitted %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestLaunchDuplicateID(t *testing.T) {
	b := newBackend(t, Config{})
	spec := launch(t, b, cluster.Worker, 1, "exit", "0")
	if err := b.Launch(context.Background(), spec); err == nil {
		t.Error("second Launch of worker-1 succeeded")
	}
	// A PS with the same ID is a different instance.
	launch(t, b, cluster.PS, 1, "exit", "0")
}

func TestLaunchCanceledContext(t *testing.T) {
	b := newBackend(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := b.Launch(ctx, cluster.InstanceSpec{Role: cluster.Worker, ID: 1, Args: []string{"sleep"}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Launch with canceled ctx = %v, want context.Canceled", err)
	}
}

func TestLogFileHasOutputAndArgs(t *testing.T) {
	b := newBackend(t, Config{})
	spec := launch(t, b, cluster.PS, 5, "args", "--ps_id=0", "two words")
	expectRunning(t, b, spec)
	if ev := expectExited(t, b, spec); ev.Reason != cluster.Completed {
		t.Fatalf("got %+v", ev)
	}
	data, err := os.ReadFile(filepath.Join(b.logDir, "ps-5.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"role=ps\n", "arg=--ps_id=0\n", "arg=two words\n", "to stderr\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("log %q lacks %q", data, want)
		}
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("LOCAL_TEST_INHERITED", "from-master")
	b := newBackend(t, Config{Env: []string{"LOCAL_TEST_A=cfg", "LOCAL_TEST_B=cfg"}})
	spec := cluster.InstanceSpec{
		Role: cluster.Worker, ID: 1,
		Args: []string{"env", "LOCAL_TEST_INHERITED", "LOCAL_TEST_A", "LOCAL_TEST_B", "LOCAL_TEST_C"},
		Env:  []string{"LOCAL_TEST_B=spec", "LOCAL_TEST_C=spec"},
	}
	if err := b.Launch(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	expectRunning(t, b, spec)
	expectExited(t, b, spec)
	data, err := os.ReadFile(logPath(b, cluster.Worker, 1))
	if err != nil {
		t.Fatal(err)
	}
	want := "LOCAL_TEST_INHERITED=from-master\nLOCAL_TEST_A=cfg\nLOCAL_TEST_B=spec\nLOCAL_TEST_C=spec\n"
	if string(data) != want {
		t.Errorf("child saw\n%s\nwant\n%s", data, want)
	}
}

func TestOwnProcessGroup(t *testing.T) {
	b := newBackend(t, Config{})
	spec := launch(t, b, cluster.Worker, 1, "pgid")
	expectRunning(t, b, spec)
	expectExited(t, b, spec)
	data, err := os.ReadFile(logPath(b, cluster.Worker, 1))
	if err != nil {
		t.Fatal(err)
	}
	var pid, pgid int
	if _, err := fmt.Sscanf(string(data), "pid=%d pgid=%d", &pid, &pgid); err != nil {
		t.Fatalf("log %q: %v", data, err)
	}
	if pgid != pid || pgid == syscall.Getpgrp() {
		t.Errorf("child pid %d in group %d (test's group %d), want a group of its own", pid, pgid, syscall.Getpgrp())
	}
}

func TestPSAddress(t *testing.T) {
	b := newBackend(t, Config{})
	seen := map[string]int{}
	for i := range 8 {
		ep, err := b.PSAddress(i)
		if err != nil {
			t.Fatal(err)
		}
		if ep.Listen != ep.Dial {
			t.Errorf("PSAddress(%d) = %+v: a local PS listens where it is dialled", i, ep)
		}
		addr := ep.Dial
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("PSAddress(%d) = %q, want 127.0.0.1:<port>", i, addr)
		}
		if j, dup := seen[addr]; dup {
			t.Errorf("PSAddress(%d) = PSAddress(%d) = %s", i, j, addr)
		}
		seen[addr] = i
	}
	for addr, i := range seen {
		if again, _ := b.PSAddress(i); again.Dial != addr {
			t.Errorf("PSAddress(%d) changed from %s to %s", i, addr, again)
		}
	}
	if _, err := b.PSAddress(-1); err == nil {
		t.Error("PSAddress(-1) succeeded")
	}
}

func TestEventsInOrderPerInstance(t *testing.T) {
	b := newBackend(t, Config{})
	const n = 12
	for i := range n {
		// Some exit at once, some fail, so exits interleave with launches.
		code := strconv.Itoa(i % 2)
		launch(t, b, cluster.Worker, i, "exit", code)
	}
	phases := map[int][]cluster.Phase{}
	for range 2 * n {
		ev := nextEvent(t, b)
		phases[ev.ID] = append(phases[ev.ID], ev.Phase)
	}
	for i := range n {
		if got := phases[i]; len(got) != 2 || got[0] != cluster.Running || got[1] != cluster.Exited {
			t.Errorf("worker-%d: phases %v, want [running exited]", i, got)
		}
	}
}

func TestNoConsumerDoesNotBlockReaping(t *testing.T) {
	b := newBackend(t, Config{})
	const n = 30
	for i := range n {
		launch(t, b, cluster.Worker, i, "exit", "0")
	}
	// Nobody reads Events, yet every instance is reaped.
	deadline := time.Now().Add(eventWait)
	for i := 0; i < n; {
		if _, ok := b.Pid(cluster.Worker, i); !ok {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker-%d not reaped while nobody reads events", i)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	count := 0
	for range b.Events() {
		count++
	}
	if count != 2*n {
		t.Errorf("got %d events after Close, want %d", count, 2*n)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	b := newBackend(t, Config{GracePeriod: 300 * time.Millisecond})
	modes := []string{"sleep", "sleep", "trap", "ignoreterm"}
	pids := map[int]int{}
	for i, mode := range modes {
		launch(t, b, cluster.Worker, i, mode)
		waitLog(t, b, cluster.Worker, i, "ready")
		pid, ok := b.Pid(cluster.Worker, i)
		if !ok {
			t.Fatalf("worker-%d has no pid", i)
		}
		pids[i] = pid
	}
	done := launch(t, b, cluster.PS, 0, "exit", "0")
	// Let the PS exit on its own first: Close must not report it as stopped.
	deadline := time.Now().Add(eventWait)
	for {
		if _, ok := b.Pid(done.Role, done.ID); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ps-0 did not exit")
		}
		time.Sleep(10 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("worker-%d (pid %d) after Close: kill 0 = %v, want ESRCH", i, pid, err)
		}
	}
	exited := map[instanceKey]cluster.Event{}
	timeout := time.After(eventWait)
	for open := true; open; {
		select {
		case ev, ok := <-b.Events():
			if !ok {
				open = false
				break
			}
			if ev.Phase == cluster.Exited {
				exited[instanceKey{ev.Role, ev.ID}] = ev
			}
		case <-timeout:
			t.Fatal("Events not closed after Close")
		}
	}
	for i, mode := range modes {
		ev, ok := exited[instanceKey{cluster.Worker, i}]
		if !ok {
			t.Errorf("worker-%d (%s): no Exited event", i, mode)
			continue
		}
		if !ev.Requested {
			t.Errorf("worker-%d (%s): %+v, want Requested", i, mode, ev)
		}
	}
	if ev := exited[instanceKey{cluster.PS, 0}]; ev.Requested || ev.Reason != cluster.Completed {
		t.Errorf("ps-0 exited on its own before Close: got %+v", ev)
	}

	err := b.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 99, Args: []string{"sleep"}})
	if !errors.Is(err, ErrClosed) {
		t.Errorf("Launch after Close = %v, want ErrClosed", err)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestCloseContextDoneKills(t *testing.T) {
	b := newBackend(t, Config{GracePeriod: time.Hour})
	spec := launch(t, b, cluster.Worker, 1, "ignoreterm")
	waitLog(t, b, cluster.Worker, 1, "ready")
	pid, _ := b.Pid(cluster.Worker, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > eventWait/2 {
		t.Errorf("Close took %v despite its context", elapsed)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d after Close: kill 0 = %v, want ESRCH", pid, err)
	}
	expectRunning(t, b, spec)
	if ev := expectExited(t, b, spec); !ev.Requested || ev.Message != "killed by signal: killed" {
		t.Errorf("got %+v, want requested, killed by SIGKILL", ev)
	}
}

// A child must not die because the OS thread that happened to fork it went
// away: Pdeathsig follows the thread, not the process.
func TestChildSurvivesForkingThreadExit(t *testing.T) {
	b := newBackend(t, Config{})
	// A goroutine that exits while locked to its thread terminates the
	// thread, except the main thread, which the runtime parks for good
	// instead. Launching from a few such goroutines in turn therefore
	// ends at least two threads that the launches ran on.
	const n = 3
	for i := range n {
		spec := cluster.InstanceSpec{Role: cluster.Worker, ID: i, Args: []string{"sleep"}}
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			errc <- b.Launch(context.Background(), spec)
		}()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		expectRunning(t, b, spec)
	}
	select {
	case ev := <-b.Events():
		t.Fatalf("child died with the launching thread: %+v", ev)
	case <-time.After(time.Second):
	}
	for i := range n {
		if _, ok := b.Pid(cluster.Worker, i); !ok {
			t.Errorf("worker-%d gone", i)
		}
	}
}

// Killing the master outright (kill -9) must take its instances along.
func TestChildDiesWithMaster(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	master := exec.Command(exe, "master", "master", t.TempDir())
	master.Env = append(os.Environ(), fakeEnv+"=1", "GORACE=atexit_sleep_ms=0")
	master.Stderr = t.Output()
	out, err := master.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := master.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		master.Process.Kill()
		master.Wait()
	})

	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the fake master's output: %v", err)
	}
	var child int
	if _, err := fmt.Sscanf(line, "PID %d", &child); err != nil || child <= 0 {
		t.Fatalf("fake master said %q: %v", line, err)
	}
	if gone(child) {
		t.Fatalf("grandchild %d not running before the master was killed", child)
	}
	if err := master.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	master.Wait()

	deadline := time.Now().Add(5 * time.Second)
	for !gone(child) {
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("grandchild %d outlived its master", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := strings.Repeat("x", tailBytes)
	for _, tc := range []struct{ name, content, want string }{
		{"empty", "", ""},
		{"blank", "\n  \n\t\n", ""},
		{"one", "boom", "boom"},
		{"last three", "a\nb\n\n c \nd\n\n", "b\nc\nd"},
		{"cut first line", long + "\nend\n", "end"},
		{"only a cut line", "yy" + long, long},
	} {
		if got := logTail(write(tc.name, tc.content)); got != tc.want {
			t.Errorf("%s: logTail = %.40q, want %.40q", tc.name, got, tc.want)
		}
	}
	if got := logTail(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("missing file: logTail = %q", got)
	}
}

func TestNewRequiresLogDir(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without LogDir succeeded")
	}
}

// Launches racing with Close either fail with ErrClosed or yield an
// instance that Close stops and reaps like any other.
func TestLaunchRacingClose(t *testing.T) {
	b := newBackend(t, Config{GracePeriod: 300 * time.Millisecond})
	// Each goroutine launches until Close makes Launch fail.
	const goroutines = 3
	type result struct {
		launched int
		err      error
	}
	results := make(chan result, goroutines)
	for g := range goroutines {
		go func() {
			var r result
			for k := 0; ; k++ {
				spec := cluster.InstanceSpec{Role: cluster.Worker, ID: g*1000 + k, Args: []string{"sleep"}}
				if r.err = b.Launch(context.Background(), spec); r.err != nil {
					break
				}
				r.launched++
			}
			results <- r
		}()
	}
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	launched := 0
	for range goroutines {
		r := <-results
		launched += r.launched
		if !errors.Is(r.err, ErrClosed) {
			t.Errorf("Launch during Close = %v, want ErrClosed", r.err)
		}
	}
	if launched == 0 {
		t.Fatal("no launch succeeded before Close; the test proves nothing")
	}
	t.Logf("%d launches before Close", launched)
	running, exited := 0, 0
	for ev := range b.Events() {
		switch ev.Phase {
		case cluster.Running:
			running++
		case cluster.Exited:
			exited++
			if !ev.Requested {
				t.Errorf("%s ended by itself during Close: %+v", cluster.InstanceName(ev.Role, ev.ID), ev)
			}
		}
	}
	if running != launched || exited != launched {
		t.Errorf("%d launches succeeded, but %d Running and %d Exited events", launched, running, exited)
	}
}

func TestKillIsNotRequested(t *testing.T) {
	b := newBackend(t, Config{})
	spec := launch(t, b, cluster.Worker, 1, "trap") // SIGTERM would end it with 0
	expectRunning(t, b, spec)
	waitLog(t, b, cluster.Worker, 1, "ready")
	pid, _ := b.Pid(cluster.Worker, 1)
	if err := b.Kill(cluster.Worker, 1); err != nil {
		t.Fatal(err)
	}
	ev := expectExited(t, b, spec)
	if ev.Requested || ev.Reason != cluster.Killed || ev.Message != "killed by signal: killed" {
		t.Errorf("got %+v, want killed by SIGKILL, not requested", ev)
	}
	if !gone(pid) {
		t.Errorf("pid %d still there", pid)
	}
	if err := b.Kill(cluster.Worker, 1); err != nil {
		t.Errorf("Kill after exit: %v", err)
	}
	if err := b.Kill(cluster.Worker, 9); !errors.Is(err, ErrUnknownInstance) {
		t.Errorf("Kill of an unknown instance: %v, want ErrUnknownInstance", err)
	}
}
