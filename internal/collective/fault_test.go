package collective

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fault turns a member's connections bad once it has written budget bytes:
// trip is called once, at that moment.
type fault struct {
	budget  atomic.Int64
	tripped chan struct{}
	at      time.Time
	once    sync.Once
	trip    func()
}

func newFault(budget int64, trip func()) *fault {
	f := &fault{tripped: make(chan struct{}), trip: trip}
	f.budget.Store(budget)
	return f
}

// spend reports whether a write of n bytes may go out, tripping the fault
// when the budget runs out.
func (f *fault) spend(n int) bool {
	if f.budget.Add(-int64(n)) >= 0 {
		return true
	}
	f.once.Do(func() {
		// Tripped before the fault acts: a peer that sees it at once
		// (a closed Unix socket) must find the fault already there.
		f.at = time.Now()
		close(f.tripped)
		f.trip()
	})
	return false
}

func (f *fault) isTripped() bool {
	select {
	case <-f.tripped:
		return true
	default:
		return false
	}
}

// dyingConn models a process that dies mid-collective: when the budget runs
// out, the member's connections are closed (the kernel closes a killed
// process's sockets the same way).
type dyingConn struct {
	net.Conn
	f *fault
}

func (c *dyingConn) Write(b []byte) (int, error) {
	if !c.f.spend(len(b)) {
		return 0, errors.New("test: member died")
	}
	return c.Conn.Write(b)
}

// frozenConn models a frozen process (SIGSTOP): once the budget runs out,
// the member neither writes nor reads, but its connections stay open, so the
// kernel keeps accepting data until the buffers fill. It thaws when closed.
type frozenConn struct {
	net.Conn
	f    *fault
	thaw chan struct{}
	once *sync.Once
}

func (c *frozenConn) Write(b []byte) (int, error) {
	if !c.f.spend(len(b)) {
		<-c.thaw
		return 0, net.ErrClosed
	}
	return c.Conn.Write(b)
}

func (c *frozenConn) Read(b []byte) (int, error) {
	if c.f.isTripped() {
		<-c.thaw
		return 0, net.ErrClosed
	}
	return c.Conn.Read(b)
}

func (c *frozenConn) Close() error {
	c.once.Do(func() { close(c.thaw) })
	return c.Conn.Close()
}

// faultScenario runs allreduces of count floats on a ring of n members whose
// last member has its connections wrapped by wrap, and checks that the
// others fail within bound of the fault.
func faultScenario(t *testing.T, n int, wrap func(r *Ring) *fault, wantErr string) {
	const timeout = time.Second
	rings := formRings(t, newListeners(t, n), 1, timeout, nil)
	f := wrap(rings[n-1])
	const count = 3_000_000 // 12 MB: several MB per link, beyond what loopback buffers hold
	type result struct {
		member int
		err    error
		at     time.Time
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			_, err := runAllReduces(context.Background(), rings[i], count, 0, false, nil)
			results <- result{i, err, time.Now()}
		}()
	}
	bound := 5 * timeout
	var failed []string
	var faulty *result
	for len(failed) < n-1 {
		select {
		case r := <-results:
			if r.member == n-1 {
				faulty = &r // its own error says nothing of the others
				continue
			}
			if r.err == nil {
				t.Fatal("allreduce loop ended without an error")
			}
			if !f.isTripped() {
				t.Fatalf("a member failed before the fault: %v", r.err)
			}
			if took := r.at.Sub(f.at); took > bound {
				t.Errorf("a member failed %v after the fault, bound %v: %v", took, bound, r.err)
			}
			failed = append(failed, r.err.Error())
		case <-time.After(bound + 30*time.Second):
			t.Fatalf("members still running long after the fault; failed so far: %q", failed)
		}
	}
	if !strings.Contains(strings.Join(failed, "\n"), wantErr) {
		t.Errorf("no survivor reported %q:\n%s", wantErr, strings.Join(failed, "\n"))
	}
	_ = rings[n-1].Close() // thaw a frozen member
	if faulty == nil {
		r := <-results
		faulty = &r
	}
	if faulty.err == nil {
		t.Error("the faulty member succeeded")
	}
}

func TestDeadPeer(t *testing.T) {
	for _, n := range []int{2, 3} {
		faultScenario(t, n, func(r *Ring) *fault {
			f := newFault(1<<20, func() { r.closeConns() })
			r.out = &dyingConn{Conn: r.out, f: f}
			return f
		}, "connection")
	}
}

func TestFrozenPeer(t *testing.T) {
	for _, n := range []int{2, 3} {
		faultScenario(t, n, func(r *Ring) *fault {
			f := newFault(1<<20, func() {})
			thaw, once := make(chan struct{}), &sync.Once{}
			r.in = &frozenConn{Conn: r.in, f: f, thaw: thaw, once: once}
			r.out = &frozenConn{Conn: r.out, f: f, thaw: thaw, once: once}
			return f
		}, "no progress within 1s")
	}
}
