package direct

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"elasticdl/internal/tlsid"
	"elasticdl/proto/pserverpb"
)

// The ALPN protocols of the PS's port: gRPC's clients ask for h2 (and
// insist on it), direct clients for alpnDirect.
const (
	alpnGRPC   = "h2"
	alpnDirect = "elasticdl-direct"
)

// method names a direct call as gRPC does: the same call on the other
// transport, under one policy.
func method(k kind) string {
	if k == kindPush {
		return pserverpb.Pserver_PushGradients_FullMethodName
	}
	return pserverpb.Pserver_PullDenseParameters_FullMethodName
}

// directPolicy: workers push (as themselves); workers and the master
// (which reads the model) pull.
func directPolicy() tlsid.Policy {
	return tlsid.Roles(map[string][]tlsid.Role{
		method(kindPush): {tlsid.Worker},
		method(kindPull): {tlsid.Worker, tlsid.Master},
	})
}

// muxTLS is a Mux's mutual TLS: its handshake and who may call what.
type muxTLS struct {
	creds    *tlsid.Creds
	cfg      *tls.Config
	policy   tlsid.Policy
	refusals *tlsid.Refusals
}

// newMuxTLS is nil for nil creds (plaintext).
func newMuxTLS(creds *tlsid.Creds, log *slog.Logger) *muxTLS {
	if creds == nil {
		return nil
	}
	cfg := creds.ServerConfig()
	cfg.NextProtos = []string{alpnGRPC, alpnDirect}
	// Clients reconnect with a full handshake: tickets would only cost
	// bytes (and a message between the handshake and the hello).
	cfg.SessionTicketsDisabled = true
	// Full records from the first byte: these are bulk streams, not web
	// pages whose first bytes should render early.
	cfg.DynamicRecordSizingDisabled = true
	return &muxTLS{creds: creds, cfg: cfg, policy: directPolicy(), refusals: tlsid.NewRefusals(log)}
}

// handshake runs the server's handshake on an accepted connection and
// returns the connection to go on with (the TLS one, or a direct one's
// Unix socket: plainLocal) and whether it is gRPC's; a refusal is logged
// once per host.
func (s *muxTLS) handshake(ctx context.Context, c net.Conn) (net.Conn, tlsid.Identity, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, sniffTimeout)
	defer cancel()
	tc, id, err := s.creds.Handshake(ctx, c, s.cfg, true)
	if err != nil {
		s.refusals.Log(remoteHost(c), "direct/gRPC handshake", err)
		return nil, id, false, err
	}
	if tc.ConnectionState().NegotiatedProtocol == alpnGRPC {
		return tc, id, true, nil
	}
	conn, err := plainLocal(ctx, tc, true)
	return conn, id, false, err
}

// plainLocal carries a direct connection on the local Unix socket in
// plaintext on the socket from now on (tlsid.SwitchRaw): both sides are
// proven, the peer runs as our user, and the kernel keeps the bytes from
// other users; AES-GCM on every byte only cut throughput 3-4x. Calls are
// still authorized one by one against the proven identity. A TCP
// connection stays TLS.
func plainLocal(ctx context.Context, tc *tls.Conn, server bool) (net.Conn, error) {
	if _, ok := tc.NetConn().(*net.UnixConn); !ok {
		return tc, nil
	}
	uc, err := tlsid.SwitchRaw(ctx, tc, server)
	if err != nil {
		return nil, fmt.Errorf("direct: local connection: %w", err)
	}
	return uc, nil
}

// authorize is nil when peer may make the call of kind k with req, else a
// status saying why not. Without TLS (s nil) every call is allowed.
func (s *muxTLS) authorize(peer *tlsid.Identity, k kind, req proto.Message) error {
	if s == nil {
		return nil
	}
	if peer == nil {
		return status.Error(codes.Unauthenticated, "direct: peer without a proven identity")
	}
	err := s.policy(method(k), *peer, req)
	if err == nil {
		return nil
	}
	s.refusals.Log(peer.String(), method(k), err)
	if errors.Is(err, tlsid.ErrUnauthenticated) {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	return status.Error(codes.PermissionDenied, err.Error())
}

// remoteHost is a connection's peer without its (ephemeral) port.
func remoteHost(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil {
		return "local peer"
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	if a.String() == "" || a.String() == "@" {
		return "local peer"
	}
	return a.String()
}

// clientHandshake runs a direct client's handshake with a PS.
func clientHandshake(ctx context.Context, creds *tlsid.Creds, conn net.Conn) (*tls.Conn, error) {
	cfg := creds.ClientConfig(tlsid.PS)
	cfg.NextProtos = []string{alpnDirect}
	cfg.DynamicRecordSizingDisabled = true
	tc, _, err := creds.Handshake(ctx, conn, cfg, false)
	return tc, err
}

// refused reports whether a connection's failure is a TLS refusal (a
// certificate either side will not take), which no retry mends, rather
// than a broken connection.
func refused(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		// The server's alert: in TLS 1.3 a client learns that its
		// certificate was refused on its first read after the handshake.
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return false
	}
	return errors.Is(err, tlsid.ErrUnauthenticated) || errors.Is(err, tlsid.ErrPermissionDenied)
}
