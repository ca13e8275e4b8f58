package collective

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A Ring is one member's place in a formed ring: a connection to the next
// member (written) and one from the previous member (read). Collectives on
// it run one at a time (concurrent calls wait); every member must call the
// same collectives in the same order with the same element counts.
//
// Any failure breaks the Ring: the streams are out of step, so every later
// call returns ErrBroken. Close it and form a new ring with a new version.
type Ring struct {
	rank, size int
	version    int64
	timeout    time.Duration
	segElems   int
	prevAddr   string
	nextAddr   string
	log        *slog.Logger
	in, out    net.Conn // nil in a world of one
	// portable converts floats through scratch buffers instead of sending
	// their memory: on big-endian hosts, and in tests everywhere.
	portable bool

	opMu      sync.Mutex // one collective at a time; guards the fields below
	seq       uint64
	cachedFor planKey
	plan      plan
	reduceBuf []float32
	sendBuf   []byte
	recvBuf   []byte

	stateMu sync.Mutex
	err     error // ErrClosed, or ErrBroken with its cause; nil while usable

	ops, sent, received, busy atomic.Int64
}

// planKey identifies the collective the cached plan was made for.
type planKey struct {
	op    opKind
	root  int
	count int
}

// Stats are a Ring's counters since it was formed.
type Stats struct {
	Ops           int64         // collectives completed
	BytesSent     int64         // written to the next member, headers included
	BytesReceived int64         // read from the previous member, headers included
	Busy          time.Duration // time spent inside collectives, failed ones included
}

func newRing(cfg Config, in, out net.Conn) *Ring {
	n := len(cfg.Peers)
	return &Ring{
		rank:     cfg.Rank,
		size:     n,
		version:  cfg.Version,
		timeout:  cfg.Timeout,
		segElems: cfg.segElems(),
		prevAddr: cfg.Peers[mod(cfg.Rank-1, n)],
		nextAddr: cfg.Peers[(cfg.Rank+1)%n],
		log:      cfg.logger().With("ring_version", cfg.Version, "rank", cfg.Rank, "world", n),
		in:       in,
		out:      out,
		portable: !hostLittleEndian(),
	}
}

// Rank is this member's index in the ring.
func (r *Ring) Rank() int { return r.rank }

// Size is the number of members.
func (r *Ring) Size() int { return r.size }

// Version is the rendezvous version the ring was formed with.
func (r *Ring) Version() int64 { return r.version }

// Stats returns the ring's counters; safe to call at any time.
func (r *Ring) Stats() Stats {
	return Stats{
		Ops:           r.ops.Load(),
		BytesSent:     r.sent.Load(),
		BytesReceived: r.received.Load(),
		Busy:          time.Duration(r.busy.Load()),
	}
}

// Close closes the ring's connections. A collective in progress fails; the
// neighbours' collectives fail promptly too (their connections see EOF).
// It is safe to call more than once and concurrently with a collective.
func (r *Ring) Close() error {
	r.stateMu.Lock()
	if r.err == nil {
		r.err = ErrClosed
	}
	r.stateMu.Unlock()
	r.closeConns()
	return nil
}

