package tlsid

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// ServerOption is a gRPC server's transport credentials: mutual TLS with
// c, or plaintext when c is nil.
func ServerOption(c *Creds) grpc.ServerOption {
	if c == nil {
		return grpc.Creds(insecure.NewCredentials())
	}
	return grpc.Creds(credentials.NewTLS(c.ServerConfig()))
}

// DialOption is a gRPC client's transport credentials: mutual TLS with c
// to a server of one of the roles accept, or plaintext when c is nil.
func DialOption(c *Creds, accept ...Role) grpc.DialOption {
	if c == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(c.ClientConfig(accept...)))
}

// FromContext is the identity of a gRPC call's peer.
func FromContext(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, fmt.Errorf("%w: no peer", ErrUnauthenticated)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return Identity{}, fmt.Errorf("%w: %s did not connect over TLS", ErrUnauthenticated, p.Addr)
	}
	return PeerIdentity(info.State)
}

// Policy decides whether id may call method with req: nil, or an error
// saying why not.
type Policy func(method string, id Identity, req any) error

// workerRequest is every request that names the worker it comes from.
type workerRequest interface{ GetWorkerId() int32 }

// AsSelf refuses a request from a worker that names another worker: a
// worker may only ask and report as itself.
func AsSelf(id Identity, req any) error {
	if r, ok := req.(workerRequest); ok && id.Role == Worker && int(r.GetWorkerId()) != id.ID {
		return fmt.Errorf("%w: %s asks as worker %d", ErrPermissionDenied, id, r.GetWorkerId())
	}
	return nil
}

// Roles is a Policy that lets each method be called by the roles the table
// names (a method it lacks by none), workers only as themselves.
func Roles(table map[string][]Role) Policy {
	return func(method string, id Identity, req any) error {
		allowed := false
		for _, r := range table[method] {
			allowed = allowed || r == id.Role
		}
		if !allowed {
			return fmt.Errorf("%w: %s may not call %s", ErrPermissionDenied, id, method)
		}
		return AsSelf(id, req)
	}
}

// Refusals logs each refused peer and method once: a misconfigured or
// hostile peer retries, and one line says what the operator must know.
type Refusals struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]bool
}

// NewRefusals logs to log.
func NewRefusals(log *slog.Logger) *Refusals {
	return &Refusals{log: log, seen: map[string]bool{}}
}

// Log logs err for peer and what once.
func (r *Refusals) Log(peerDesc, what string, err error) {
	key := peerDesc + " " + what
	r.mu.Lock()
	first := !r.seen[key] && len(r.seen) < 10000
	if first {
		r.seen[key] = true
	}
	r.mu.Unlock()
	if first {
		r.log.Warn("refused a call", "peer", peerDesc, "call", what, "err", err)
	}
}

// UnaryInterceptor authorizes every unary call by the peer's proven
// identity before the handler runs: a refused call changes nothing.
func UnaryInterceptor(p Policy, refusals *Refusals) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		id, err := FromContext(ctx)
		if err != nil {
			refusals.Log(peerAddr(ctx), info.FullMethod, err)
			return nil, status.Error(codes.Unauthenticated, err.Error())
		}
		if err := p(info.FullMethod, id, req); err != nil {
			refusals.Log(id.String(), info.FullMethod, err)
			code := codes.PermissionDenied
			if errors.Is(err, ErrUnauthenticated) {
				code = codes.Unauthenticated
			}
			return nil, status.Error(code, err.Error())
		}
		return h(ctx, req)
	}
}

// StreamInterceptor is UnaryInterceptor for streaming calls (no request
// to check: the policy sees nil).
func StreamInterceptor(p Policy, refusals *Refusals) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		id, err := FromContext(ss.Context())
		if err != nil {
			refusals.Log(peerAddr(ss.Context()), info.FullMethod, err)
			return status.Error(codes.Unauthenticated, err.Error())
		}
		if err := p(info.FullMethod, id, nil); err != nil {
			refusals.Log(id.String(), info.FullMethod, err)
			return status.Error(codes.PermissionDenied, err.Error())
		}
		return h(srv, ss)
	}
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown peer"
}

// ServerOptions are a gRPC server's credentials and, with TLS, the
// authorization of every call by p.
func ServerOptions(c *Creds, p Policy, log *slog.Logger) []grpc.ServerOption {
	if c == nil {
		return []grpc.ServerOption{ServerOption(nil)}
	}
	r := NewRefusals(log)
	return []grpc.ServerOption{ServerOption(c.LogRefusals(log)), grpc.ChainUnaryInterceptor(UnaryInterceptor(p, r)), grpc.ChainStreamInterceptor(StreamInterceptor(p, r))}
}

// Handshaken is a gRPC server's transport credentials for connections a
// listener already ran the TLS handshake on (the PS's port, which serves
// gRPC and the direct transport after one handshake): the handshake's
// result is what handlers see, as with ServerOption's. A connection that
// is not TLS is refused.
func Handshaken() credentials.TransportCredentials { return handshaken{} }

type handshaken struct{}

// tlsConn is a connection after its handshake (*tls.Conn).
type tlsConn interface {
	net.Conn
	ConnectionState() tls.ConnectionState
}

func (handshaken) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, ok := conn.(tlsConn)
	if !ok || !tc.ConnectionState().HandshakeComplete {
		return nil, nil, fmt.Errorf("%w: %s did not connect over TLS", ErrUnauthenticated, conn.RemoteAddr())
	}
	return tc, credentials.TLSInfo{State: tc.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (handshaken) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsid: Handshaken credentials are a server's only")
}

func (handshaken) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3"}
}

func (h handshaken) Clone() credentials.TransportCredentials { return h }

func (handshaken) OverrideServerName(string) error { return nil }

// HandshakenServerOptions are ServerOptions for a gRPC server behind a
// listener that runs the handshake itself (Handshaken).
func HandshakenServerOptions(c *Creds, p Policy, log *slog.Logger) []grpc.ServerOption {
	if c == nil {
		return []grpc.ServerOption{ServerOption(nil)}
	}
	r := NewRefusals(log)
	return []grpc.ServerOption{grpc.Creds(Handshaken()), grpc.ChainUnaryInterceptor(UnaryInterceptor(p, r)), grpc.ChainStreamInterceptor(StreamInterceptor(p, r))}
}
