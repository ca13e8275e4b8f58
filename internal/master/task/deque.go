package task

// deque is a ring-buffer double-ended queue of task IDs. Requeued tasks go to
// the front (they are the oldest work and may be blocking an epoch), fresh
// ones to the back; both ends must be O(1).
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
