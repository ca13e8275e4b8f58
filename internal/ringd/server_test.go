package ringd

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"elasticdl/internal/collective"
)

// hangGuard bounds any one wait of these tests: reaching it is a hang, not
// a slow machine.
const hangGuard = 30 * time.Second

// ringTimeout is the rings' timeout where a test must finish well within
// it: a superseded or cancelled wait must not wait for it.
const ringTimeout = 60 * time.Second

// member is one worker's view of a Server: the worker's socket ends and its
// own mapping of the shared memory.
type member struct {
	t         *testing.T
	data, ctl net.Conn
	mem       []float32
	addr      string
	done      chan error // Serve's result
	entered   chan op    // the Server's blocking requests, as they start
	stopOnce  sync.Once
	stopErr   error
}

// newMember starts a Server over net.Pipe sockets and a memfd of elems
// float32 values (mapped by it with MAP), and says HELLO.
func newMember(t *testing.T, elems int) *member {
	t.Helper()
	ln, err := collective.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	fd, err := unix.MemfdCreate("ringd-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "ringd-test")
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(4 * elems)); err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(fd, 0, 4*elems, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	srv := New(ln, f, nil)
	m := &member{t: t, done: make(chan error, 1), entered: make(chan op, 64)}
	m.mem = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), elems)
	srv.entered = func(o op) { m.entered <- o }
	var dataSrv, ctlSrv net.Conn
	m.data, dataSrv = net.Pipe()
	m.ctl, ctlSrv = net.Pipe()
	go func() { m.done <- srv.Serve(context.Background(), dataSrv, ctlSrv) }()
	t.Cleanup(func() {
		m.data.Close()
		m.ctl.Close()
		if err := m.wait(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	m.addr = string(m.ok(m.data, request{op: opHello}))
	m.ok(m.data, request{op: opMap, bytes: uint64(4 * elems)})
	return m
}

// wait returns Serve's result once it has returned.
func (m *member) wait() error {
	m.stopOnce.Do(func() {
		select {
		case m.stopErr = <-m.done:
		case <-time.After(hangGuard):
			m.stopErr = fmt.Errorf("Serve did not return within %v", hangGuard)
		}
	})
	return m.stopErr
}

// callRaw sends one request body on c and returns the response.
func callRaw(c net.Conn, body []byte) (status, string, error) {
	if err := c.SetDeadline(time.Now().Add(hangGuard)); err != nil {
		return 0, "", err
	}
	if err := writeFrame(c, body); err != nil {
		return 0, "", err
	}
	b, err := readFrame(c)
	if err != nil {
		return 0, "", err
	}
	st, payload, err := parseResponse(b)
	return st, string(payload), err
}

func (m *member) ok(c net.Conn, q request) []byte {
	m.t.Helper()
	st, payload, err := callRaw(c, q.marshal())
	if err != nil || st != statusOK {
		m.t.Fatalf("%v: status %d %q, err %v; want OK", q.op, st, payload, err)
	}
	return []byte(payload)
}

// expect checks that body is answered with st and a message naming want.
func (m *member) expect(c net.Conn, body []byte, st status, want string) {
	m.t.Helper()
	got, payload, err := callRaw(c, body)
	if err != nil || got != st || !strings.Contains(payload, want) {
		m.t.Errorf("request % x: status %d %q, err %v; want status %d naming %q", body, got, payload, err, st, want)
	}
}

// awaitEntered waits until the Server starts to block in o.
func (m *member) awaitEntered(o op) {
	m.t.Helper()
	deadline := time.After(hangGuard)
	for {
		select {
		case got := <-m.entered:
			if got == o {
				return
			}
		case <-deadline:
			m.t.Fatalf("the server never entered %v", o)
		}
	}
}

// formAll forms ring version on every member at once (FORM blocks until
// the ring is up) and fails the test unless all succeed.
func formAll(t *testing.T, version int64, ms ...*member) {
	t.Helper()
	peers := make([]string, len(ms))
	for i, m := range ms {
		peers[i] = m.addr
	}
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			q := request{op: opForm, version: version, rank: uint32(i), timeout: ringTimeout, peers: peers}
			if st, msg, err := callRaw(m.data, q.marshal()); err != nil || st != statusOK {
				errs[i] = fmt.Errorf("rank %d: status %d %q, err %v", i, st, msg, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("FORM version %d: %v", version, err)
		}
	}
}

// allOK runs q on every member at once and fails the test unless every
// one answers OK.
func allOK(t *testing.T, ms []*member, q func(rank int) request) {
	t.Helper()
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			st, msg, err := callRaw(m.data, q(i).marshal())
			if err != nil || st != statusOK {
				errs[i] = fmt.Errorf("%v on rank %d: status %d %q, err %v", q(i).op, i, st, msg, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func statsOf(m *member) (ops, sent int64, busy time.Duration) {
	b := m.ok(m.data, request{op: opStats})
	if len(b) != 24 {
		m.t.Fatalf("STATS payload of %d bytes, want 24", len(b))
	}
	le := binary.LittleEndian
	return int64(le.Uint64(b)), int64(le.Uint64(b[8:])), time.Duration(le.Uint64(b[16:]))
}

func TestCollectives(t *testing.T) {
	const elems = 4096
	ms := []*member{newMember(t, elems), newMember(t, elems), newMember(t, elems)}
	formAll(t, 1, ms...)
	for r, m := range ms {
		for i := range m.mem {
			m.mem[i] = float32(1000*r + i)
		}
	}
	const off, count = 8, 3000
	allOK(t, ms, func(int) request {
		return request{op: opAllReduce, version: 1, offset: off, count: count}
	})
	for r, m := range ms {
		for i, v := range m.mem {
			want := float32(1000*r + i) // outside the slice: untouched
			if i >= off && i < off+count {
				want = float32(3*i + 3000) // sum over ranks 0, 1, 2
			}
			if v != want {
				t.Fatalf("rank %d: element %d is %v after ALLREDUCE, want %v", r, i, v, want)
			}
		}
	}
	for r, m := range ms {
		for i := range m.mem {
			m.mem[i] = float32(-r*elems - i)
		}
	}
	allOK(t, ms, func(int) request {
		return request{op: opBroadcast, version: 1, root: 1, offset: 0, count: elems}
	})
	for r, m := range ms {
		for i, v := range m.mem {
			if want := float32(-elems - i); v != want {
				t.Fatalf("rank %d: element %d is %v after BROADCAST from 1, want %v", r, i, v, want)
			}
		}
	}
	for r, m := range ms {
		ops, sent, busy := statsOf(m)
		if ops != 2 || sent < 4*count || busy <= 0 {
			t.Errorf("rank %d: STATS ops %d, bytes sent %d, busy %v; want 2 ops, >= %d bytes, some time", r, ops, sent, busy, 4*count)
		}
	}
	// Counters survive the ring: LEAVE drops it, STATS keeps its totals.
	m := ms[0]
	m.ok(m.data, request{op: opLeave})
	if ops, _, _ := statsOf(m); ops != 2 {
		t.Errorf("STATS ops %d after LEAVE, want 2", ops)
	}
}

func TestBadRequests(t *testing.T) {
	m := newMember(t, 64)
	// A world of one opens no connection: its collectives are no-ops.
	m.ok(m.data, request{op: opForm, version: 1, timeout: time.Second, peers: []string{m.addr}})
	ar := func(version int64, off, count uint64) []byte {
		return request{op: opAllReduce, version: version, offset: off, count: count}.marshal()
	}
	for _, c := range []struct {
		name string
		on   net.Conn
		body []byte
		st   status
		want string
	}{
		{"unknown op", m.data, []byte{42, 1, 2}, statusError, "unknown operation 42"},
		{"truncated", m.data, ar(1, 0, 1)[:10], statusError, "truncated"},
		{"beyond the mapping", m.data, ar(1, 60, 5), statusError, "outside the mapping of 64"},
		{"offset overflow", m.data, ar(1, 1<<63, 1<<63), statusError, "outside the mapping"},
		{"wrong version", m.data, ar(2, 0, 64), statusBroken, "the live ring is version 1"},
		{"bad root", m.data, request{op: opBroadcast, version: 1, root: 1, count: 4}.marshal(), statusError, "root 1"},
		{"no peers", m.data, request{op: opForm, version: 2, timeout: time.Second}.marshal(), statusError, "no peers"},
		{"rank out of range", m.data, request{op: opForm, version: 2, rank: 1, timeout: time.Second, peers: []string{m.addr}}.marshal(), statusError, "rank 1 out of range"},
		{"no timeout", m.data, request{op: opForm, version: 2, peers: []string{m.addr}}.marshal(), statusError, "timeout"},
		{"map past the file", m.data, request{op: opMap, bytes: 4096}.marshal(), statusError, "holds 256"},
		{"supersede on data", m.data, request{op: opSupersede, version: 1}.marshal(), statusError, "control socket"},
		{"hello on control", m.ctl, request{op: opHello}.marshal(), statusError, "data socket"},
		{"garbage on control", m.ctl, []byte{8, 1}, statusError, "truncated"},
	} {
		t.Run(c.name, func(t *testing.T) { m.expect(c.on, c.body, c.st, c.want) })
	}
	// Still serving, the ring and the mapping intact.
	m.ok(m.data, request{op: opAllReduce, version: 1, offset: 0, count: 64})
	m.ok(m.data, request{op: opLeave})
	m.expect(m.data, ar(1, 0, 64), statusBroken, "no live ring")
}

func TestSupersedeVersions(t *testing.T) {
	m := newMember(t, 16)
	form := func(v int64) []byte {
		return request{op: opForm, version: v, timeout: time.Second, peers: []string{m.addr}}.marshal()
	}
	ar := func(v int64) []byte { return request{op: opAllReduce, version: v, count: 16}.marshal() }
	m.expect(m.data, form(3), statusOK, "")
	// Not newer than the live ring, or not closing: the ring stays.
	m.ok(m.ctl, request{op: opSupersede, version: 3, closeLive: true})
	m.ok(m.ctl, request{op: opSupersede, version: 4})
	m.expect(m.data, ar(3), statusOK, "")
	// A FORM the poller already knows to be stale fails at once.
	m.expect(m.data, form(2), statusBroken, "superseded by version 4")
	m.expect(m.data, form(4), statusOK, "")
	m.ok(m.ctl, request{op: opSupersede, version: 5, closeLive: true})
	m.expect(m.data, ar(4), statusBroken, "superseded by version 5")
}

// TestSupersedeFreesBlockedCollective: a member whose peer never enters the
// collective (frozen) is freed by SUPERSEDE with close_live, long before
// the ring's timeout, and the next version then works.
func TestSupersedeFreesBlockedCollective(t *testing.T) {
	ms := []*member{newMember(t, 1024), newMember(t, 1024)}
	formAll(t, 1, ms...)
	type answer struct {
		st  status
		msg string
		err error
	}
	got := make(chan answer, 1)
	go func() {
		st, msg, err := callRaw(ms[0].data, request{op: opAllReduce, version: 1, count: 1024}.marshal())
		got <- answer{st, msg, err}
	}()
	ms[0].awaitEntered(opAllReduce)
	start := time.Now()
	ms[0].ok(ms[0].ctl, request{op: opSupersede, version: 2, closeLive: true})
	a := <-got
	if a.err != nil || a.st != statusBroken || !strings.Contains(a.msg, "superseded by version 2") {
		t.Fatalf("blocked ALLREDUCE answered status %d %q, err %v; want BROKEN, superseded", a.st, a.msg, a.err)
	}
	if took := time.Since(start); took > ringTimeout/4 {
		t.Errorf("freed after %v; the ring's timeout is %v", took, ringTimeout)
	}
	formAll(t, 2, ms...)
	for r, m := range ms {
		for i := range m.mem {
			m.mem[i] = float32(r + 1)
		}
	}
	allOK(t, ms, func(int) request {
		return request{op: opAllReduce, version: 2, count: 1024}
	})
	for r, m := range ms {
		if m.mem[0] != 3 || m.mem[1023] != 3 {
			t.Errorf("rank %d: %v ... %v, want 3", r, m.mem[0], m.mem[1023])
		}
	}
}

// ghost is a ring member that never forms: a Listener nobody drives.
func ghost(t *testing.T) string {
	ln, err := collective.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr()
}

func TestSupersedeCancelsForm(t *testing.T) {
	m := newMember(t, 16)
	peers := []string{m.addr, ghost(t)}
	got := make(chan string, 1)
	go func() {
		q := request{op: opForm, version: 1, timeout: ringTimeout, peers: peers}
		st, msg, err := callRaw(m.data, q.marshal())
		got <- fmt.Sprintf("status %d %q, err %v", st, msg, err)
	}()
	m.awaitEntered(opForm)
	start := time.Now()
	m.ok(m.ctl, request{op: opSupersede, version: 2})
	if a := <-got; !strings.HasPrefix(a, "status 2 ") || !strings.Contains(a, "superseded by ring version 2") {
		t.Fatalf("FORM answered %s; want BROKEN, superseded", a)
	}
	if took := time.Since(start); took > ringTimeout/4 {
		t.Errorf("cancelled after %v; the ring's timeout is %v", took, ringTimeout)
	}
}

func TestServeStopsOnEOF(t *testing.T) {
	t.Run("data socket", func(t *testing.T) {
		m := newMember(t, 16)
		m.data.Close()
		if err := m.wait(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("control socket, during a form", func(t *testing.T) {
		m := newMember(t, 16)
		peers := []string{m.addr, ghost(t)}
		go func() {
			q := request{op: opForm, version: 1, timeout: ringTimeout, peers: peers}
			callRaw(m.data, q.marshal()) // no answer: the server stops
		}()
		m.awaitEntered(opForm)
		m.ctl.Close()
		if err := m.wait(); err != nil {
			t.Fatal(err)
		}
	})
}
