package tlsid_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"elasticdl/internal/tlsid"
	"elasticdl/internal/tlsid/tlstest"
)

// unixPair returns both ends of a connected abstract Unix socket.
// serveOnce accepts one connection on ln, runs the server's handshake
// with creds and then then, and sends what failed (or nil).
func serveOnce(ctx context.Context, ln net.Listener, creds *tlsid.Creds, then func(*tls.Conn) error) <-chan error {
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			var tc *tls.Conn
			if tc, _, err = creds.ServerHandshake(ctx, c); err == nil {
				err = then(tc)
			}
		}
		errc <- err
	}()
	return errc
}

func unixPair(t *testing.T) (server, client *net.UnixConn) {
	t.Helper()
	name := fmt.Sprintf("@elasticdl-tlsid-raw-%d-%s", os.Getpid(), t.Name())
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return s.(*net.UnixConn), c.(*net.UnixConn)
}

// exchange writes out on c at once, while reading len(want) bytes, which
// must be want.
func exchange(c net.Conn, out, want []byte) error {
	werr := make(chan error, 1)
	go func() { _, err := c.Write(out); werr <- err }()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, want) {
		return errors.New("read bytes differ from those written")
	}
	return <-werr
}

// After the switch, bytes either side writes at once, on the raw socket,
// arrive intact: no TLS reader kept any.
func TestHandshakeLocalPlaintext(t *testing.T) {
	j := tlstest.NewJob(t, "job1")
	ps, worker := j.Creds(tlsid.PS, 0), j.Creds(tlsid.Worker, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for round := range 3 {
		s, c := unixPair(t)
		fromServer, fromClient := make([]byte, 1<<20+round), make([]byte, 3<<19+round)
		rand.Read(fromServer)
		rand.Read(fromClient)
		errc := make(chan error, 1)
		go func() {
			id, err := ps.HandshakeLocal(ctx, s, ps.ServerConfig(), true)
			if err == nil && id != worker.Self() {
				err = fmt.Errorf("server saw %v", id)
			}
			if err == nil {
				err = exchange(s, fromServer, fromClient)
			}
			errc <- err
		}()
		id, err := worker.HandshakeLocal(ctx, c, worker.ClientConfig(tlsid.PS), false)
		if err != nil {
			t.Fatal(err)
		}
		if id != ps.Self() {
			t.Errorf("client saw %v", id)
		}
		if err := exchange(c, fromClient, fromServer); err != nil {
			t.Fatalf("client: %v", err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("server: %v", err)
		}
	}
}

// A client whose certificate the server refuses learns it from the
// server's alert; the server never writes the raw byte, and closes.
func TestHandshakeLocalRefusedClient(t *testing.T) {
	j, other := tlstest.NewJob(t, "job1"), tlstest.NewJob(t, "job1")
	ps, stranger := j.Creds(tlsid.PS, 0), other.Creds(tlsid.Worker, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, c := unixPair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := ps.HandshakeLocal(ctx, s, ps.ServerConfig(), true)
		s.Close()
		errc <- err
	}()
	if _, err := stranger.HandshakeLocal(ctx, c, stranger.ClientConfig(tlsid.PS), false); err == nil {
		t.Error("the stranger switched to plaintext")
	}
	if err := <-errc; !errors.Is(err, tlsid.ErrUnauthenticated) {
		t.Errorf("server: %v, want ErrUnauthenticated", err)
	}

	// The same client, by hand: past its side of the handshake, TLS says
	// it was refused, and the socket holds nothing more (no raw byte).
	s, c = unixPair(t)
	go func() {
		_, err := ps.HandshakeLocal(ctx, s, ps.ServerConfig(), true)
		s.Close()
		errc <- err
	}()
	tc, _, err := stranger.Handshake(ctx, c, stranger.ClientConfig(tlsid.PS), false)
	if err == nil {
		if _, err = tc.Read(make([]byte, 1)); err == nil {
			t.Error("the stranger read a TLS record")
		}
	}
	if err := <-errc; err == nil {
		t.Error("server accepted the stranger")
	}
	if rest, err := io.ReadAll(c); len(rest) != 0 || err != nil {
		t.Errorf("after the refusal the socket held %q, %v", rest, err)
	}
}

// A client that refuses the server (not of the role it wants) stops in
// the handshake: the server never gets B, so never switches.
func TestHandshakeLocalRefusedServer(t *testing.T) {
	j := tlstest.NewJob(t, "job1")
	worker, other := j.Creds(tlsid.Worker, 0), j.Creds(tlsid.Worker, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, c := unixPair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := worker.HandshakeLocal(ctx, s, worker.ServerConfig(), true)
		errc <- err
	}()
	_, err := other.HandshakeLocal(ctx, c, other.ClientConfig(tlsid.PS), false)
	if !errors.Is(err, tlsid.ErrPermissionDenied) {
		t.Errorf("client: %v, want ErrPermissionDenied", err)
	}
	c.Close()
	if err := <-errc; err == nil {
		t.Error("server switched to plaintext with a client that refused it")
	}
}

// Only a Unix socket switches; TCP stays TLS.
func TestSwitchRawRefusesTCP(t *testing.T) {
	j := tlstest.NewJob(t, "job1")
	ps, worker := j.Creds(tlsid.PS, 0), j.Creds(tlsid.Worker, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := serveOnce(ctx, ln, ps, func(tc *tls.Conn) error {
		_, err := tlsid.SwitchRaw(ctx, tc, true)
		return err
	})
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, _, err := worker.ClientHandshake(ctx, c, tlsid.PS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tlsid.SwitchRaw(ctx, tc, false); err == nil {
		t.Error("client switched TCP to plaintext")
	}
	if err := <-errc; err == nil {
		t.Error("server switched TCP to plaintext")
	}
	if _, err := worker.HandshakeLocal(ctx, nil, worker.ClientConfig(), false); err == nil {
		t.Error("HandshakeLocal without a socket")
	}
}

// A server that sends session tickets sends them with the handshake,
// before A: the client's TLS read of A takes them, and the switch holds.
func TestSwitchRawAfterTickets(t *testing.T) {
	j := tlstest.NewJob(t, "job1")
	ps, worker := j.Creds(tlsid.PS, 0), j.Creds(tlsid.Worker, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, c := unixPair(t)
	fromServer, fromClient := []byte("server first raw bytes"), []byte("client first raw bytes")
	errc := make(chan error, 1)
	go func() {
		cfg := ps.ServerConfig() // tickets on
		tc, _, err := ps.Handshake(ctx, s, cfg, true)
		if err == nil {
			_, err = tlsid.SwitchRaw(ctx, tc, true)
		}
		if err == nil {
			err = exchange(s, fromServer, fromClient)
		}
		errc <- err
	}()
	cfg := worker.ClientConfig(tlsid.PS)
	tickets := &ticketCache{}
	cfg.ClientSessionCache = tickets
	tc, _, err := worker.Handshake(ctx, c, cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := tlsid.SwitchRaw(ctx, tc, false)
	if err != nil {
		t.Fatal(err)
	}
	if tickets.puts.Load() == 0 {
		t.Error("no session ticket came before the switch")
	}
	if err := exchange(uc, fromClient, fromServer); err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// ticketCache counts the session tickets a client got.
type ticketCache struct{ puts atomic.Int64 }

func (c *ticketCache) Get(string) (*tls.ClientSessionState, bool) { return nil, false }
func (c *ticketCache) Put(string, *tls.ClientSessionState)        { c.puts.Add(1) }
