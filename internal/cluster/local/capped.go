package local

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"elasticdl/internal/cluster"
)

// Capped wraps a backend so that it behaves like a shared cluster with
// room for only so many workers: the elastic situations of a Kubernetes
// job (pods left pending for lack of room, pods preempted by
// higher-priority work, room coming back) can then be rehearsed on one
// machine. PS instances are not capped: a job cannot run without them.
//
// A worker launched beyond the room is held, and reported Pending, as an
// unschedulable pod would be; it starts, oldest first, when a worker exits
// or SetCap raises the room. Lowering the room kills the newest running
// workers at once and reports them Preempted, so the master relaunches them
// and the relaunches wait as pending.
type Capped struct {
	inner  cluster.Backend
	log    *slog.Logger
	events *cluster.EventQueue
	// ctx bounds the starts of held launches, which outlive the Launch call
	// that asked for them; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	pumped chan struct{} // closed when inner's events are all passed on

	mu      sync.Mutex
	room    int
	held    []cluster.InstanceSpec        // oldest first
	running map[instanceKey]*cappedWorker // launched on inner, exit not seen yet
	seq     uint64                        // launch order on inner
	closed  bool
}

// cappedWorker is a worker that occupies room until its exit is seen.
type cappedWorker struct {
	seq       uint64 // the highest is the newest, preempted first
	stopping  bool   // the master asked it to stop: not preempted too
	preempted bool   // killed to make room: its exit is reported Preempted
	room      int    // the room that preempted it, for the message
}

// killer ends an instance at once, without it counting as a requested
// stop; Backend has it. An inner without it is preempted with Stop.
type killer interface {
	Kill(role cluster.Role, id int) error
}

var _ cluster.Backend = (*Capped)(nil)

// NewCapped wraps inner so that at most workers worker instances run at once
// (PS instances are not capped). Capped owns inner from then on: Close it
// instead of inner.
func NewCapped(inner cluster.Backend, workers int, logger *slog.Logger) *Capped {
	if logger == nil {
		logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Capped{
		inner:   inner,
		log:     logger.With("backend", "capped"),
		events:  cluster.NewEventQueue(),
		ctx:     ctx,
		cancel:  cancel,
		pumped:  make(chan struct{}),
		room:    max(workers, 0),
		running: map[instanceKey]*cappedWorker{},
	}
	go c.pump()
	return c
}

// Launch launches spec on inner, unless it is a worker and the room is
// full: then it holds the launch, reports the instance Pending and returns
// nil; the instance starts when room is made.
func (c *Capped) Launch(ctx context.Context, spec cluster.InstanceSpec) error {
	if spec.Role != cluster.Worker {
		return c.inner.Launch(ctx, spec)
	}
	key := instanceKey{spec.Role, spec.ID}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return fmt.Errorf("capped: launch %s: %w", spec.Name(), ErrClosed)
	case c.running[key] != nil || c.heldIndex(key) >= 0:
		return fmt.Errorf("capped: launch %s: already launched (IDs are unique per launch)", spec.Name())
	case len(c.running) < c.room:
		// Under the lock, so that no other launch can take the same room.
		return c.startLocked(ctx, spec)
	}
	c.held = append(c.held, spec)
	msg := fmt.Sprintf("no room: %d of %d workers running", len(c.running), c.room)
	c.log.Info("worker held", "instance", spec.Name(), "why", msg, "held", len(c.held))
	c.events.Push(cluster.Event{Role: spec.Role, ID: spec.ID, Index: spec.Index, Phase: cluster.Pending, Message: msg})
	return nil
}

// startLocked launches a worker on inner and counts it against the room.
func (c *Capped) startLocked(ctx context.Context, spec cluster.InstanceSpec) error {
	key := instanceKey{spec.Role, spec.ID}
	c.seq++
	c.running[key] = &cappedWorker{seq: c.seq}
	if err := c.inner.Launch(ctx, spec); err != nil {
		delete(c.running, key)
		return fmt.Errorf("capped: launch %s: %w", spec.Name(), err)
	}
	return nil
}

func (c *Capped) heldIndex(key instanceKey) int {
	return slices.IndexFunc(c.held, func(s cluster.InstanceSpec) bool { return s.Role == key.role && s.ID == key.id })
}

// releaseLocked starts held launches, oldest first, while there is room. A
// start that fails is reported as the instance failing: its Launch already
// returned nil.
func (c *Capped) releaseLocked() {
	for !c.closed && len(c.held) > 0 && len(c.running) < c.room {
		spec := c.held[0]
		c.held = slices.Delete(c.held, 0, 1)
		c.log.Info("worker released", "instance", spec.Name(), "running", len(c.running)+1, "room", c.room)
		if err := c.startLocked(c.ctx, spec); err != nil {
			c.log.Warn("held worker failed to start", "instance", spec.Name(), "err", err)
			c.events.Push(cluster.Event{Role: spec.Role, ID: spec.ID, Index: spec.Index, Phase: cluster.Exited,
				ExitCode: -1, Reason: cluster.Failed, Message: err.Error()})
		}
	}
}

