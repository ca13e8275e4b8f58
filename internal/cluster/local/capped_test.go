package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

// fakeInner is a backend whose instances run until stopped: Launch reports
// Running, Stop reports a requested exit, Close stops the rest. It records
// what it was asked and the most workers it ran at once.
type fakeInner struct {
	events *cluster.EventQueue

	mu         sync.Mutex
	running    map[instanceKey]cluster.InstanceSpec
	launched   []string // instance names, in launch order
	stopped    []string
	maxWorkers int
	failNext   error
	closed     bool
}

func newFakeInner() *fakeInner {
	return &fakeInner{events: cluster.NewEventQueue(), running: map[instanceKey]cluster.InstanceSpec{}}
}

func (f *fakeInner) Launch(_ context.Context, spec cluster.InstanceSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	key := instanceKey{spec.Role, spec.ID}
	if _, dup := f.running[key]; dup || f.closed {
		return fmt.Errorf("fake: bad launch of %s", spec.Name())
	}
	f.running[key] = spec
	f.launched = append(f.launched, spec.Name())
	f.maxWorkers = max(f.maxWorkers, f.workersLocked())
	f.events.Push(cluster.Event{Role: spec.Role, ID: spec.ID, Index: spec.Index, Phase: cluster.Running})
	return nil
}

func (f *fakeInner) workersLocked() int {
	n := 0
	for k := range f.running {
		if k.role == cluster.Worker {
			n++
		}
	}
	return n
}

// exit ends a running instance with reason; requested marks it as asked for.
func (f *fakeInner) exit(role cluster.Role, id int, reason cluster.ExitReason, requested bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	spec, ok := f.running[instanceKey{role, id}]
	if !ok {
		return fmt.Errorf("fake: %s: %w", cluster.InstanceName(role, id), ErrUnknownInstance)
	}
	delete(f.running, instanceKey{role, id})
	code := -1
	if reason == cluster.Completed {
		code = 0
	}
	f.events.Push(cluster.Event{Role: role, ID: id, Index: spec.Index, Phase: cluster.Exited,
		ExitCode: code, Reason: reason, Message: "fake " + reason.String(), Requested: requested})
	return nil
}

func (f *fakeInner) Stop(_ context.Context, role cluster.Role, id int) error {
	f.mu.Lock()
	f.stopped = append(f.stopped, cluster.InstanceName(role, id))
	f.mu.Unlock()
	return f.exit(role, id, cluster.Killed, true)
}

func (f *fakeInner) Events() <-chan cluster.Event { return f.events.Out() }

func (f *fakeInner) Existing(context.Context) ([]cluster.Event, error) { return nil, nil }

func (f *fakeInner) PSAddress(index int) (cluster.Endpoint, error) {
	a := fmt.Sprintf("ps-%d:1", index)
	return cluster.Endpoint{Listen: a, Dial: a}, nil
}

func (f *fakeInner) Close(context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	var keys []instanceKey
	for k := range f.running {
		keys = append(keys, k)
	}
	f.mu.Unlock()
	for _, k := range keys {
		_ = f.exit(k.role, k.id, cluster.Killed, true)
	}
	f.events.Close()
	return nil
}

func (f *fakeInner) state() (launched, stopped []string, workers, maxWorkers int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.launched), slices.Clone(f.stopped), f.workersLocked(), f.maxWorkers
}

// killingInner can also Kill, as Backend can: an exit that is not requested.
type killingInner struct{ *fakeInner }

func (k killingInner) Kill(role cluster.Role, id int) error {
	return k.exit(role, id, cluster.Killed, false)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newCapped wraps inner with room for workers; the test closes it and
// checks that its events end and its pump goroutine is gone.
func newCapped(t *testing.T, inner cluster.Backend, workers int) *Capped {
	t.Helper()
	c := NewCapped(inner, workers, testLogger(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), eventWait)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		drain(t, c)
		select {
		case <-c.pumped:
		default:
			t.Error("pump still running after Close")
		}
	})
	return c
}

// drain reads events until the channel closes (from any goroutine).
func drain(t *testing.T, c *Capped) []cluster.Event {
	var evs []cluster.Event
	timeout := time.After(eventWait)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				return evs
			}
			evs = append(evs, ev)
		case <-timeout:
			t.Error("Events not closed after Close")
			return evs
		}
	}
}

func cappedLaunch(t *testing.T, c *Capped, role cluster.Role, id int) cluster.InstanceSpec {
	t.Helper()
	spec := cluster.InstanceSpec{Role: role, ID: id, Index: id + 100}
	if err := c.Launch(context.Background(), spec); err != nil {
		t.Fatalf("Launch %s: %v", spec.Name(), err)
	}
	return spec
}

