package direct

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"elasticdl/internal/tlsid"
	"elasticdl/proto/pserverpb"
)

// Handler answers the direct calls: a PS's PushGradients and
// PullDenseParameters. A request's tensor contents alias the connection's
// buffer: a handler must not keep them after it returns.
//
// out lends the handler a buffer for its answer's tensor contents, empty
// with some capacity: the connection's shared region when it has one (the
// memory the request's contents are in: write to it only once done reading
// them), else a pooled buffer. Contents laid back to back from the start
// of *out, in the answer's order, reach a client on a shared region
// without another copy. The handler may set *out to a larger buffer; it
// must not keep *out after it returns.
type Handler struct {
	Push func(ctx context.Context, req *pserverpb.PushGradientsRequest, out *[]byte) (*pserverpb.PushGradientsResponse, error)
	Pull func(ctx context.Context, req *pserverpb.PullDenseParametersRequest, out *[]byte) (*pserverpb.PullDenseParametersResponse, error)
}

// sniffTimeout bounds how long a new connection may take to send its
// first bytes before it is handed to gRPC as it is.
const sniffTimeout = 10 * time.Second

// Mux serves direct connections from a listener and hands every other
// connection to its Accept, for a gRPC server's Serve: one port, both
// transports.
type Mux struct {
	lis net.Listener
	h   Handler
	// sec is the mutual TLS every connection starts with; nil: plaintext.
	sec *muxTLS
	// local is the Unix socket direct connections may also use (see
	// ServeLocal); localName its name, told to every direct client.
	local     net.Listener
	localName string
	log       *slog.Logger
	ctx       context.Context
	stop      context.CancelFunc

	bufs      bufferPool
	answers   sync.Pool // *[]byte a Handler encodes an answer's contents into
	grpcConns chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
	acceptErr error // set before closed is closed

	mu    sync.Mutex
	conns map[*serverConn]struct{}
	wg    sync.WaitGroup
}

// NewMux starts accepting on lis, which Mux now owns: plaintext.
func NewMux(lis net.Listener, h Handler, log *slog.Logger) *Mux {
	return NewMuxTLS(lis, h, log, nil)
}

// NewMuxTLS is NewMux with every connection (TCP and local) opening with
// a mutual TLS handshake with creds; nil creds is NewMux. The gRPC server
// that Serves the Mux then takes tlsid.Handshaken() credentials.
func NewMuxTLS(lis net.Listener, h Handler, log *slog.Logger, creds *tlsid.Creds) *Mux {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	m := &Mux{lis: lis, h: h, log: log, ctx: ctx, stop: stop, grpcConns: make(chan net.Conn),
		closed: make(chan struct{}), conns: map[*serverConn]struct{}{}, sec: newMuxTLS(creds, log)}
	m.wg.Add(1)
	go m.acceptLoop(lis, true)
	return m
}

// ServeLocal also serves direct connections on the abstract Unix socket
// @name (Linux; no file, gone with the process), and tells every direct
// client its name: a client on the same host (network namespace) then
// connects there, sparing both sides TCP's work. name must be unique to
// this server (a relaunched server must pick another). Call it before
// the first client connects.
func (m *Mux) ServeLocal(name string) error {
	lis, err := net.Listen("unix", "@"+name)
	if err != nil {
		return fmt.Errorf("direct: listen on @%s: %w", name, err)
	}
	m.mu.Lock()
	select {
	case <-m.closed:
		m.mu.Unlock()
		lis.Close()
		return net.ErrClosed
	default:
	}
	m.local, m.localName = lis, name
	m.mu.Unlock()
	m.wg.Add(1)
	go m.acceptLoop(lis, false)
	return nil
}

// acceptLoop routes lis's connections; main: lis is the gRPC port, whose
// failure closes the Mux.
func (m *Mux) acceptLoop(lis net.Listener, main bool) {
	defer m.wg.Done()
	for {
		c, err := lis.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if main {
				m.shut(err)
			}
			return
		}
		m.wg.Add(1)
		go m.route(c)
	}
}

// route reads the connection's first bytes: the direct preface makes it a
// direct connection, anything else goes to gRPC with those bytes first.
// With TLS, that is after the handshake, and gRPC's ALPN protocol (h2)
// goes to gRPC at once.
func (m *Mux) route(raw net.Conn) {
	defer m.wg.Done()
	sc := &serverConn{conn: raw, raw: raw}
	if !m.track(sc) {
		raw.Close()
		return
	}
	c := raw
	if m.sec != nil {
		conn, id, grpc, err := m.sec.handshake(m.ctx, raw)
		if err != nil {
			m.untrack(sc)
			raw.Close()
			return
		}
		if grpc {
			m.untrack(sc)
			m.toGRPC(conn)
			return
		}
		c, sc.conn, sc.peer = conn, conn, &id
	}
	buf := make([]byte, len(Preface))
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	n, err := io.ReadFull(c, buf)
	_ = c.SetReadDeadline(time.Time{})
	if err == nil && string(buf) == Preface {
		m.serve(sc)
		return
	}
	m.untrack(sc)
	m.toGRPC(&prefixConn{Conn: c, prefix: buf[:n]})
}

// toGRPC hands a connection to Accept.
func (m *Mux) toGRPC(c net.Conn) {
	select {
	case m.grpcConns <- c:
	case <-m.closed:
		c.Close()
	}
}

// track adds a connection to those Close and Stop close; false once
// closed.
func (m *Mux) track(sc *serverConn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.closed:
		return false
	default:
	}
	m.conns[sc] = struct{}{}
	return true
}

func (m *Mux) untrack(sc *serverConn) {
	m.mu.Lock()
	delete(m.conns, sc)
	m.mu.Unlock()
}