func (r *Ring) closeConns() {
	for _, c := range []net.Conn{r.in, r.out} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// breakWith marks the ring unusable because of cause and closes its
// connections, so the neighbours fail promptly rather than at their timeout.
func (r *Ring) breakWith(cause error) {
	r.stateMu.Lock()
	if r.err == nil {
		r.err = fmt.Errorf("%w: %w", ErrBroken, cause)
	}
	r.stateMu.Unlock()
	r.closeConns()
}

func (r *Ring) state() error {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	return r.err
}

// AllReduce replaces data, on every member, with the element-wise float32
// sum of all members' data; all members end with the same bits. Every
// member must pass the same number of elements.
func (r *Ring) AllReduce(ctx context.Context, data []float32) error {
	return r.collective(ctx, header{op: opAllReduce, count: len(data)}, data)
}

// Broadcast copies root's data into every other member's data (the same
// number of elements on every member).
func (r *Ring) Broadcast(ctx context.Context, root int, data []float32) error {
	h := header{op: opBroadcast, root: root, count: len(data)}
	if root < 0 || root >= r.size {
		return r.opErr(h, fmt.Errorf("root %d is not a rank of the ring", root))
	}
	return r.collective(ctx, h, data)
}

func (r *Ring) collective(ctx context.Context, h header, data []float32) error {
	r.opMu.Lock()
	defer r.opMu.Unlock()
	start := time.Now()
	defer func() { r.busy.Add(int64(time.Since(start))) }()
	if err := r.state(); err != nil {
		return r.opErr(h, err)
	}
	if r.size == 1 {
		if ctx.Err() != nil {
			return r.opErr(h, context.Cause(ctx))
		}
		r.ops.Add(1)
		return nil
	}
	r.seq++
	h.seq = r.seq
	if err := r.exchange(ctx, h, data, r.planFor(h)); err != nil {
		r.breakWith(err)
		r.log.Warn("collective: ring broken", "op", h.String(), "err", err)
		return r.opErr(h, err)
	}
	r.ops.Add(1)
	return nil
}

func (r *Ring) opErr(h header, err error) error {
	return fmt.Errorf("collective: %s on ring version %d (rank %d of %d): %w", h, r.version, r.rank, r.size, err)
}

// planFor returns the plan of h, reusing the last one when the collective
// is the same (a training loop reduces the same gradient size every step),
// and sizes the scratch buffers for it.
func (r *Ring) planFor(h header) *plan {
	key := planKey{op: h.op, root: h.root, count: h.count}
	if r.cachedFor != key { // the zero key (op 0) matches no collective
		switch h.op {
		case opAllReduce:
			r.plan = allReducePlan(r.rank, r.size, h.count, r.segElems)
		case opBroadcast:
			r.plan = broadcastPlan(r.rank, r.size, h.root, h.count, r.segElems)
		}
		r.cachedFor = key
	}
	if len(r.reduceBuf) < r.plan.maxReduce {
		r.reduceBuf = make([]float32, r.plan.maxReduce)
	}
	if r.portable && len(r.sendBuf) < 4*r.plan.maxXfer {
		r.sendBuf = make([]byte, 4*r.plan.maxXfer)
		r.recvBuf = make([]byte, 4*r.plan.maxXfer)
	}
	return &r.plan
}

// errStopped is what a side returns when the other side has already failed.
var errStopped = errors.New("stopped by the other side's failure")

// failure records the first error of a collective and, at that moment,
// unblocks everything: the other side's waits (quit) and its I/O (the
// connections are closed — the ring is broken anyway).
type failure struct {
	mu      sync.Mutex
	err     error
	settled bool
	quit    chan struct{}
	onFail  func()
}

func (f *failure) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.settled || f.err != nil {
		return
	}
	f.err = err
	close(f.quit)
	f.onFail()
}

// settle returns the first error; later failures (ctx ending after the
// collective completed) are ignored.
func (f *failure) settle() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = true
	return f.err
}

// exchange runs plan p: this goroutine reads from the previous member while
// another writes to the next, each waiting for the other only where the
// plan says so. ctx ending closes the connections, which unblocks both.
func (r *Ring) exchange(ctx context.Context, h header, data []float32, p *plan) error {
	f := &failure{quit: make(chan struct{}), onFail: r.closeConns}
	stop := context.AfterFunc(ctx, func() { f.fail(context.Cause(ctx)) })
	recvDone := make(chan struct{}, len(p.recvs))
	sendDone := make(chan struct{}, len(p.sends))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.sendAll(h, data, p, recvDone, sendDone, f.quit); err != nil {
			f.fail(err)
		}
	}()
	if err := r.recvAll(h, data, p, sendDone, recvDone, f.quit); err != nil {
		f.fail(err)
	}
	wg.Wait()
	stop()
	return f.settle()
}

// progress counts, in one direction's goroutine, the transfers the other
// direction has completed.
type progress struct {
	done  <-chan struct{} // one value per completed transfer
	count int
}

