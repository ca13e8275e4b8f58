package collective

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	"elasticdl/internal/tlsid"
)

// handshakeTimeout bounds how long the Listener waits for a connection's
// hello before dropping it (a stray or stuck dialer).
const handshakeTimeout = 10 * time.Second

// Dial retry backoff while the next member's listener is not up yet or not
// yet forming this version.
const (
	minDialBackoff = 5 * time.Millisecond
	maxDialBackoff = 200 * time.Millisecond
)

// A Listener accepts ring connections on one address for the life of the
// process: a worker keeps one Listener across all the rings it is a member
// of, one at a time, with increasing versions. Every connection is
// handshaken by the Listener and handed to the Form waiting for it, or
// refused with a reason the dialer reports.
type Listener struct {
	ln net.Listener
	// local is the Unix socket same-host peers connect to (local.go); nil
	// where there is none.
	local net.Listener
	log   *slog.Logger
	// creds make every link mutual TLS between workers (tls.go); nil:
	// plaintext.
	creds    *tlsid.Creds
	refusals *tlsid.Refusals

	mu      sync.Mutex
	waiting *waiter // the Form in progress, if any
	newest  int64   // highest version any Form on this Listener has used
	pending map[net.Conn]struct{}
	closed  bool
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// waiter is a Form waiting for its previous member's connection.
type waiter struct {
	version int64
	rank    int
	world   int
	peers   uint64
	peerIDs []int         // Config.PeerIDs
	conn    chan net.Conn // capacity 1: the accepted link
	filled  bool          // a connection has been taken for it
	gone    bool          // the Form has returned
	stop    chan error    // capacity 1: why the Form must give up (superseded)
}

// Listen listens for ring connections on addr (host:port; port 0 picks a
// free one), and, for a loopback address on Linux, on the Unix socket
// same-host peers dial instead (local.go). logger may be nil.
func Listen(addr string, logger *slog.Logger) (*Listener, error) {
	return listen(addr, logger, true, nil)
}

// ListenTLS is Listen with every link, accepted here or dialed by its
// Forms, mutual TLS with creds between workers of the job; nil creds is
// Listen.
func ListenTLS(addr string, logger *slog.Logger, creds *tlsid.Creds) (*Listener, error) {
	return listen(addr, logger, true, creds)
}

// listen is ListenTLS; without local, over TCP only.
func listen(addr string, logger *slog.Logger, local bool, creds *tlsid.Creds) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("collective: listen on %s: %w", addr, err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Listener{
		ln:       ln,
		log:      logger,
		creds:    creds,
		refusals: tlsid.NewRefusals(logger),
		newest:   math.MinInt64,
		pending:  make(map[net.Conn]struct{}),
		done:     make(chan struct{}),
	}
	if local {
		l.local = listenLocal(ln.Addr().String())
	}
	l.wg.Add(1)
	go l.acceptLoop(l.ln)
	if l.local != nil {
		l.wg.Add(1)
		go l.acceptLoop(l.local)
	}
	return l, nil
}

// Addr is the address the Listener is bound to.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close stops accepting, drops connections still in their handshake and
// makes a Form in progress fail with ErrClosed. Rings already formed are not
// affected. It waits for the Listener's goroutines.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	err := l.ln.Close()
	if l.local != nil {
		_ = l.local.Close()
	}
	for c := range l.pending {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	if err != nil {
		return fmt.Errorf("collective: close listener %s: %w", l.Addr(), err)
	}
	return nil
}

func (l *Listener) acceptLoop(ln net.Listener) {
	defer l.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary trouble such as running out of file descriptors.
			l.log.Warn("collective: accept failed", "addr", l.Addr(), "err", err)
			select {
			case <-l.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = c.Close()
			return
		}
		l.pending[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go l.handshake(c)
	}
}

// handshake reads a connection's hello, answers it and, when it is the
// link a waiting Form expects, hands it over.
func (l *Listener) handshake(raw net.Conn) {
	defer l.wg.Done()
	kept := false
	defer func() {
		l.mu.Lock()
		delete(l.pending, raw)
		l.mu.Unlock()
		if !kept {
			_ = raw.Close()
		}
	}()
	_ = raw.SetDeadline(time.Now().Add(handshakeTimeout))
	c, peer, err := l.secureAccept(raw)
	if err != nil {
		return
	}
	buf := make([]byte, helloLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		l.log.Debug("collective: connection without a handshake", "remote", c.RemoteAddr(), "err", err)
		return
	}
	h, err := parseHello(buf)
	if err != nil {
		l.log.Warn("collective: refused connection", "remote", c.RemoteAddr(), "reason", err)
		_ = writeReply(c, statusRefused, err.Error())
		return
	}
	status, reason, w := l.route(h, peer)
	if status == statusRefused {
		l.log.Warn("collective: refused connection", "remote", c.RemoteAddr(),
			"version", h.version, "from", h.from, "reason", reason)
	}
	err = writeReply(c, status, reason)
	if err == nil && status == statusOK {
		c, err = plainLocal(context.Background(), c, true) // raw's deadline bounds it
	}
	if err != nil || status != statusOK {
		if w != nil {
			l.mu.Lock()
			w.filled = false // let the dialer try again
			l.mu.Unlock()
		}
		return
	}
	_ = c.SetDeadline(time.Time{})
	l.mu.Lock()
	defer l.mu.Unlock()
	if !w.gone {
		w.conn <- c // never blocks: one connection per waiter (filled)
		kept = true
	}
}

// route decides what a hello gets. A connection of the version being formed
// must come from this member's previous member with the same world and
// member list. Another version is told to retry when it is newer (this
// process has not started forming it yet) or the newest one not forming at
// the moment (a Form about to be retried), and refused when it is older: a
// late connection of a previous ring.
func (l *Listener) route(h hello, peer *tlsid.Identity) (status byte, reason string, w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w = l.waiting
	if w == nil || h.version != w.version {
		if h.version >= l.newest { // not started yet, or a retried Form of the newest
			return statusRetry, fmt.Sprintf("ring version %d is not forming here yet", h.version), nil
		}
		return statusRefused, fmt.Sprintf("ring version %d is stale here: this member has gone on to version %d", h.version, l.newest), nil
	}
	prev := mod(w.rank-1, w.world)
	switch {
	case h.world != w.world:
		return statusRefused, fmt.Sprintf("ring version %d: dialer has %d members, this member %d", h.version, h.world, w.world), nil
	case h.peers != w.peers:
		return statusRefused, fmt.Sprintf("ring version %d: dialer's member list differs from this member's", h.version), nil
	case h.to != w.rank:
		return statusRefused, fmt.Sprintf("ring version %d: dialer wants rank %d, this member is rank %d", h.version, h.to, w.rank), nil
	case h.from != prev:
		return statusRefused, fmt.Sprintf("ring version %d: connection from rank %d, this member (rank %d) accepts rank %d only", h.version, h.from, w.rank, prev), nil
	case w.filled:
		return statusRefused, fmt.Sprintf("ring version %d: rank %d is already connected", h.version, h.from), nil
	}
	if why := checkDialer(peer, w, h.from); why != "" {
		return statusRefused, fmt.Sprintf("ring version %d: %s", h.version, why), nil
	}
	w.filled = true
	return statusOK, "", w
}

// register makes cfg's Form the one this Listener accepts for. A Form of an
// older version still waiting is superseded; a version older than one
// already used here is refused.
func (l *Listener) register(cfg Config) (*waiter, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if cfg.Version < l.newest {
		return nil, fmt.Errorf("collective: ring version %d is older than version %d already used on listener %s", cfg.Version, l.newest, l.Addr())
	}
	if l.waiting != nil && l.waiting.version == cfg.Version {
		return nil, fmt.Errorf("collective: ring version %d is already forming on listener %s", cfg.Version, l.Addr())
	}
	if old := l.waiting; old != nil {
		old.stop <- fmt.Errorf("%w: version %d replaced version %d", ErrSuperseded, cfg.Version, old.version)
	}
	l.newest = cfg.Version
	w := &waiter{
		version: cfg.Version,
		rank:    cfg.Rank,
		world:   len(cfg.Peers),
		peers:   peersHash(cfg.Peers),
		peerIDs: cfg.PeerIDs,
		conn:    make(chan net.Conn, 1),
		stop:    make(chan error, 1),
	}
	l.waiting = w
	return w, nil
}

// unregister ends w's wait; a connection handed over but not taken is
// closed.
func (l *Listener) unregister(w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.gone = true
	if l.waiting == w {
		l.waiting = nil
	}
	select {
	case c := <-w.conn:
		_ = c.Close()
	default:
	}
}

// Form joins the ring cfg describes: it dials the next member (retrying with
// a short backoff while that member's listener is not up or not yet forming
// this version), accepts the previous member's connection, and returns the
// Ring once both links are handshaken. It fails when a neighbour refuses
// (ErrRefused), when ctx ends, or when Timeout passes, whichever is first.
// A world of one opens no connection (l may then be nil).
//
// A Listener forms one ring at a time: a Form of a newer version makes one
// still waiting fail with ErrSuperseded, and a version older than one
// already used on this Listener is refused, as are connections of it.
func (l *Listener) Form(ctx context.Context, cfg Config) (*Ring, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := len(cfg.Peers)
	if n == 1 {
		return newRing(cfg, nil, nil), nil
	}
	start := time.Now()
	w, err := l.register(cfg)
	if err != nil {
		return nil, err
	}
	defer l.unregister(w)
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout,
		fmt.Errorf("collective: form did not complete within %v: %w", cfg.Timeout, context.DeadlineExceeded))
	defer cancel()

	type dialed struct {
		c   net.Conn
		err error
	}
	dialCh := make(chan dialed, 1)
	go func() {
		c, err := dialNext(ctx, cfg, l.creds)
		dialCh <- dialed{c, err}
	}()

	prev := mod(cfg.Rank-1, n)
	var in, out net.Conn
	var errs []error
	inCh, doneCh := w.conn, ctx.Done()
	for inCh != nil || dialCh != nil {
		select {
		case in = <-inCh:
			inCh = nil
		case d := <-dialCh:
			dialCh, out = nil, d.c
			if d.err != nil {
				errs = append(errs, d.err)
				cancel()
				inCh = nil
			}
		case err := <-w.stop:
			errs = append(errs, err)
			cancel()
			inCh = nil
		case <-l.done:
			errs = append(errs, ErrClosed)
			cancel()
			inCh = nil
		case <-doneCh:
			doneCh = nil
			if inCh != nil {
				errs = append(errs, fmt.Errorf("rank %d (%s) did not connect: %w", prev, cfg.Peers[prev], context.Cause(ctx)))
				inCh = nil
			}
		}
	}
	if len(errs) > 0 {
		for _, c := range []net.Conn{in, out} {
			if c != nil {
				_ = c.Close()
			}
		}
		return nil, fmt.Errorf("collective: form ring version %d as rank %d of %d: %w", cfg.Version, cfg.Rank, n, errors.Join(errs...))
	}
	r := newRing(cfg, in, out)
	r.log.Info("collective: ring formed", "prev", cfg.Peers[prev], "next", cfg.Peers[(cfg.Rank+1)%n], "took", time.Since(start))
	return r, nil
}

