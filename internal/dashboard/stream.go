package dashboard

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// errClosed ends a stream whose hub was closed.
var errClosed = errors.New("dashboard: hub closed")

// serveStream is GET api/stream: Server-Sent Events of the hub's state.
// Nothing is queued per stream: each one remembers the last seq it sent
// and, when woken, writes what the shared state holds beyond it.
func (h *Hub) serveStream(w http.ResponseWriter, r *http.Request) {
	select {
	case <-h.done:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "dashboard closing", http.StatusServiceUnavailable)
		return
	default:
	}
	select {
	case h.sem <- struct{}{}:
	default:
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many dashboard streams", http.StatusServiceUnavailable)
		return
	}
	defer func() { <-h.sem }()
	if r.Method == http.MethodHead {
		// net/http eats a HEAD's body writes: the stream would hold a
		// slot forever.
		w.Header().Set("Content-Type", "text/event-stream")
		return
	}
	s := &stream{h: h, w: w, rc: http.NewResponseController(w)}
	s.resume(r.Header.Get("Last-Event-ID"))
	err := s.run(r.Context())
	h.opts.Logger.Debug("dashboard stream ended", "remote", r.RemoteAddr, "err", err)
	if h.testStreamDone != nil {
		h.testStreamDone(err)
	}
}

type stream struct {
	h      *Hub
	w      http.ResponseWriter
	rc     *http.ResponseController
	synced bool     // holds the state up to seq of this hub's boot
	seq    uint64   // the last seq sent (or resumed from)
	parts  [][]byte // the next write, pieces of shared frames
	last   time.Time
	timer  *time.Timer
}

// resume takes a Last-Event-ID "BOOT.SEQ". Whether the deltas after SEQ are
// still in the ring is checked on the first fill; any other ID (another
// master's boot, garbage) gets a snapshot.
func (s *stream) resume(id string) {
	boot, seq, ok := strings.Cut(id, ".")
	if !ok || boot != s.h.boot {
		return
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return
	}
	s.synced, s.seq = true, n
}

func (s *stream) run(ctx context.Context) error {
	hdr := s.w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no") // ask buffering proxies to pass events on
	s.w.WriteHeader(http.StatusOK)
	s.parts = append(s.parts, []byte("retry: 1000\n\n"))
	s.timer = time.NewTimer(s.h.opts.Heartbeat)
	defer s.timer.Stop()
	for {
		closed := s.closed()
		st := s.h.cur.Load()
		s.fill(st)
		if err := s.write(); err != nil {
			return err
		}
		if st.ended {
			return nil
		}
		if closed {
			return errClosed
		}
		if err := s.wait(ctx, st); err != nil {
			return err
		}
	}
}

func (s *stream) closed() bool {
	select {
	case <-s.h.done:
		return true
	default:
		return false
	}
}

// fill queues what st holds beyond the stream's seq: the deltas when the
// ring still has them all, else a snapshot; then "ended" if the job ended.
func (s *stream) fill(st *state) {
	if st.seq == 0 || (s.synced && s.seq == st.seq && !st.ended) {
		return
	}
	if s.synced {
		items, ok := st.after(s.seq)
		for _, it := range items {
			s.parts = append(s.parts, it.frame)
		}
		s.synced = ok
	}
	if st.ended {
		// "ended" carries the whole final document, so no snapshot first.
		s.parts = append(s.parts, appendEventHead(nil, "ended", s.h.boot, st.seq),
			st.snapshotData(s.h.boot), []byte("\n"))
	} else if !s.synced {
		s.parts = append(s.parts, appendEventHead(nil, "snapshot", s.h.boot, st.seq),
			st.snapshotData(s.h.boot), []byte("\n"))
	}
	s.synced, s.seq = true, st.seq
}

// write sends the queued parts and flushes, under one write deadline; a
// stream that misses it is dropped (its browser reconnects and resyncs).
func (s *stream) write() error {
	if len(s.parts) == 0 {
		return nil
	}
	if s.h.testWrite != nil {
		s.h.testWrite(s, true)
		defer s.h.testWrite(s, false)
	}
	// ErrNotSupported (a ResponseWriter without a conn) leaves no deadline.
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.h.opts.WriteTimeout))
	for _, p := range s.parts {
		if _, err := s.w.Write(p); err != nil {
			return err
		}
	}
	clear(s.parts)
	s.parts = s.parts[:0]
	s.last = time.Now()
	return s.rc.Flush()
}

// wait returns when the state changed, at most one Interval after the
// previous write, or when a heartbeat is due, or the hub closes.
func (s *stream) wait(ctx context.Context, st *state) error {
	s.timer.Reset(time.Until(s.last.Add(s.h.opts.Heartbeat)))
	select {
	case <-st.changed:
	case <-s.h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.timer.C:
		s.parts = append(s.parts, []byte(":\n\n"))
		return nil
	}
	d := time.Until(s.last.Add(s.h.opts.Interval))
	if d <= 0 {
		return nil
	}
	s.timer.Reset(d)
	select {
	case <-s.timer.C:
	case <-s.h.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
