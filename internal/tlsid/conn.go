package tlsid

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"syscall"
)

// ServerHandshake runs the server side of a handshake on an accepted
// connection and returns the TLS connection and the client's identity.
// On a Unix socket it first checks with SO_PEERCRED that the peer runs as
// this process's user.
func (c *Creds) ServerHandshake(ctx context.Context, conn net.Conn) (*tls.Conn, Identity, error) {
	return c.Handshake(ctx, conn, c.ServerConfig(), true)
}

// ClientHandshake runs the client side of a handshake with a server of
// one of the roles accept, and returns the TLS connection and the
// server's identity.
func (c *Creds) ClientHandshake(ctx context.Context, conn net.Conn, accept ...Role) (*tls.Conn, Identity, error) {
	return c.Handshake(ctx, conn, c.ClientConfig(accept...), false)
}

// Handshake is ServerHandshake (server) or ClientHandshake with cfg, one
// of c's configurations that the caller changed (ALPN protocols).
func (c *Creds) Handshake(ctx context.Context, conn net.Conn, cfg *tls.Config, server bool) (*tls.Conn, Identity, error) {
	if err := checkPeerUID(conn); err != nil {
		return nil, Identity{}, err
	}
	var tc *tls.Conn
	if server {
		tc = tls.Server(conn, cfg)
	} else {
		tc = tls.Client(conn, cfg)
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		// err stays in the chain: a caller tells a broken connection
		// (retry) from a refused certificate.
		return nil, Identity{}, fmt.Errorf("%w: handshake with %s: %w", ErrUnauthenticated, conn.RemoteAddr(), err)
	}
	id, err := PeerIdentity(tc.ConnectionState())
	if err != nil {
		return nil, Identity{}, err
	}
	return tc, id, nil
}

// checkPeerUID refuses a Unix-socket peer that runs as another user: the
// shared-memory path trusts what the peer maps, so only the job's own
// user may be on the other end. Other connections pass.
func checkPeerUID(conn net.Conn) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil
	}
	uid, err := PeerUID(uc)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if want := os.Getuid(); uid != want {
		return fmt.Errorf("%w: Unix-socket peer runs as uid %d, this job as %d", ErrUnauthenticated, uid, want)
	}
	return nil
}

// PeerUID is the user ID of a Unix socket's peer (SO_PEERCRED).
func PeerUID(uc *net.UnixConn) (int, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	if serr != nil {
		return 0, fmt.Errorf("peer credentials: %w", serr)
	}
	return int(cred.Uid), nil
}
