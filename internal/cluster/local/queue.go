package local

import (
	"sync"

	"elasticdl/internal/cluster"
)

// eventQueue decouples the goroutines that reap processes from whoever reads
// Events: push never blocks, so a slow or absent consumer cannot stall
// reaping (and with it Close). Events leave in the order they were pushed,
// which keeps them in order per instance.
type eventQueue struct {
	out  chan cluster.Event
	wake chan struct{} // capacity 1: a pending "something changed"

	mu     sync.Mutex
	buf    []cluster.Event
	closed bool
}

func newEventQueue() *eventQueue {
	q := &eventQueue{
		out:  make(chan cluster.Event),
		wake: make(chan struct{}, 1),
	}
	go q.run()
	return q
}

// push appends e; it reports false if the queue was already closed.
func (q *eventQueue) push(e cluster.Event) bool {
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

// close lets run close out once everything queued has been delivered.
func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.notify()
}

func (q *eventQueue) notify() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *eventQueue) run() {
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
		q.buf[0] = cluster.Event{}
		q.buf = q.buf[1:]
		if len(q.buf) == 0 {
			q.buf = nil // let a drained backlog's array be collected
		}
		q.mu.Unlock()
		q.out <- e
	}
}