// next reads the next event and checks the instance and phase.
func next(t *testing.T, c *Capped, role cluster.Role, id int, phase cluster.Phase) cluster.Event {
	t.Helper()
	select {
	case ev, ok := <-c.Events():
		if !ok {
			t.Fatal("Events closed unexpectedly")
		}
		if ev.Role != role || ev.ID != id || ev.Phase != phase || ev.Index != id+100 {
			t.Fatalf("got %+v, want %s of %s", ev, phase, cluster.InstanceName(role, id))
		}
		return ev
	case <-time.After(eventWait):
		t.Fatalf("no event (want %s of %s)", phase, cluster.InstanceName(role, id))
	}
	panic("unreachable")
}

func wantLaunched(t *testing.T, f *fakeInner, want ...string) {
	t.Helper()
	if got, _, _, _ := f.state(); !slices.Equal(got, want) {
		t.Fatalf("inner launched %v, want %v", got, want)
	}
}

func TestCappedHoldsWorkersBeyondTheRoomNotPS(t *testing.T) {
	f := newFakeInner()
	c := newCapped(t, f, 2)
	cappedLaunch(t, c, cluster.PS, 0)
	next(t, c, cluster.PS, 0, cluster.Running)
	for id := range 2 {
		cappedLaunch(t, c, cluster.Worker, id)
		next(t, c, cluster.Worker, id, cluster.Running)
	}
	cappedLaunch(t, c, cluster.Worker, 2)
	if ev := next(t, c, cluster.Worker, 2, cluster.Pending); ev.Message == "" {
		t.Error("Pending without a reason")
	}
	cappedLaunch(t, c, cluster.PS, 1) // PS are never held
	next(t, c, cluster.PS, 1, cluster.Running)
	wantLaunched(t, f, "ps-0", "worker-0", "worker-1", "ps-1")
	if r, h := c.Counts(); r != 2 || h != 1 {
		t.Errorf("Counts = %d running, %d held; want 2, 1", r, h)
	}
	if err := c.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 2}); err == nil {
		t.Error("a second launch of a held ID was accepted")
	}
	if err := c.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 1}); err == nil {
		t.Error("a second launch of a running ID was accepted")
	}
	if ep, err := c.PSAddress(1); err != nil || ep.Dial != "ps-1:1" {
		t.Errorf("PSAddress(1) = %v, %v; want inner's", ep, err)
	}
}

func TestCappedExitFreesRoomForTheOldestHeld(t *testing.T) {
	f := newFakeInner()
	c := newCapped(t, f, 1)
	cappedLaunch(t, c, cluster.Worker, 0)
	next(t, c, cluster.Worker, 0, cluster.Running)
	for id := 1; id <= 2; id++ {
		cappedLaunch(t, c, cluster.Worker, id)
		next(t, c, cluster.Worker, id, cluster.Pending)
	}
	if err := f.exit(cluster.Worker, 0, cluster.Failed, false); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, c, cluster.Worker, 0, cluster.Exited); ev.Reason != cluster.Failed {
		t.Errorf("exit rewritten: %+v", ev)
	}
	next(t, c, cluster.Worker, 1, cluster.Running) // oldest first
	wantLaunched(t, f, "worker-0", "worker-1")
	if _, _, _, most := f.state(); most != 1 {
		t.Errorf("inner ran %d workers at once, room is 1", most)
	}
}

func TestCappedRaisingTheRoomStartsHeldOldestFirst(t *testing.T) {
	f := newFakeInner()
	c := newCapped(t, f, 0)
	for id := range 3 {
		cappedLaunch(t, c, cluster.Worker, id)
		next(t, c, cluster.Worker, id, cluster.Pending)
	}
	wantLaunched(t, f)
	c.SetCap(2)
	next(t, c, cluster.Worker, 0, cluster.Running)
	next(t, c, cluster.Worker, 1, cluster.Running)
	wantLaunched(t, f, "worker-0", "worker-1")
	c.SetCap(5)
	next(t, c, cluster.Worker, 2, cluster.Running)
	if r, h := c.Counts(); r != 3 || h != 0 || c.Cap() != 5 {
		t.Errorf("Counts = %d, %d, Cap %d; want 3, 0, 5", r, h, c.Cap())
	}
}

