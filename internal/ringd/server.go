package ringd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"elasticdl/internal/collective"
)

// A Server serves one worker: its data and control sockets, over one
// Listener and one shared memory file. Serve it once.
type Server struct {
	ln  *collective.Listener
	mem *os.File
	log *slog.Logger

	// Owned by the data loop (Serve's goroutine).
	mapping []byte
	floats  []float32        // mapping as float32 elements
	totals  collective.Stats // of the rings already dropped

	// entered, when set (tests), is called as a data request starts to
	// block: in a Form or a collective.
	entered func(op)

	mu sync.Mutex // guards what the control loop shares with the data loop
	// live is the formed ring; written by the data loop only, under mu.
	live       *collective.Ring
	forming    int64                   // version of the Form in progress
	cancelForm context.CancelCauseFunc // nil when no Form is in progress
	floor      int64                   // newest version SUPERSEDE named
	closeFloor int64                   // newest version a closing SUPERSEDE named
}

// New returns a server forming its rings on ln and mapping mem (any
// mappable file: the worker's memfd). logger may be nil.
func New(ln *collective.Listener, mem *os.File, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{ln: ln, mem: mem, log: logger, floor: math.MinInt64, closeFloor: math.MinInt64}
}

// Serve answers requests until either socket reaches EOF or ctx ends, and
// then closes both sockets and the live ring and unmaps the memory; the
// Listener is the caller's. It returns nil on EOF or ctx's end, and an
// error when a socket fails otherwise or its stream is out of step.
func (s *Server) Serve(ctx context.Context, data, ctl io.ReadWriteCloser) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Stopping unblocks everything: the sockets' reads, a Form (through
	// ctx) and a collective (closing its ring).
	stop := context.AfterFunc(ctx, func() {
		_ = data.Close()
		_ = ctl.Close()
		s.mu.Lock()
		if s.live != nil {
			_ = s.live.Close()
		}
		s.mu.Unlock()
	})
	defer stop()
	var wg sync.WaitGroup
	var ctlErr error
	wg.Go(func() {
		defer cancel()
		ctlErr = s.serveControl(ctx, ctl)
	})
	dataErr := s.serveData(ctx, data)
	cancel()
	wg.Wait()
	s.dropLive()
	s.unmap()
	return errors.Join(dataErr, ctlErr)
}

// stopped says how a loop ends on a socket error: nil when the worker went
// away (EOF, or a write to its closed end) or on a stop (which closed the
// socket under it), the error otherwise.
func stopped(ctx context.Context, socket string, err error) error {
	gone := errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
	if gone || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("ringd: %s socket: %w", socket, err)
}

func (s *Server) serveData(ctx context.Context, c io.ReadWriter) error {
	for {
		body, err := readFrame(c)
		if err != nil {
			return stopped(ctx, "data", err)
		}
		st, payload := s.handleData(ctx, body)
		if st != statusOK {
			s.log.Warn("ringd: request failed", "op", opOf(body), "status", st, "err", string(payload))
		}
		if err := writeFrame(c, response(st, payload)); err != nil {
			return stopped(ctx, "data", err)
		}
	}
}

func (s *Server) serveControl(ctx context.Context, c io.ReadWriter) error {
	for {
		body, err := readFrame(c)
		if err != nil {
			return stopped(ctx, "control", err)
		}
		st, payload := statusOK, []byte(nil)
		q, err := parseRequest(body)
		switch {
		case err != nil:
			st, payload = statusError, []byte(err.Error())
		case q.op != opSupersede:
			st, payload = statusError, fmt.Appendf(nil, "ringd: %v goes on the data socket, not the control socket", q.op)
		default:
			s.supersede(q.version, q.closeLive)
		}
		if err := writeFrame(c, response(st, payload)); err != nil {
			return stopped(ctx, "control", err)
		}
	}
}

func opOf(body []byte) op {
	if len(body) == 0 {
		return 0
	}
	return op(body[0])
}

func failed(st status, err error) (status, []byte) { return st, []byte(err.Error()) }

// handleData serves one data request and returns its response.
func (s *Server) handleData(ctx context.Context, body []byte) (status, []byte) {
	q, err := parseRequest(body)
	if err != nil {
		return failed(statusError, err)
	}
	switch q.op {
	case opHello:
		return statusOK, []byte(s.ln.Addr())
	case opMap:
		if err := s.remap(q.bytes); err != nil {
			return failed(statusError, err)
		}
	case opForm:
		return s.form(ctx, q)
	case opAllReduce, opBroadcast:
		return s.collective(ctx, q)
	case opLeave:
		s.dropLive()
	case opStats:
		return statusOK, s.stats()
	default:
		return failed(statusError, fmt.Errorf("ringd: %v goes on the control socket, not the data socket", q.op))
	}
	return statusOK, nil
}

// form forms ring q.version, closing the live one first: a member is in
// one ring at a time.
func (s *Server) form(ctx context.Context, q request) (status, []byte) {
	switch n := len(q.peers); {
	case n == 0:
		return failed(statusError, errors.New("ringd: FORM names no peers"))
	case int(q.rank) >= n:
		return failed(statusError, fmt.Errorf("ringd: FORM: rank %d out of range for %d peers", q.rank, n))
	case q.timeout <= 0:
		return failed(statusError, errors.New("ringd: FORM: timeout must be positive"))
	}
	s.dropLive()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.mu.Lock()
	if q.version < s.floor {
		floor := s.floor
		s.mu.Unlock()
		return failed(statusBroken, fmt.Errorf("ringd: ring version %d is superseded by version %d", q.version, floor))
	}
	s.forming, s.cancelForm = q.version, cancel
	s.mu.Unlock()
	if s.entered != nil {
		s.entered(opForm)
	}
	ring, err := s.ln.Form(fctx, collective.Config{
		Rank: int(q.rank), Peers: q.peers, PeerIDs: q.ids, Version: q.version, Timeout: q.timeout, Logger: s.log,
	})
	s.mu.Lock()
	s.cancelForm = nil
	floor := s.floor
	if err == nil && q.version >= floor {
		s.live = ring
	}
	s.mu.Unlock()
	if err != nil {
		return failed(statusBroken, fmt.Errorf("ringd: %w", err))
	}
	if q.version < floor { // superseded as it completed
		s.retire(ring)
		return failed(statusBroken, fmt.Errorf("ringd: ring version %d is superseded by version %d", q.version, floor))
	}
	return statusOK, nil
}

