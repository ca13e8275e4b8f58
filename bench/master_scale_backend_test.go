package bench

import (
	"context"
	"fmt"
	"sync"

	"elasticdl/internal/cluster"
)

// scaleSimBackend launches nothing: an instance is Running as soon as it is
// launched (a worker's goroutine starts), and Exited when stopped or when
// its goroutine ends (a worker told DONE exits).
type scaleSimBackend struct {
	psAddr string
	events chan cluster.Event
	// start runs a worker for a launched worker instance; it returns a
	// function that stops it.
	start func(id, index int) (stop func())

	mu       sync.Mutex
	running  map[int]func() // worker ID → stop
	closed   bool
	launched int
}

func (s *scaleSimBackend) Launch(_ context.Context, spec cluster.InstanceSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("backend closed")
	}
	s.events <- cluster.Event{Role: spec.Role, ID: spec.ID, Index: spec.Index, Phase: cluster.Running}
	if spec.Role == cluster.Worker {
		s.launched++
		s.running[spec.ID] = s.start(spec.ID, spec.Index)
	}
	return nil
}

// exited reports worker id gone (requested: Stop asked for it).
func (s *scaleSimBackend) exited(role cluster.Role, id, index int, requested bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if role == cluster.Worker {
		if _, ok := s.running[id]; !ok {
			return
		}
		delete(s.running, id)
	}
	reason := cluster.Completed
	if requested {
		reason = cluster.Killed
	}
	s.events <- cluster.Event{Role: role, ID: id, Index: index, Phase: cluster.Exited, Reason: reason, Requested: requested}
}

func (s *scaleSimBackend) Stop(_ context.Context, role cluster.Role, id int) error {
	s.mu.Lock()
	stop := s.running[id]
	s.mu.Unlock()
	if role == cluster.Worker && stop != nil {
		stop()
		s.exited(role, id, 0, true)
	}
	return nil
}

func (s *scaleSimBackend) Events() <-chan cluster.Event                      { return s.events }
func (s *scaleSimBackend) Existing(context.Context) ([]cluster.Event, error) { return nil, nil }
func (s *scaleSimBackend) PSAddress(int) (cluster.Endpoint, error) {
	return cluster.Endpoint{Listen: s.psAddr, Dial: s.psAddr}, nil
}

func (s *scaleSimBackend) Close(context.Context) error {
	s.mu.Lock()
	stops := s.running
	s.running, s.closed = nil, true
	s.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	close(s.events)
	return nil
}