// preemptTest lowers the room from 3 to 1 over three running workers and
// checks that the two newest are preempted and their relaunches held.
func preemptTest(t *testing.T, f *fakeInner, inner cluster.Backend) {
	c := newCapped(t, inner, 3)
	for id := range 3 {
		cappedLaunch(t, c, cluster.Worker, id)
		next(t, c, cluster.Worker, id, cluster.Running)
	}
	c.SetCap(1)
	got := map[int]cluster.Event{}
	for range 2 {
		ev := <-c.Events()
		got[ev.ID] = ev
	}
	for _, id := range []int{1, 2} {
		ev := got[id]
		if ev.Phase != cluster.Exited || ev.Reason != cluster.Preempted || ev.Requested {
			t.Errorf("worker-%d: got %+v, want exited, preempted, not requested", id, ev)
		}
	}
	if _, _, workers, _ := f.state(); workers != 1 {
		t.Errorf("inner runs %d workers, want 1", workers)
	}
	// The master relaunches them: they wait.
	cappedLaunch(t, c, cluster.Worker, 3)
	next(t, c, cluster.Worker, 3, cluster.Pending)
	// Lowering it again to where it is preempts nothing.
	c.SetCap(1)
	if r, h := c.Counts(); r != 1 || h != 1 {
		t.Errorf("Counts = %d, %d; want 1, 1", r, h)
	}
	c.SetCap(2)
	next(t, c, cluster.Worker, 3, cluster.Running)
}

func TestCappedLoweringTheRoomPreemptsTheNewest(t *testing.T) {
	f := newFakeInner()
	preemptTest(t, f, killingInner{f})
	if _, stopped, _, _ := f.state(); len(stopped) != 0 {
		t.Errorf("Stop used on an inner that can Kill: %v", stopped)
	}
}

func TestCappedPreemptsWithStopWhenInnerCannotKill(t *testing.T) {
	f := newFakeInner()
	preemptTest(t, f, f)
	if _, stopped, _, _ := f.state(); !slices.Equal(stopped, []string{"worker-2", "worker-1"}) {
		t.Errorf("inner stopped %v, want the newest first", stopped)
	}
}

func TestCappedCompletedBeforeTheKillIsNotPreempted(t *testing.T) {
	f := newFakeInner()
	// An inner whose Kill finds the worker already gone, as Backend does
	// after the process exited but before its event was read.
	c := newCapped(t, f, 1)
	cappedLaunch(t, c, cluster.Worker, 0)
	next(t, c, cluster.Worker, 0, cluster.Running)
	c.mu.Lock()
	c.running[instanceKey{cluster.Worker, 0}].preempted = true
	c.mu.Unlock()
	if err := f.exit(cluster.Worker, 0, cluster.Completed, false); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, c, cluster.Worker, 0, cluster.Exited); ev.Reason != cluster.Completed {
		t.Errorf("got %+v, want completed", ev)
	}
}

func TestCappedStopOfAHeldLaunchDropsIt(t *testing.T) {
	f := newFakeInner()
	c := newCapped(t, f, 1)
	cappedLaunch(t, c, cluster.Worker, 0)
	next(t, c, cluster.Worker, 0, cluster.Running)
	cappedLaunch(t, c, cluster.Worker, 1)
	next(t, c, cluster.Worker, 1, cluster.Pending)
	if err := c.Stop(context.Background(), cluster.Worker, 1); err != nil {
		t.Fatal(err)
	}
	// As Kubernetes reports a pending pod deleted by the master: the
	// master forgets it and does not relaunch it.
	ev := next(t, c, cluster.Worker, 1, cluster.Exited)
	if ev.Reason != cluster.Deleted || !ev.Requested || ev.ExitCode != -1 {
		t.Errorf("got %+v, want deleted, requested, code -1", ev)
	}
	c.SetCap(3)
	if r, h := c.Counts(); r != 1 || h != 0 {
		t.Errorf("Counts = %d, %d; want 1, 0", r, h)
	}
	wantLaunched(t, f, "worker-0")
	if _, stopped, _, _ := f.state(); len(stopped) != 0 {
		t.Errorf("inner asked to stop %v", stopped)
	}
}

func TestCappedStoppedWorkerIsNotPreempted(t *testing.T) {
	f := newFakeInner()
	c := newCapped(t, killingInner{f}, 2)
	cappedLaunch(t, c, cluster.Worker, 0)
	next(t, c, cluster.Worker, 0, cluster.Running)
	cappedLaunch(t, c, cluster.Worker, 1)
	next(t, c, cluster.Worker, 1, cluster.Running)
	cappedLaunch(t, c, cluster.Worker, 2)
	next(t, c, cluster.Worker, 2, cluster.Pending)
	if err := c.Stop(context.Background(), cluster.Worker, 0); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, c, cluster.Worker, 0, cluster.Exited); !ev.Requested || ev.Reason != cluster.Killed {
		t.Errorf("got %+v, want the requested exit as inner reported it", ev)
	}
	next(t, c, cluster.Worker, 2, cluster.Running) // the freed room
	if err := c.Stop(context.Background(), cluster.Worker, 7); !errors.Is(err, ErrUnknownInstance) {
		t.Errorf("Stop of an unknown worker: %v, want inner's ErrUnknownInstance", err)
	}
}

