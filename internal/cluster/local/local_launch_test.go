package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

func TestNewRequiresLogDir(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without LogDir succeeded")
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

// A worker program (InstanceSpec.Command) is told where the elasticdl
// binary is: the SDK starts its ring helper from it.
func TestCommandKnowsBinary(t *testing.T) {
	b := newBackend(t, Config{})
	spec := cluster.InstanceSpec{
		Role: cluster.Worker, ID: 1,
		Command: []string{"/bin/sh", "-c", `echo "bin=$` + EnvBinary + `"`},
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
	if want := "bin=" + b.binary + "\n"; string(data) != want || b.binary == "" {
		t.Errorf("program printed %q, want %q", data, want)
	}
}