// await returns once transfer i (-1: none) has completed, or false when quit
// closes first.
func (p *progress) await(i int, quit <-chan struct{}) bool {
	for p.count <= i {
		select {
		case <-p.done:
			p.count++
		case <-quit:
			return false
		}
	}
	return true
}

// pump runs one direction's transfers in order: each waits for the
// transfer of the other direction it depends on, moves its segment (move
// is not called for empty ones) and is counted on done.
func pump(xs []xfer, other progress, done chan<- struct{}, quit <-chan struct{}, move func(xfer) error) error {
	for _, x := range xs {
		if !other.await(x.after, quit) {
			return errStopped
		}
		if x.hi > x.lo {
			if err := move(x); err != nil {
				return err
			}
		}
		done <- struct{}{}
	}
	return nil
}

// sendAll writes h, then p's sends in order, each once the receive it
// depends on has completed (counted on recvDone).
func (r *Ring) sendAll(h header, data []float32, p *plan, recvDone <-chan struct{}, sendDone chan<- struct{}, quit <-chan struct{}) error {
	var hb [headerLen]byte
	h.put(&hb)
	if err := r.write(hb[:]); err != nil {
		return err
	}
	return pump(p.sends, progress{done: recvDone}, sendDone, quit, func(x xfer) error {
		seg := data[x.lo:x.hi]
		if !r.portable {
			return r.write(floatBytes(seg))
		}
		b := r.sendBuf[:4*len(seg)]
		if _, err := binary.Encode(b, binary.LittleEndian, seg); err != nil {
			return err
		}
		return r.write(b)
	})
}

// recvAll reads and checks the previous member's header, then p's receives
// in order, each once the send it depends on has completed (counted on
// sendDone).
func (r *Ring) recvAll(h header, data []float32, p *plan, sendDone <-chan struct{}, recvDone chan<- struct{}, quit <-chan struct{}) error {
	var hb [headerLen]byte
	if err := r.read(hb[:]); err != nil {
		return err
	}
	prev := mod(r.rank-1, r.size)
	got, err := parseHeader(&hb)
	if err != nil {
		return fmt.Errorf("from rank %d (%s): %w", prev, r.prevAddr, err)
	}
	if got != h {
		return fmt.Errorf("out of step with rank %d (%s): it is in %s, this member in %s", prev, r.prevAddr, got, h)
	}
	return pump(p.recvs, progress{done: sendDone}, recvDone, quit, func(x xfer) error {
		seg := data[x.lo:x.hi]
		if !x.reduce {
			return r.readFloats(seg)
		}
		tmp := r.reduceBuf[:len(seg)]
		if err := r.readFloats(tmp); err != nil {
			return err
		}
		addInto(seg, tmp)
		return nil
	})
}

func (r *Ring) readFloats(dst []float32) error {
	if !r.portable {
		return r.read(floatBytes(dst))
	}
	b := r.recvBuf[:4*len(dst)]
	if err := r.read(b); err != nil {
		return err
	}
	_, err := binary.Decode(b, binary.LittleEndian, dst)
	return err
}

// write sends b to the next member; the write must complete within Timeout.
func (r *Ring) write(b []byte) error {
	_ = r.out.SetWriteDeadline(time.Now().Add(r.timeout))
	n, err := r.out.Write(b)
	r.sent.Add(int64(n))
	if err != nil {
		return r.linkErr("send to", (r.rank+1)%r.size, r.nextAddr, err)
	}
	return nil
}

// read fills b from the previous member; it must arrive within Timeout.
func (r *Ring) read(b []byte) error {
	_ = r.in.SetReadDeadline(time.Now().Add(r.timeout))
	n, err := io.ReadFull(r.in, b)
	r.received.Add(int64(n))
	if err != nil {
		return r.linkErr("receive from", mod(r.rank-1, r.size), r.prevAddr, err)
	}
	return nil
}

func (r *Ring) linkErr(dir string, rank int, addr string, err error) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s rank %d (%s): no progress within %v: %w", dir, rank, addr, r.timeout, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("%s rank %d (%s): connection closed by the peer: %w", dir, rank, addr, err)
	}
	return fmt.Errorf("%s rank %d (%s): %w", dir, rank, addr, err)
}