// Stop stops an instance on inner. A held launch is dropped instead and
// reported as Kubernetes reports a pending pod that is deleted: Exited,
// Reason Deleted, Requested.
func (c *Capped) Stop(ctx context.Context, role cluster.Role, id int) error {
	if role == cluster.Worker {
		key := instanceKey{role, id}
		c.mu.Lock()
		if i := c.heldIndex(key); i >= 0 {
			spec := c.held[i]
			c.held = slices.Delete(c.held, i, i+1)
			c.mu.Unlock()
			c.log.Info("held worker dropped", "instance", spec.Name())
			c.events.Push(droppedEvent(spec, "pending launch stopped before it ran"))
			return nil
		}
		if w := c.running[key]; w != nil {
			w.stopping = true
		}
		c.mu.Unlock()
	}
	return c.inner.Stop(ctx, role, id)
}

func droppedEvent(spec cluster.InstanceSpec, why string) cluster.Event {
	return cluster.Event{Role: spec.Role, ID: spec.ID, Index: spec.Index, Phase: cluster.Exited,
		ExitCode: -1, Reason: cluster.Deleted, Message: why, Requested: true}
}

// SetCap changes the room: raising it starts held launches (oldest first);
// lowering it preempts the newest running workers (killed at once,
// reported to the master with Reason Preempted, like a pod preempted by
// higher-priority work). Their relaunches wait as pending. Workers being
// stopped or already preempted are not preempted again: they leave anyway.
func (c *Capped) SetCap(workers int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.room = max(workers, 0)
	if c.closed {
		return
	}
	c.releaseLocked()
	var staying []instanceKey
	for k, w := range c.running {
		if !w.stopping && !w.preempted {
			staying = append(staying, k)
		}
	}
	excess := len(staying) - c.room
	if excess <= 0 {
		return
	}
	slices.SortFunc(staying, func(a, b instanceKey) int {
		return cmp.Compare(c.running[b].seq, c.running[a].seq) // newest first
	})
	for _, k := range staying[:excess] {
		w := c.running[k]
		w.preempted, w.room = true, c.room
		name := cluster.InstanceName(k.role, k.id)
		c.log.Info("preempting worker", "instance", name, "room", c.room)
		var err error
		if kl, ok := c.inner.(killer); ok {
			err = kl.Kill(k.role, k.id)
		} else {
			err = c.inner.Stop(c.ctx, k.role, k.id)
		}
		if err != nil {
			c.log.Warn("preempt worker", "instance", name, "err", err)
		}
	}
}

// Cap returns the room: how many workers may run at once.
func (c *Capped) Cap() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.room
}

// Counts returns how many workers occupy room (launched, exit not seen)
// and how many launches are held.
func (c *Capped) Counts() (running, held int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.running), len(c.held)
}

// pump passes inner's events on. A worker's exit frees its room (and starts
// a held launch); the exit of a worker Capped preempted is rewritten as the
// preemption it was.
func (c *Capped) pump() {
	defer close(c.pumped)
	defer c.events.Close()
	for ev := range c.inner.Events() {
		if ev.Role != cluster.Worker || ev.Phase != cluster.Exited {
			c.events.Push(ev)
			continue
		}
		c.mu.Lock()
		key := instanceKey{ev.Role, ev.ID}
		if w := c.running[key]; w != nil {
			delete(c.running, key)
			// A worker that completed on its own before the kill landed
			// was not preempted.
			if w.preempted && (ev.Reason != cluster.Completed || ev.Requested) {
				ev.Reason, ev.Requested = cluster.Preempted, w.stopping
				ev.Message = fmt.Sprintf("preempted: room lowered to %d workers (%s)", w.room, ev.Message)
			}
		}
		// Pushed before a released launch can report, so that the master
		// sees the room freed before it is taken again.
		c.events.Push(ev)
		c.releaseLocked()
		c.mu.Unlock()
	}
}

// Events delivers inner's events, the Pending of held launches and the
// exits of dropped ones. It is closed after Close, once drained.
func (c *Capped) Events() <-chan cluster.Event { return c.events.Out() }

// PSAddress is inner's.
func (c *Capped) PSAddress(index int) (cluster.Endpoint, error) { return c.inner.PSAddress(index) }

// Existing implements cluster.Backend: a Capped cluster starts empty.
func (c *Capped) Existing(context.Context) ([]cluster.Event, error) { return nil, nil }

// Close drops the held launches (each reported as a deleted pending
// instance), closes inner and waits until its last events are passed on.
func (c *Capped) Close(ctx context.Context) error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		for _, spec := range c.held {
			c.events.Push(droppedEvent(spec, "pending launch dropped: backend closed"))
		}
		c.held = nil
		c.cancel()
	}
	c.mu.Unlock()
	if err := c.inner.Close(ctx); err != nil {
		return fmt.Errorf("capped: close: %w", err)
	}
	select {
	case <-c.pumped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("capped: close: waiting for the last events: %w", ctx.Err())
	}
}

// Pid is inner's Pid when it has one (Backend does); otherwise (0, false).
func (c *Capped) Pid(role cluster.Role, id int) (int, bool) {
	if p, ok := c.inner.(interface {
		Pid(cluster.Role, int) (int, bool)
	}); ok {
		return p.Pid(role, id)
	}
	return 0, false
}

// Kill is inner's Kill (fault injection: not a preemption, not a requested
// stop); an error when inner has none.
func (c *Capped) Kill(role cluster.Role, id int) error {
	if k, ok := c.inner.(killer); ok {
		return k.Kill(role, id)
	}
	return fmt.Errorf("capped: kill %s: the inner backend cannot kill", cluster.InstanceName(role, id))
}
