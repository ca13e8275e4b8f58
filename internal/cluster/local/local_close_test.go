package local

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

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
