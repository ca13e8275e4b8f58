package e2e

import (
	"context"
	"sync"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/cluster/k8s"
)

// ---- the backend, watched ----------------------------------------------------------------------

// scaleBackend is the master's k8s.Backend with a stopwatch: when each
// Exited event leaves the backend's queue, and each Launch (start, end).
type scaleBackend struct {
	*k8s.Backend
	out chan cluster.Event

	mu                   sync.Mutex
	exits                map[int]time.Time // worker ID → its Exited event
	launches             []scaleLaunch
	closeStart, closeEnd time.Time
}

type scaleLaunch struct {
	id, index  int
	start, end time.Time
	err        error
}

func newScaleBackend(b *k8s.Backend) *scaleBackend {
	s := &scaleBackend{Backend: b, out: make(chan cluster.Event, 1<<14), exits: map[int]time.Time{}}
	go func() {
		// Forward at once into a large buffer, so the time taken is when the
		// backend had the event, queueing in the master included after it.
		for ev := range b.Events() {
			if ev.Role == cluster.Worker && ev.Phase == cluster.Exited {
				s.mu.Lock()
				s.exits[ev.ID] = time.Now()
				s.mu.Unlock()
			}
			s.out <- ev
		}
		close(s.out)
	}()
	return s
}

func (s *scaleBackend) Events() <-chan cluster.Event { return s.out }

func (s *scaleBackend) Launch(ctx context.Context, spec cluster.InstanceSpec) error {
	start := time.Now()
	err := s.Backend.Launch(ctx, spec)
	if spec.Role == cluster.Worker {
		s.mu.Lock()
		s.launches = append(s.launches, scaleLaunch{id: spec.ID, index: spec.Index, start: start, end: time.Now(), err: err})
		s.mu.Unlock()
	}
	return err
}

// LaunchBatch creates the pods of specs as the backend does (up to
// k8s.ClientBurst at once, paced by the client's rate limiter), each
// through Launch, which times it.
func (s *scaleBackend) LaunchBatch(ctx context.Context, specs []cluster.InstanceSpec) []error {
	return k8s.LaunchEach(ctx, specs, k8s.ClientBurst, s.Launch)
}

func (s *scaleBackend) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closeStart = time.Now()
	s.mu.Unlock()
	err := s.Backend.Close(ctx)
	s.mu.Lock()
	s.closeEnd = time.Now()
	s.mu.Unlock()
	return err
}

// replacement is the first worker launched in slot index at or after t.
func (s *scaleBackend) replacement(index int, t time.Time) (scaleLaunch, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.launches {
		if l.index == index && !l.start.Before(t) {
			return l, true
		}
	}
	return scaleLaunch{}, false
}
