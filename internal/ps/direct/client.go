package direct

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"golang.org/x/sys/unix"

	"elasticdl/internal/tlsid"
	"elasticdl/proto/pserverpb"
)

// ErrUnsupported: the server answered the preface with something else (a
// PS that only speaks gRPC); the caller should use gRPC for this server.
var ErrUnsupported = errors.New("direct: the server does not speak the direct protocol")

const (
	// handshakeTimeout bounds dialing and the preface's echo when the
	// caller's context has no earlier deadline.
	handshakeTimeout = 10 * time.Second
	// maxIdle is how many idle connections a client keeps.
	maxIdle = 4
)

// Client calls one server. It is safe for concurrent use: each call takes
// a connection of its own, and gives it back when released.
type Client struct {
	addr   string
	dialer net.Dialer
	// creds, when set, open every connection with a mutual TLS handshake
	// with a PS.
	creds *tlsid.Creds
	bufs  bufferPool

	mu          sync.Mutex
	idle        []*clientConn
	unsupported bool
	closed      bool
	route       localRoute
	// want is the most contents a request or an answer has had: a local
	// connection's shared region is made to hold them.
	want int
	// noShared: shared memory failed (here, or the server refused it);
	// local connections go on without it.
	noShared bool
}

// NewClient returns a client of the server at addr (host:port); it
// connects on the first call.
func NewClient(addr string) *Client { return NewClientTLS(addr, nil) }

// NewClientTLS is NewClient over mutual TLS with creds to a server of
// role PS (a Mux of NewMuxTLS); nil creds is NewClient.
func NewClientTLS(addr string, creds *tlsid.Creds) *Client {
	return &Client{addr: addr, creds: creds, dialer: net.Dialer{
		// A server that vanished without closing (node lost) is noticed
		// within about a minute, as gRPC's keepalive would.
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 10 * time.Second, Count: 3},
	}}
}

// Push sends a PushGradientsRequest. The answer's tensor contents alias
// the connection's buffer: release gives the connection back, after the
// caller is done with them. release is nil when err is not.
func (c *Client) Push(ctx context.Context, req *pserverpb.PushGradientsRequest) (resp *pserverpb.PushGradientsResponse, release func(), err error) {
	resp = &pserverpb.PushGradientsResponse{}
	release, err = c.call(ctx, kindPush, req, req.GetGradients(), resp, func() []*pserverpb.Tensor { return resp.DenseParameters })
	if err != nil {
		return nil, nil, err
	}
	return resp, release, nil
}

// Pull sends a PullDenseParametersRequest; as Push.
func (c *Client) Pull(ctx context.Context, req *pserverpb.PullDenseParametersRequest) (resp *pserverpb.PullDenseParametersResponse, release func(), err error) {
	resp = &pserverpb.PullDenseParametersResponse{}
	release, err = c.call(ctx, kindPull, req, nil, resp, func() []*pserverpb.Tensor { return resp.DenseParameters })
	if err != nil {
		return nil, nil, err
	}
	return resp, release, nil
}

// Unsupported reports whether the server turned out not to speak the
// direct protocol.
func (c *Client) Unsupported() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unsupported
}

// Close closes the idle connections; those lent out close when released.
func (c *Client) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	for _, cc := range idle {
		cc.close()
	}
	return nil
}

// SharesMemory reports whether the client's local connections lend their
// server a shared memory region (as they do unless that failed).
func (c *Client) SharesMemory() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.noShared
}

// localRoute says which socket a client dials: the server's local one
// (Mux.ServeLocal) once a hello has named it, until dialing it fails; a
// name that failed (another host, a server gone) is not taken again, and
// a relaunched server names a new one. Client.mu guards it.
type localRoute struct{ name, failed string }

// told records the local socket a hello named ("" for none).
func (r *localRoute) told(name string) {
	if name != "" && name != r.failed {
		r.name = name
	}
}

// unreachable records that dialing the local socket name failed.
func (r *localRoute) unreachable(name string) {
	if r.name == name {
		r.name, r.failed = "", name
	}
}

// keeps says whether an idle connection is worth keeping: a TCP one makes
// way for the local socket, once there is one.
func (r *localRoute) keeps(local bool) bool { return local || r.name == "" }

// clientConn is one connection and its framer.
type clientConn struct {
	// conn carries the frames: raw, or the TLS connection over it.
	conn, raw net.Conn
	f         *framer
	local     bool // on the server's local socket
}

