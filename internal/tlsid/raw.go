package tlsid

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// On a connected Unix socket the kernel already gives what TLS's record
// layer would: no third process can read the bytes or inject any (root
// can read anything anyway). Once the handshake has proven both
// identities and SO_PEERCRED our user on the other end, a link may carry
// its data in plaintext on the socket itself, sparing AES-GCM on every
// byte.
//
// The switch must not lose a byte: crypto/tls's reader may buffer bytes
// past the record it returns, so neither side may write raw before the
// other has finished its last TLS read. The sequence:
//
//  1. the server writes TLS record A;
//  2. the client reads A over TLS (a refused client certificate fails
//     here, with the server's alert), then writes TLS record B;
//  3. the server reads B over TLS, then writes one raw byte C;
//  4. the client reads C from the socket.
//
// Each side writes nothing between its last TLS record and the other's
// answer, so no TLS reader holds raw bytes: after 3 the server, after 4
// the client, may read and write the socket directly. A peer that fails
// the handshake, or that the caller refuses before the switch, never
// sees A or C. Session tickets, the one post-handshake record a server
// sends unasked, go out with the handshake, before A, so the client's
// read of A takes them (a test checks); these links turn them off anyway.

// The switch's messages.
const (
	rawOffer  = "elasticdl raw?"
	rawAccept = "elasticdl raw!"
	rawGo     = 'R'
)

// HandshakeLocal runs Handshake on a Unix socket, then switches the
// connection to plaintext (SwitchRaw): it returns once conn itself
// carries the data. cfg is one of c's configurations; session tickets
// are turned off in a copy.
func (c *Creds) HandshakeLocal(ctx context.Context, conn *net.UnixConn, cfg *tls.Config, server bool) (Identity, error) {
	if conn == nil {
		return Identity{}, errors.New("tlsid: local handshake without a Unix socket")
	}
	cfg = cfg.Clone()
	cfg.SessionTicketsDisabled = true
	tc, id, err := c.Handshake(ctx, conn, cfg, server)
	if err != nil {
		return Identity{}, err
	}
	if _, err := SwitchRaw(ctx, tc, server); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// SwitchRaw runs the switch above on tc, whose handshake is complete and
// which has no data in flight either way, and returns the Unix socket
// under it, from then on the link's. It refuses any other connection.
// The server's configuration must have session tickets turned off.
// tc is then abandoned, without close_notify.
func SwitchRaw(ctx context.Context, tc *tls.Conn, server bool) (*net.UnixConn, error) {
	uc, ok := tc.NetConn().(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("tlsid: plaintext after the handshake on %T: only on a Unix socket", tc.NetConn())
	}
	if !tc.ConnectionState().HandshakeComplete {
		return nil, errors.New("tlsid: plaintext before the handshake")
	}
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Unix(1, 0)) })
	var err error
	if server {
		err = serverSwitch(tc, uc)
	} else {
		err = clientSwitch(tc, uc)
	}
	if !stop() {
		// ctx ended: the deadline set to interrupt is the caller's now.
		return nil, fmt.Errorf("tlsid: switch to plaintext: %w", context.Cause(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("tlsid: switch to plaintext with %s: %w", uc.RemoteAddr(), err)
	}
	return uc, nil
}

func serverSwitch(tc *tls.Conn, uc *net.UnixConn) error {
	if _, err := io.WriteString(tc, rawOffer); err != nil {
		return err
	}
	if err := expect(tc, rawAccept); err != nil {
		return err
	}
	_, err := uc.Write([]byte{rawGo})
	return err
}

func clientSwitch(tc *tls.Conn, uc *net.UnixConn) error {
	if err := expect(tc, rawOffer); err != nil {
		return err
	}
	if _, err := io.WriteString(tc, rawAccept); err != nil {
		return err
	}
	return expect(uc, string(rawGo))
}

// expect reads len(want) bytes from r and checks they are want.
func expect(r io.Reader, want string) error {
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(r, buf); err != nil {
		return err
	}
	if string(buf) != want {
		return fmt.Errorf("got %q, want %q", buf, want)
	}
	return nil
}
