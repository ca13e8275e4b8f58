package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

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