func (cc *clientConn) close() {
	cc.raw.Close()
	unmapRegion(cc.f.shared)
	cc.f.shared = nil
}

// call sends req and reads the answer into resp. Errors are gRPC
// statuses: Unavailable when the server could not be reached or the
// connection broke (the request may or may not have been applied, as
// with gRPC), the caller's context's, or the server's.
func (c *Client) call(ctx context.Context, k kind, req proto.Message, reqTensors []*pserverpb.Tensor, resp proto.Message, respTensors func() []*pserverpb.Tensor) (release func(), err error) {
	need := 0
	for _, t := range reqTensors {
		need += len(t.GetContent())
	}
	cc, err := c.get(ctx, need)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	_ = cc.conn.SetDeadline(deadline)
	// A cancellation interrupts the call by expiring the deadline; the
	// connection is then in an unknown state and is closed.
	interrupt := context.AfterFunc(ctx, func() { _ = cc.conn.SetDeadline(time.Unix(1, 0)) })
	gotK, hdr, contents, err := c.exchange(cc, k, req, reqTensors)
	if !interrupt() || err != nil {
		cc.close()
		return nil, c.connError(ctx, err)
	}
	c.mu.Lock()
	c.want = max(c.want, need, cc.f.lastContents)
	c.mu.Unlock()
	switch gotK {
	case kindReply | k:
		if err := proto.Unmarshal(hdr, resp); err != nil {
			cc.close()
			return nil, status.Errorf(codes.Internal, "direct %s: answer: %v", c.addr, err)
		}
		if err := attach(respTensors(), contents); err != nil {
			cc.close()
			return nil, status.Errorf(codes.Internal, "direct %s: %v", c.addr, err)
		}
		var once sync.Once
		return func() { once.Do(func() { c.put(cc) }) }, nil
	case kindError:
		st := &spb.Status{}
		if err := proto.Unmarshal(hdr, st); err != nil {
			cc.close()
			return nil, status.Errorf(codes.Internal, "direct %s: error answer: %v", c.addr, err)
		}
		c.put(cc)
		return nil, status.ErrorProto(st)
	default:
		cc.close()
		return nil, status.Errorf(codes.Internal, "direct %s: %v: answer of kind %d to a request of kind %d", c.addr, errProtocol, gotK, k)
	}
}

func (c *Client) exchange(cc *clientConn, k kind, req proto.Message, reqTensors []*pserverpb.Tensor) (kind, []byte, [][]byte, error) {
	if err := cc.f.write(k, req, reqTensors); err != nil {
		return 0, nil, nil, err
	}
	return cc.f.read()
}

// connError turns a failed exchange into a status.
func (c *Client) connError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return status.FromContextError(cerr).Err()
	}
	// The connection's deadline is the context's, and may strike before
	// the context's own timer.
	if d, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
		return status.FromContextError(context.DeadlineExceeded).Err()
	}
	if errors.Is(err, errProtocol) {
		return status.Errorf(codes.Internal, "direct %s: %v", c.addr, err)
	}
	if c.creds != nil && refused(err) {
		return status.Errorf(codes.Unauthenticated, "direct %s: %v", c.addr, err)
	}
	return status.Errorf(codes.Unavailable, "direct %s: %v", c.addr, err)
}

// get lends an idle connection, or dials one; need is the size of the
// request's contents.
func (c *Client) get(ctx context.Context, need int) (*clientConn, error) {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return nil, status.Errorf(codes.Canceled, "direct %s: client closed", c.addr)
	case c.unsupported:
		c.mu.Unlock()
		return nil, ErrUnsupported
	case len(c.idle) > 0:
		cc := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		c.mu.Unlock()
		return cc, nil
	}
	local := c.route.name
	c.mu.Unlock()
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	if local != "" {
		cc, err := c.dialLocal(hctx, local, need)
		if err == nil {
			return cc, nil
		}
		if ctx.Err() != nil {
			return nil, c.connError(ctx, err)
		}
		c.mu.Lock()
		c.route.unreachable(local)
		c.mu.Unlock()
	}
	return c.dialTCP(ctx, hctx)
}