func TestCappedHeldLaunchThatFailsToStartIsReportedFailed(t *testing.T) {
	f := newFakeInner()
	c := newCapped(t, f, 0)
	cappedLaunch(t, c, cluster.Worker, 0)
	next(t, c, cluster.Worker, 0, cluster.Pending)
	f.mu.Lock()
	f.failNext = errors.New("no such binary")
	f.mu.Unlock()
	c.SetCap(1)
	if ev := next(t, c, cluster.Worker, 0, cluster.Exited); ev.Reason != cluster.Failed || ev.Requested {
		t.Errorf("got %+v, want failed, not requested", ev)
	}
	if r, h := c.Counts(); r != 0 || h != 0 {
		t.Errorf("Counts = %d, %d; want 0, 0", r, h)
	}
}

func TestCappedCloseDropsHeldLaunches(t *testing.T) {
	f := newFakeInner()
	c := NewCapped(f, 1, testLogger(t))
	cappedLaunch(t, c, cluster.Worker, 0)
	cappedLaunch(t, c, cluster.Worker, 1)
	cappedLaunch(t, c, cluster.PS, 0)
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	exited := map[string]cluster.Event{}
	for _, ev := range drain(t, c) {
		if ev.Phase == cluster.Exited {
			exited[cluster.InstanceName(ev.Role, ev.ID)] = ev
		}
	}
	if ev := exited["worker-1"]; ev.Reason != cluster.Deleted || !ev.Requested {
		t.Errorf("held worker-1: %+v, want deleted, requested", ev)
	}
	if len(exited) != 3 {
		t.Errorf("exits %v, want one for each instance", exited)
	}
	if err := c.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 5}); !errors.Is(err, ErrClosed) {
		t.Errorf("Launch after Close: %v, want ErrClosed", err)
	}
	c.SetCap(4) // nothing to start, nothing to fail
	if err := c.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCappedConcurrent launches, stops, exits and changes the room from
// several goroutines (run with -race), then checks that the room holds
// once things settle and that every instance got exactly one exit.
func TestCappedConcurrent(t *testing.T) {
	f := newFakeInner()
	c := NewCapped(killingInner{f}, 2, testLogger(t))
	evs := make(chan []cluster.Event, 1)
	go func() { evs <- drain(t, c) }()
	const n = 40
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < n; i += 4 {
				_ = c.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: i})
				switch i % 3 {
				case 0:
					_ = c.Stop(context.Background(), cluster.Worker, i)
				case 1:
					_ = f.exit(cluster.Worker, i, cluster.Failed, false)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			c.SetCap(i % 4)
		}
	})
	wg.Wait()
	c.SetCap(2)
	deadline := time.Now().Add(eventWait)
	for {
		_, _, workers, _ := f.state()
		if r, _ := c.Counts(); workers <= 2 && r <= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inner runs %d workers, room is 2", workers)
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	exits := map[int]int{}
	for _, ev := range <-evs {
		if ev.Phase == cluster.Exited {
			exits[ev.ID]++
		}
	}
	for i := range n {
		if exits[i] != 1 {
			t.Errorf("worker-%d: %d exits, want 1", i, exits[i])
		}
	}
}

// TestCappedOnLocalBackend runs real child processes: a held worker has no
// process, raising the room starts it, lowering it kills the newest with
// SIGKILL and reports it preempted.
func TestCappedOnLocalBackend(t *testing.T) {
	b := newBackend(t, Config{})
	c := NewCapped(b, 1, testLogger(t))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), eventWait)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		drain(t, c)
	}()
	for id := 1; id <= 2; id++ {
		if err := c.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: id, Index: id + 100, Args: []string{"sleep"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Two sources, no order between them: inner's Running and the hold.
	phases := map[int]cluster.Phase{}
	for range 2 {
		ev := <-c.Events()
		phases[ev.ID] = ev.Phase
	}
	if phases[1] != cluster.Running || phases[2] != cluster.Pending {
		t.Fatalf("phases %v, want worker-1 running, worker-2 pending", phases)
	}
	if _, ok := c.Pid(cluster.Worker, 2); ok {
		t.Error("a held worker has a process")
	}
	c.SetCap(2)
	next(t, c, cluster.Worker, 2, cluster.Running)
	pid, ok := c.Pid(cluster.Worker, 2)
	if !ok {
		t.Fatal("no pid for the released worker")
	}
	c.SetCap(1)
	ev := next(t, c, cluster.Worker, 2, cluster.Exited)
	if ev.Reason != cluster.Preempted || ev.Requested || ev.ExitCode != -1 {
		t.Errorf("got %+v, want preempted, not requested, code -1", ev)
	}
	if !gone(pid) {
		t.Errorf("preempted worker's pid %d still there", pid)
	}
	if _, ok := c.Pid(cluster.Worker, 1); !ok {
		t.Error("the older worker was preempted too")
	}
}
