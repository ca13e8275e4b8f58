package collective

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"

	"elasticdl/internal/tlsid"
)

// With credentials, every ring link (TCP or the local socket) is mutual
// TLS between two workers of the job, the dialer's handshake first, then
// the hello over it; with Config.PeerIDs each side also checks that the
// other is the worker expected at its neighbour's rank. A link on the
// local Unix socket that passed all that carries the ring's data in
// plaintext on the socket (plainLocal); TCP links stay TLS.

// linkConn is a ring link over TLS. Close closes the socket without
// TLS's close_notify: a ring is closed when a neighbour may have stopped
// reading, and the alert's write could wait for it.
type linkConn struct {
	*tls.Conn
	raw net.Conn
}

func (c linkConn) Close() error { return c.raw.Close() }

// secureAccept runs the server's handshake on an accepted link and
// returns the link to read the hello on and the dialer's identity. A
// proven identity that is no worker is the caller's to refuse.
func (l *Listener) secureAccept(c net.Conn) (net.Conn, *tlsid.Identity, error) {
	if l.creds == nil {
		return c, nil, nil
	}
	cfg := l.creds.ServerConfig()
	cfg.SessionTicketsDisabled = true // links are redialed with a full handshake
	cfg.DynamicRecordSizingDisabled = true
	tc, id, err := l.creds.Handshake(context.Background(), c, cfg, true) // c's deadline bounds it
	if err != nil {
		l.refusals.Log(remoteHost(c), "ring handshake", err)
		return nil, nil, err
	}
	return linkConn{Conn: tc, raw: c}, &id, nil
}

// plainLocal carries a TLS link over a Unix socket on the socket itself
// from now on (tlsid.SwitchRaw): once both sides are proven and the hello
// answered, the kernel keeps the bytes from other users, and AES-GCM on
// every byte only cost throughput. Other links are returned as they are.
// Both sides call it right after a statusOK reply, with nothing else in
// flight.
func plainLocal(ctx context.Context, c net.Conn, server bool) (net.Conn, error) {
	lc, ok := c.(linkConn)
	if !ok {
		return c, nil
	}
	if _, unix := lc.raw.(*net.UnixConn); !unix {
		return c, nil
	}
	uc, err := tlsid.SwitchRaw(ctx, lc.Conn, server)
	if err != nil {
		return nil, fmt.Errorf("collective: local link: %w", err)
	}
	return uc, nil
}

// checkDialer is why a link from id must be refused by a member waiting
// in w for rank from; "" when it may go on.
func checkDialer(id *tlsid.Identity, w *waiter, from int) string {
	switch {
	case id == nil:
		return ""
	case id.Role != tlsid.Worker:
		return fmt.Sprintf("%s is no worker", id)
	case w.peerIDs != nil && id.ID != w.peerIDs[from]:
		return fmt.Sprintf("%s connects as rank %d, which is worker %d", id, from, w.peerIDs[from])
	}
	return ""
}

// secureDial runs the dialer's handshake with the member at rank next. An
// error that retrying cannot mend (a server of the job that is not the
// expected worker) wraps ErrRefused.
func secureDial(ctx context.Context, creds *tlsid.Creds, c net.Conn, cfg Config, next int) (net.Conn, error) {
	if creds == nil {
		return c, nil
	}
	tlsCfg := creds.ClientConfig(tlsid.Worker)
	// Full records from the first byte: a link carries bulk segments.
	tlsCfg.DynamicRecordSizingDisabled = true
	tc, id, err := creds.Handshake(ctx, c, tlsCfg, false)
	if err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	if cfg.PeerIDs != nil && id.ID != cfg.PeerIDs[next] {
		_ = c.Close()
		return nil, fmt.Errorf("%w: rank %d at %s is %s, want worker %d", ErrRefused, next, cfg.Peers[next], id, cfg.PeerIDs[next])
	}
	return linkConn{Conn: tc, raw: c}, nil
}

// remoteHost is a connection's peer without its (ephemeral) port.
func remoteHost(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil || a.String() == "" || a.String() == "@" {
		return "local peer"
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// validIDs checks Config.PeerIDs.
func validIDs(c Config) error {
	if c.PeerIDs == nil {
		return nil
	}
	if len(c.PeerIDs) != len(c.Peers) {
		return fmt.Errorf("collective: config: %d peer IDs for %d peers", len(c.PeerIDs), len(c.Peers))
	}
	for i, id := range c.PeerIDs {
		if j := slices.Index(c.PeerIDs, id); j != i {
			return fmt.Errorf("collective: config: peers %d and %d are both worker %d", j, i, id)
		}
	}
	return nil
}