// dialLocal connects to the server's local socket, lending it a shared
// region for contents of need bytes.
func (c *Client) dialLocal(ctx context.Context, local string, need int) (*clientConn, error) {
	raw, err := c.dialer.DialContext(ctx, "unix", "@"+local)
	if err != nil {
		return nil, err
	}
	conn, err := c.secure(ctx, raw)
	if err == nil {
		if _, err = c.handshake(ctx, conn); err == nil {
			// The region's fd travels on the socket, which carries the
			// frames in plaintext also with TLS (plainLocal).
			var shared []byte
			if shared, err = c.lendRegion(ctx, raw.(*net.UnixConn), need); err == nil {
				cc := &clientConn{conn: conn, raw: raw, f: newFramer(conn, &c.bufs), local: true}
				cc.f.shared = shared
				return cc, nil
			}
		}
	}
	raw.Close()
	return nil, err
}

// dialTCP connects to the server's port; hctx is ctx bounded by
// handshakeTimeout.
func (c *Client) dialTCP(ctx, hctx context.Context) (*clientConn, error) {
	raw, err := c.dialer.DialContext(hctx, "tcp", c.addr)
	if err != nil {
		return nil, c.connError(ctx, err)
	}
	conn, err := c.secure(hctx, raw)
	var name string
	if err == nil {
		name, err = c.handshake(hctx, conn)
	}
	if err != nil {
		raw.Close()
		if errors.Is(err, ErrUnsupported) {
			c.mu.Lock()
			c.unsupported = true
			c.mu.Unlock()
			return nil, err
		}
		return nil, c.connError(ctx, err)
	}
	c.mu.Lock()
	c.route.told(name)
	c.mu.Unlock()
	return &clientConn{conn: conn, raw: raw, f: newFramer(conn, &c.bufs)}, nil
}

// secure runs the TLS handshake on a new connection when the client has
// credentials, and returns the connection to send frames on.
func (c *Client) secure(ctx context.Context, raw net.Conn) (net.Conn, error) {
	if c.creds == nil {
		return raw, nil
	}
	tc, err := clientHandshake(ctx, c.creds, raw)
	if err != nil {
		return nil, err
	}
	return plainLocal(ctx, tc, false)
}

// handshake sends the preface and reads the server's hello: the preface
// back, and the name of its local socket, if any.
func (c *Client) handshake(ctx context.Context, conn net.Conn) (localName string, err error) {
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, Preface); err != nil {
		return "", err
	}
	hello := make([]byte, len(Preface)+1+maxLocalName)
	n, err := io.ReadFull(conn, hello[:len(Preface)+1])
	if n > 0 && string(hello[:min(n, len(Preface))]) != Preface[:min(n, len(Preface))] {
		return "", fmt.Errorf("%w (it answered %q)", ErrUnsupported, hello[:n])
	}
	if err != nil {
		return "", err
	}
	l := int(hello[len(Preface)])
	if l > maxLocalName {
		return "", fmt.Errorf("%w: a local socket name of %d bytes", errProtocol, l)
	}
	name := hello[len(Preface)+1 : len(Preface)+1+l]
	if _, err := io.ReadFull(conn, name); err != nil {
		return "", unexpected(err)
	}
	return string(name), nil
}

// lendRegion offers the server of a new local connection a shared memory
// region for contents of need bytes (or the most seen so far). It returns
// the region, nil when there is none; an error is the connection's.
func (c *Client) lendRegion(ctx context.Context, conn *net.UnixConn, need int) ([]byte, error) {
	c.mu.Lock()
	size := regionSize(max(need, c.want))
	if c.noShared {
		size = 0
	}
	c.mu.Unlock()
	var mem []byte
	fd := -1
	if size > 0 {
		var err error
		if mem, fd, err = createRegion(size); err != nil {
			c.giveUpShared()
		} else {
			defer unix.Close(fd)
		}
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	accepted, err := offerRegion(conn, fd, size)
	if err != nil || !accepted {
		unmapRegion(mem)
		if err == nil && mem != nil {
			c.giveUpShared()
		}
		return nil, err
	}
	return mem, nil
}

// NoSharedMemory makes the client's local connections carry contents on
// the socket, without a shared region (for measurements).
func (c *Client) NoSharedMemory() { c.giveUpShared() }

func (c *Client) giveUpShared() {
	c.mu.Lock()
	c.noShared = true
	c.mu.Unlock()
}

// put gives a connection back, or closes it when enough are idle or its
// shared region has grown too small, and its last answer's buffer.
func (c *Client) put(cc *clientConn) {
	cc.f.releaseRecv()
	c.mu.Lock()
	fits := regionFits(cc.local, c.noShared, len(cc.f.shared), c.want)
	if !c.closed && len(c.idle) < maxIdle && c.route.keeps(cc.local) && fits {
		c.idle = append(c.idle, cc)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	cc.close()
}
