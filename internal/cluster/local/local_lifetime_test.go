package local

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

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

	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for !gone(child) {
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("grandchild %d outlived its master", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
