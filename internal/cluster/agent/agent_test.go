package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

// fakeBackend records calls; the test pushes its events.
type fakeBackend struct {
	mu       sync.Mutex
	launched []cluster.InstanceSpec
	stopped  []int
	closed   bool
	events   *cluster.EventQueue
}

func (f *fakeBackend) Launch(_ context.Context, s cluster.InstanceSpec) error {
	if s.ID < 0 {
		return errors.New("no room for it")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.launched = append(f.launched, s)
	return nil
}

func (f *fakeBackend) Stop(_ context.Context, _ cluster.Role, id int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, id)
	return nil
}

func (f *fakeBackend) Events() <-chan cluster.Event                      { return f.events.Out() }
func (f *fakeBackend) Existing(context.Context) ([]cluster.Event, error) { return nil, nil }
func (f *fakeBackend) PSAddress(i int) (cluster.Endpoint, error) {
	return cluster.Endpoint{Listen: fmt.Sprintf(":%d", 7000+i), Dial: fmt.Sprintf("h:%d", 7000+i)}, nil
}

func (f *fakeBackend) Close(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		f.events.Close()
	}
	return nil
}

func serve(t *testing.T) (*fakeBackend, string) {
	t.Helper()
	be := &fakeBackend{events: cluster.NewEventQueue()}
	addr := fmt.Sprintf("@elasticdl-agent-test-%d", time.Now().UnixNano())
	lis, err := net.Listen("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(lis, be, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { s.Shutdown(); be.Close(context.Background()) })
	return be, addr
}

func dial(t *testing.T, addr string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func next(t *testing.T, c *Client) cluster.Event {
	t.Helper()
	select {
	case ev, ok := <-c.Events():
		if !ok {
			t.Fatal("events closed")
		}
		return ev
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("no event")
	}
	return cluster.Event{}
}

func TestCallsReachTheBackend(t *testing.T) {
	be, addr := serve(t)
	c := dial(t, addr)
	defer c.Detach()
	ctx := context.Background()
	spec := cluster.InstanceSpec{Role: cluster.Worker, ID: 3, Index: 1, Args: []string{"--a=1"}, Env: []string{"K=V"}, Command: []string{"python3", "train.py"}}
	if err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := c.Launch(ctx, cluster.InstanceSpec{Role: cluster.Worker, ID: -1}); err == nil || err.Error() != "no room for it" {
		t.Errorf("a refused launch: %v, want the backend's error", err)
	}
	if err := c.Stop(ctx, cluster.Worker, 3); err != nil {
		t.Fatal(err)
	}
	ep, err := c.PSAddress(2)
	if err != nil || ep != (cluster.Endpoint{Listen: ":7002", Dial: "h:7002"}) {
		t.Errorf("PSAddress(2) = %+v, %v", ep, err)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if len(be.launched) != 1 || !slices.Equal(be.launched[0].Args, spec.Args) || be.launched[0].Index != 1 || !slices.Equal(be.launched[0].Env, spec.Env) || !slices.Equal(be.launched[0].Command, spec.Command) {
		t.Errorf("launched %+v", be.launched)
	}
	if !slices.Equal(be.stopped, []int{3}) {
		t.Errorf("stopped %v", be.stopped)
	}
}

// TestANewMasterSeesEveryInstance is the point of the agent: whatever the
// first master read of its stream before it died, the next one learns
// each instance's latest state, then what happens after.
func TestANewMasterSeesEveryInstance(t *testing.T) {
	be, addr := serve(t)
	first := dial(t, addr)
	be.events.Push(cluster.Event{Role: cluster.PS, ID: 0, Phase: cluster.Running})
	be.events.Push(cluster.Event{Role: cluster.Worker, ID: 1, Phase: cluster.Running})
	be.events.Push(cluster.Event{Role: cluster.Worker, ID: 2, Phase: cluster.Running})
	next(t, first) // the first master read one event and died
	be.events.Push(cluster.Event{Role: cluster.Worker, ID: 2, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed, Message: "killed"})
	time.Sleep(100 * time.Millisecond) // the agent took it in
	second := dial(t, addr)
	defer second.Detach()
	got, _ := second.Existing(context.Background())
	want := []cluster.Event{
		{Role: cluster.PS, ID: 0, Phase: cluster.Running},
		{Role: cluster.Worker, ID: 1, Phase: cluster.Running},
		{Role: cluster.Worker, ID: 2, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed, Message: "killed"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("existing %+v\nwant %+v", got, want)
	}
	// One master at a time: the first one's stream ends.
	for range first.Events() {
	}
	be.events.Push(cluster.Event{Role: cluster.Worker, ID: 3, Phase: cluster.Pending})
	if ev := next(t, second); ev.ID != 3 || ev.Phase != cluster.Pending {
		t.Fatalf("next event %+v", ev)
	}
	first.Detach()
}

func TestCloseStopsTheBackendAndEndsEvents(t *testing.T) {
	be, addr := serve(t)
	c := dial(t, addr)
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	be.mu.Lock()
	closed := be.closed
	be.mu.Unlock()
	if !closed {
		t.Error("backend not closed")
	}
	for range c.Events() { // closes
	}
}

func TestDialNoAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, "@elasticdl-agent-test-nobody", nil); err == nil {
		t.Fatal("dialed an agent that does not exist")
	}
}
