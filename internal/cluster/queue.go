package cluster

import "sync"

// EventQueue decouples a backend's goroutines (process reapers, informer
// handlers) from whoever reads Events: Push never blocks, so a slow or
// absent consumer cannot stall them (and with them Close). Events leave in the order they were pushed,
// which keeps them in order per instance.
type EventQueue struct {
	out  chan Event
	wake chan struct{} // capacity 1: a pending "something changed"

	mu     sync.Mutex
	buf    []Event
	closed bool
}

// NewEventQueue returns a running queue; Close it to end its goroutine.
func NewEventQueue() *EventQueue {
	q := &EventQueue{
		out:  make(chan Event),
		wake: make(chan struct{}, 1),
	}
	go q.run()
	return q
}

// Push appends e; it reports false if the queue was already closed.
func (q *EventQueue) Push(e Event) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.buf = append(q.buf, e)
	q.mu.Unlock()
	q.notify()
	return true
}

// Close lets run close Out once everything queued has been delivered.
func (q *EventQueue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.notify()
}

func (q *EventQueue) notify() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *EventQueue) run() {
	for {
		q.mu.Lock()
		if len(q.buf) == 0 {
			closed := q.closed
			q.mu.Unlock()
			if closed {
				close(q.out)
				return
			}
			<-q.wake
			continue
		}
		e := q.buf[0]
		q.buf[0] = Event{}
		q.buf = q.buf[1:]
		if len(q.buf) == 0 {
			q.buf = nil // let a drained backlog's array be collected
		}
		q.mu.Unlock()
		q.out <- e
	}
}

// Out delivers the queued events; it is closed after Close, once drained.
func (q *EventQueue) Out() <-chan Event { return q.out }