// dialNext connects to the next member and handshakes, retrying until ctx
// ends while the member is unreachable or not yet forming this version.
func dialNext(ctx context.Context, cfg Config, creds *tlsid.Creds) (net.Conn, error) {
	n := len(cfg.Peers)
	next := (cfg.Rank + 1) % n
	addr := cfg.Peers[next]
	h := hello{version: cfg.Version, from: cfg.Rank, to: next, world: n, peers: peersHash(cfg.Peers)}
	log := cfg.logger()
	backoff := minDialBackoff
	var last error
	for attempt := 1; ; attempt++ {
		c, status, reason, err := handshakeDial(ctx, addr, h, creds, cfg)
		switch {
		case errors.Is(err, ErrRefused):
			return nil, err
		case err != nil:
			last = err
		case status == statusOK:
			return c, nil
		case status == statusRefused:
			return nil, fmt.Errorf("%w: rank %d at %s: %s", ErrRefused, next, addr, reason)
		default:
			last = errors.New(reason)
		}
		log.Debug("collective: dial retry", "next", addr, "attempt", attempt, "err", last)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dial rank %d at %s: %w (%d attempts, last: %v)", next, addr, context.Cause(ctx), attempt, last)
		case <-t.C:
		}
		backoff = min(2*backoff, maxDialBackoff)
	}
}