// collective runs an ALLREDUCE or BROADCAST on the live ring. A failed
// collective breaks the ring, so it is dropped.
func (s *Server) collective(ctx context.Context, q request) (status, []byte) {
	data, err := s.slice(q.offset, q.count)
	if err != nil {
		return failed(statusError, err)
	}
	r := s.live // the data loop is its only writer
	if r == nil {
		return failed(statusBroken, fmt.Errorf("ringd: %v of ring version %d: no live ring", q.op, q.version))
	}
	if r.Version() != q.version {
		return failed(statusBroken, fmt.Errorf("ringd: %v of ring version %d: the live ring is version %d", q.op, q.version, r.Version()))
	}
	if q.op == opBroadcast && int64(q.root) >= int64(r.Size()) {
		return failed(statusError, fmt.Errorf("ringd: BROADCAST from root %d: the ring has %d members", q.root, r.Size()))
	}
	if s.entered != nil {
		s.entered(q.op)
	}
	if q.op == opAllReduce {
		err = r.AllReduce(ctx, data)
	} else {
		err = r.Broadcast(ctx, int(q.root), data)
	}
	if err == nil {
		return statusOK, nil
	}
	s.dropLive()
	s.mu.Lock()
	closeFloor := s.closeFloor
	s.mu.Unlock()
	if r.Version() < closeFloor {
		err = fmt.Errorf("superseded by version %d: %w", closeFloor, err)
	}
	return failed(statusBroken, fmt.Errorf("ringd: %w", err))
}

// supersede serves SUPERSEDE (from the control loop): version is newer than
// anything this member should still form, and, with closeLive, than any
// ring it should still run collectives on.
func (s *Server) supersede(version int64, closeLive bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor = max(s.floor, version)
	if s.cancelForm != nil && s.forming < version {
		s.cancelForm(fmt.Errorf("ringd: superseded by ring version %d", version))
		s.log.Info("ringd: form cancelled", "ring_version", s.forming, "superseded_by", version)
	}
	if !closeLive {
		return
	}
	s.closeFloor = max(s.closeFloor, version)
	if s.live != nil && s.live.Version() < version {
		// The data loop drops it when its collective fails or at the
		// next request naming it.
		_ = s.live.Close()
		s.log.Info("ringd: live ring closed", "ring_version", s.live.Version(), "superseded_by", version)
	}
}

// dropLive closes and forgets the live ring (data loop only).
func (s *Server) dropLive() {
	s.mu.Lock()
	r := s.live
	s.live = nil
	s.mu.Unlock()
	if r != nil {
		s.retire(r)
	}
}

// retire closes a ring this member no longer uses and keeps its counters.
func (s *Server) retire(r *collective.Ring) {
	_ = r.Close()
	st := r.Stats()
	s.totals.Ops += st.Ops
	s.totals.BytesSent += st.BytesSent
	s.totals.BytesReceived += st.BytesReceived
	s.totals.Busy += st.Busy
}

// stats is STATS's payload: the counters of every ring, the live one's too.
func (s *Server) stats() []byte {
	t := s.totals
	if s.live != nil {
		st := s.live.Stats()
		t.Ops += st.Ops
		t.BytesSent += st.BytesSent
		t.Busy += st.Busy
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(t.Ops))
	b = binary.LittleEndian.AppendUint64(b, uint64(t.BytesSent))
	return binary.LittleEndian.AppendUint64(b, uint64(t.Busy))
}

// remap replaces the mapping with the first n bytes of the memory file;
// on failure the old mapping stays.
func (s *Server) remap(n uint64) error {
	if n == 0 {
		s.unmap()
		return nil
	}
	// A mapping past the file's end would fault (SIGBUS) when touched.
	fi, err := s.mem.Stat()
	if err != nil {
		return fmt.Errorf("ringd: MAP: %w", err)
	}
	if n > math.MaxInt || int64(n) > fi.Size() {
		return fmt.Errorf("ringd: MAP of %d bytes: the memory file holds %d", n, fi.Size())
	}
	b, err := unix.Mmap(int(s.mem.Fd()), 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("ringd: MAP of %d bytes: mmap: %w", n, err)
	}
	s.unmap()
	s.mapping = b
	s.floats = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n/4)
	return nil
}

func (s *Server) unmap() {
	if s.mapping == nil {
		return
	}
	if err := unix.Munmap(s.mapping); err != nil {
		s.log.Warn("ringd: munmap", "err", err)
	}
	s.mapping, s.floats = nil, nil
}

// slice is elements [offset, offset+count) of the mapping.
func (s *Server) slice(offset, count uint64) ([]float32, error) {
	n := uint64(len(s.floats))
	if count > n || offset > n-count {
		return nil, fmt.Errorf("ringd: elements [%d, %d+%d) are outside the mapping of %d float32 elements", offset, offset, count, n)
	}
	return s.floats[offset : offset+count], nil
}
