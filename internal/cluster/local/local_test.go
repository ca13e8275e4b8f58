package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
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