// Accept returns the next connection that is not a direct one.
func (m *Mux) Accept() (net.Conn, error) {
	select {
	case c := <-m.grpcConns:
		return c, nil
	case <-m.closed:
		return nil, m.acceptErr
	}
}

// Addr is the listener's address.
func (m *Mux) Addr() net.Addr { return m.lis.Addr() }

// Close stops accepting, and closes the direct connections that wait for
// a request; one being answered is closed once its answer is written. It
// does not wait: Stop does.
func (m *Mux) Close() error {
	m.shut(net.ErrClosed)
	m.mu.Lock()
	for sc := range m.conns {
		sc.closeIdle()
	}
	m.mu.Unlock()
	return nil
}

// Stop closes the Mux, gives the requests being answered up to grace to
// finish, then closes every connection and cancels the handlers' context.
// It does not wait for handlers that are still running then.
func (m *Mux) Stop(grace time.Duration) {
	m.Close()
	finished := make(chan struct{})
	go func() { m.wg.Wait(); close(finished) }()
	select {
	case <-finished:
		return
	case <-time.After(grace):
	}
	m.stop()
	m.mu.Lock()
	for sc := range m.conns {
		sc.raw.Close()
	}
	m.mu.Unlock()
}

func (m *Mux) shut(err error) {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.acceptErr = err
		close(m.closed)
		local := m.local
		m.mu.Unlock()
		m.lis.Close()
		if local != nil {
			local.Close()
		}
	})
}

// serverConn is one direct connection being served.
type serverConn struct {
	// conn carries the frames: raw (also with TLS on the local socket,
	// after the handshake), or the TLS connection over it. Only raw is
	// closed from other goroutines.
	conn, raw net.Conn
	// peer is the client's proven identity; nil without TLS.
	peer *tlsid.Identity
	mu   sync.Mutex
	busy bool // answering a request
	done bool // close after the answer
}

func (sc *serverConn) closeIdle() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.done = true
	if !sc.busy {
		sc.raw.Close()
	}
}

// setBusy marks the connection busy or idle; false when it is to close.
func (sc *serverConn) setBusy(busy bool) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.busy = busy
	return !sc.done
}

// serve answers requests on a direct connection until it closes.
func (m *Mux) serve(sc *serverConn) {
	c := sc.conn
	defer func() {
		m.untrack(sc)
		// Without TLS's close_notify, whose write could wait on a client
		// that stopped reading.
		sc.raw.Close()
	}()
	m.mu.Lock()
	name := m.localName
	m.mu.Unlock()
	if _, err := c.Write(appendHello(nil, name)); err != nil {
		return
	}
	f := newFramer(c, &m.bufs)
	defer f.releaseRecv()
	// The region's fd travels on the socket itself, which carries the
	// frames too (in plaintext, also with TLS: plainLocal).
	if uc, ok := sc.raw.(*net.UnixConn); ok {
		mem, refused, err := acceptRegion(uc)
		if err != nil {
			return
		}
		if refused != nil {
			m.log.Warn("direct connection without shared memory", "err", refused)
		}
		// Unmapped after the last handler returned: serve calls them.
		defer unmapRegion(mem)
		f.shared = mem
	}
	for {
		k, hdr, contents, err := f.read()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				m.log.Debug("direct connection ended", "remote", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		if !sc.setBusy(true) {
			return
		}
		err = m.answer(f, sc.peer, k, hdr, contents)
		f.releaseRecv()
		if !sc.setBusy(false) || err != nil {
			if err != nil {
				m.log.Debug("direct connection dropped", "remote", c.RemoteAddr().String(), "err", err)
			}
			return
		}
	}
}

// answer handles one request and writes its answer; an error is the
// connection's (a broken frame, a failed write).
func (m *Mux) answer(f *framer, peer *tlsid.Identity, k kind, hdr []byte, contents [][]byte) error {
	var out *[]byte
	if f.shared != nil {
		region := f.shared[:0]
		out = &region
	} else {
		if out, _ = m.answers.Get().(*[]byte); out == nil {
			out = new([]byte)
		}
		*out = (*out)[:0]
		defer m.answers.Put(out) // after the write: it sends from *out
	}
	var (
		resp    proto.Message
		tensors []*pserverpb.Tensor
		err     error
	)
	switch k {
	case kindPush:
		req := &pserverpb.PushGradientsRequest{}
		if err := proto.Unmarshal(hdr, req); err != nil {
			return fmt.Errorf("%w: push: %v", errProtocol, err)
		}
		if err := attach(req.Gradients, contents); err != nil {
			return err
		}
		var r *pserverpb.PushGradientsResponse
		if err = m.sec.authorize(peer, kindPush, req); err != nil {
			break
		}
		if r, err = m.h.Push(m.ctx, req, out); err == nil {
			resp, tensors = r, r.GetDenseParameters()
		}
	case kindPull:
		req := &pserverpb.PullDenseParametersRequest{}
		if err := proto.Unmarshal(hdr, req); err != nil {
			return fmt.Errorf("%w: pull: %v", errProtocol, err)
		}
		if err := attach(nil, contents); err != nil {
			return err
		}
		var r *pserverpb.PullDenseParametersResponse
		if err = m.sec.authorize(peer, kindPull, req); err != nil {
			break
		}
		if r, err = m.h.Pull(m.ctx, req, out); err == nil {
			resp, tensors = r, r.GetDenseParameters()
		}
	default:
		err = status.Errorf(codes.Unimplemented, "direct: unknown request kind %d", k)
	}
	if err != nil {
		return f.write(kindError, status.Convert(err).Proto(), nil)
	}
	return f.write(kindReply|k, resp, tensors)
}

// prefixConn is a connection whose first bytes were already read.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
