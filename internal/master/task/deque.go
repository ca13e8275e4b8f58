package task

// deque is a ring-buffer double-ended queue of task IDs. A queue keeps the
// tasks taken back in one, pushed at the front (they are the oldest work
// and may be blocking an epoch); fresh tasks are a slice and a cursor
// (queue, below).
type deque struct {
	buf  []int64
	head int // index of the front element
	n    int
}

func (q *deque) len() int { return q.n }

func (q *deque) grow() {
	if q.n < len(q.buf) {
		return
	}
	nb := make([]int64, max(16, 2*len(q.buf)))
	for i := 0; i < q.n; i++ {
		nb[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = nb, 0
}

func (q *deque) pushBack(v int64) {
	q.grow()
	q.buf[(q.head+q.n)%len(q.buf)] = v
	q.n++
}

func (q *deque) pushFront(v int64) {
	q.grow()
	q.head = (q.head - 1 + len(q.buf)) % len(q.buf)
	q.buf[q.head] = v
	q.n++
}

func (q *deque) popFront() (int64, bool) {
	if q.n == 0 {
		return 0, false
	}
	v := q.buf[q.head]
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return v, true
}

// items returns the queue contents front to back (for tests and debugging).
func (q *deque) items() []int64 {
	out := make([]int64, q.n)
	for i := range out {
		out[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	return out
}

// queue is a todo queue: tasks taken back (requeued, failed, rewound) at
// the front, ahead of the fresh ones, which go out in the order they were
// created. Keeping the fresh ones as a cursor into their creation order is
// what lets a snapshot hold the queue compactly (Snapshot): the front's
// IDs, and how far the cursor has gone.
type queue struct {
	front deque
	fresh []int64
	next  int // fresh[next:] are still queued
}

func (q *queue) len() int { return q.front.len() + len(q.fresh) - q.next }

// pushFresh queues a task just created, behind every other.
func (q *queue) pushFresh(id int64) { q.fresh = append(q.fresh, id) }

// pushFront queues a task taken back, ahead of every other.
func (q *queue) pushFront(id int64) { q.front.pushFront(id) }

func (q *queue) popFront() (int64, bool) {
	if id, ok := q.front.popFront(); ok {
		return id, true
	}
	if q.next == len(q.fresh) {
		return 0, false
	}
	q.next++
	return q.fresh[q.next-1], true
}

// items returns the queue's contents front to back.
func (q *queue) items() []int64 {
	return append(q.front.items(), q.fresh[q.next:]...)
}
