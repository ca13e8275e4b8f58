package local

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

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