// handshakeDial makes one connection attempt. It returns the connection only
// when the reply is statusOK.
func handshakeDial(ctx context.Context, addr string, h hello, creds *tlsid.Creds, cfg Config) (net.Conn, byte, string, error) {
	raw, ok := dialLocal(ctx, addr)
	var err error
	if !ok {
		var d net.Dialer
		raw, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, 0, "", err
	}
	deadline, _ := ctx.Deadline() // Form always sets one
	_ = raw.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c, err := secureDial(ctx, creds, raw, cfg, h.to)
	if err != nil {
		_ = raw.Close()
		return nil, 0, "", err
	}
	if _, err := c.Write(h.marshal()); err != nil {
		_ = c.Close()
		return nil, 0, "", fmt.Errorf("send handshake: %w", err)
	}
	status, reason, err := readReply(c)
	if err != nil {
		_ = c.Close()
		return nil, 0, "", fmt.Errorf("read handshake reply: %w", err)
	}
	if status != statusOK {
		_ = c.Close()
		return nil, status, reason, nil
	}
	if c, err = plainLocal(ctx, c, false); err != nil {
		_ = raw.Close()
		return nil, 0, "", err
	}
	if !stop() { // ctx ended as the reply came: the deadline is already spoilt
		_ = c.Close()
		return nil, 0, "", context.Cause(ctx)
	}
	_ = c.SetDeadline(time.Time{})
	return c, statusOK, "", nil
}
