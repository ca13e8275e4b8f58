package tlsid_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"elasticdl/internal/tlsid"
	"elasticdl/internal/tlsid/tlstest"
)

func TestIdentityURI(t *testing.T) {
	for _, id := range []tlsid.Identity{{Job: "j", Role: tlsid.Worker, ID: 3}, {Job: "mnist-1", Role: tlsid.Master}, {Job: "a.b", Role: tlsid.PS, ID: 12}} {
		got, err := tlsid.ParseURI(id.URI())
		if err != nil || got != id {
			t.Errorf("ParseURI(%v) = %v, %v", id.URI(), got, err)
		}
	}
	for _, bad := range []string{"https://j/worker/1", "elasticdl://j/boss/1", "elasticdl://j/worker/x", "elasticdl://j/worker", "elasticdl:///worker/1", "elasticdl://j/worker/-1"} {
		u, _ := (&tlsid.Identity{}).URI().Parse(bad)
		if _, err := tlsid.ParseURI(u); err == nil {
			t.Errorf("ParseURI(%s) accepted", bad)
		}
	}
}

func TestCASaveLoad(t *testing.T) {
	j := tlstest.NewJob(t, "job1")
	dir := filepath.Join(t.TempDir(), "tls")
	if err := j.CA.Save(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{tlsid.CACertFile, tlsid.CAKeyFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v", f, err, st.Mode())
		}
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v", st.Mode())
	}
	ca, err := tlsid.LoadCA(dir, "job1")
	if err != nil {
		t.Fatal(err)
	}
	// A master back from a failover issues from the same CA: its
	// certificates are trusted by the processes that kept running.
	now := time.Now()
	b, err := ca.Issue(tlsid.Identity{Job: "job1", Role: tlsid.Master}, now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	worker := j.Creds(tlsid.Worker, 1)
	master, err := tlsid.New(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, master, worker, tlsid.Master); err != nil {
		t.Errorf("worker refused the reloaded CA's master: %v", err)
	}
	if _, err := tlsid.LoadCA(dir, "job2"); err == nil {
		t.Error("job2 loaded job1's CA")
	}
	if _, err := ca.Issue(tlsid.Identity{Job: "job2", Role: tlsid.Worker}, now, now.Add(time.Hour)); err == nil {
		t.Error("job1's CA issued for job2")
	}
}

// handshake connects client to server over loopback TCP and returns the
// identity the server proved for the client.
func handshake(t *testing.T, server, client *tlsid.Creds, accept ...tlsid.Role) (tlsid.Identity, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		id  tlsid.Identity
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		tc, id, err := server.ServerHandshake(ctx, c)
		if err == nil {
			// TLS 1.3 sends the client's certificate after the client
			// considers the handshake done: read to learn the verdict.
			_, err = tc.Write([]byte{1})
		}
		done <- result{id, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var cerr error
	if client == nil {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		cerr = tc.HandshakeContext(ctx)
		if cerr == nil {
			_, cerr = tc.Read(make([]byte, 1))
		}
	} else {
		var tc *tls.Conn
		tc, _, cerr = client.ClientHandshake(ctx, c, accept...)
		if cerr == nil {
			_, cerr = tc.Read(make([]byte, 1))
		}
	}
	r := <-done
	if r.err == nil && cerr != nil {
		r.err = cerr
	}
	return r.id, r.err
}

func TestHandshakes(t *testing.T) {
	j := tlstest.NewJob(t, "job1")
	other := tlstest.NewJob(t, "job1") // same name, another CA
	ps := j.Creds(tlsid.PS, 0)
	cases := []struct {
		name   string
		client *tlsid.Creds
		accept []tlsid.Role
		want   tlsid.Identity
		err    error
	}{
		{"worker", j.Creds(tlsid.Worker, 3), []tlsid.Role{tlsid.PS}, tlsid.Identity{Job: "job1", Role: tlsid.Worker, ID: 3}, nil},
		{"no certificate", nil, nil, tlsid.Identity{}, tlsid.ErrUnauthenticated},
		{"another job's CA", other.Creds(tlsid.Worker, 3), nil, tlsid.Identity{}, tlsid.ErrUnauthenticated},
		{"expired", j.Expired(tlsid.Worker, 3), nil, tlsid.Identity{}, tlsid.ErrUnauthenticated},
		{"server of the wrong role", j.Creds(tlsid.Worker, 3), []tlsid.Role{tlsid.Master}, tlsid.Identity{}, errors.New("any")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := handshake(t, ps, c.client, c.accept...)
			if c.err == nil && (err != nil || id != c.want) {
				t.Fatalf("got %v, %v; want %v", id, err, c.want)
			}
			if c.err != nil && err == nil {
				t.Fatalf("accepted as %v", id)
			}
			if c.err == tlsid.ErrUnauthenticated && !errors.Is(err, tlsid.ErrUnauthenticated) {
				t.Errorf("err %v, want it to wrap %v", err, c.err)
			}
		})
	}
}

func TestBundleFiles(t *testing.T) {
	j := tlstest.NewJob(t, "job1")
	dir := filepath.Join(t.TempDir(), "worker-1")
	if err := j.Bundle(tlsid.Worker, 1).Write(dir); err != nil {
		t.Fatal(err)
	}
	c, err := tlsid.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Self(); got != (tlsid.Identity{Job: "job1", Role: tlsid.Worker, ID: 1}) {
		t.Errorf("Self = %v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, tlsid.KeyFile), j.Bundle(tlsid.Worker, 2).Key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tlsid.Load(dir); err == nil {
		t.Error("loaded a certificate with another's key")
	}
	if _, err := tlsid.Load(t.TempDir()); err == nil {
		t.Error("loaded an empty directory")
	}
}

type req struct{ w int32 }

func (r req) GetWorkerId() int32 { return r.w }

func TestRoles(t *testing.T) {
	p := tlsid.Roles(map[string][]tlsid.Role{"/m/Get": {tlsid.Worker}, "/m/Save": {tlsid.Master}})
	w3 := tlsid.Identity{Job: "j", Role: tlsid.Worker, ID: 3}
	m := tlsid.Identity{Job: "j", Role: tlsid.Master}
	for _, c := range []struct {
		method string
		id     tlsid.Identity
		req    any
		ok     bool
	}{
		{"/m/Get", w3, req{3}, true},
		{"/m/Get", w3, req{4}, false},
		{"/m/Get", w3, nil, true},
		{"/m/Get", m, req{3}, false},
		{"/m/Save", m, req{3}, true},
		{"/m/Save", w3, req{3}, false},
		{"/m/Other", m, nil, false},
	} {
		err := p(c.method, c.id, c.req)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, tlsid.ErrPermissionDenied)) {
			t.Errorf("%s by %v with %v: %v", c.method, c.id, c.req, err)
		}
	}
}

func TestPeerUIDUnix(t *testing.T) {
	j := tlstest.NewJob(t, "job1")
	name := "@elasticdl-tlsid-test-" + t.Name()
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := serveOnce(ctx, ln, j.Creds(tlsid.PS, 0), func(tc *tls.Conn) error {
		_, err := tc.Write([]byte{1})
		return err
	})
	c, err := net.Dial("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	uid, err := tlsid.PeerUID(c.(*net.UnixConn))
	if err != nil || uid != os.Getuid() {
		t.Errorf("PeerUID = %d, %v; want %d", uid, err, os.Getuid())
	}
	tc, _, err := j.Creds(tlsid.Worker, 1).ClientHandshake(ctx, c, tlsid.PS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// Handshaken hands on a connection's completed handshake and refuses one
// without TLS.
func TestHandshaken(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, _, err := tlsid.Handshaken().ServerHandshake(a); !errors.Is(err, tlsid.ErrUnauthenticated) {
		t.Errorf("a plain connection: %v, want ErrUnauthenticated", err)
	}
	job := tlstest.NewJob(t, "job")
	server, client := job.Creds(tlsid.PS, 0), job.Creds(tlsid.Worker, 5)
	got := make(chan error, 1)
	go func() {
		_, _, err := client.ClientHandshake(context.Background(), b, tlsid.PS)
		got <- err
	}()
	tc, _, err := server.ServerHandshake(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	_, info, err := tlsid.Handshaken().ServerHandshake(tc)
	if err != nil {
		t.Fatal(err)
	}
	ti, ok := info.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("auth info %T", info)
	}
	if id, err := tlsid.PeerIdentity(ti.State); err != nil || id != (tlsid.Identity{Job: "job", Role: tlsid.Worker, ID: 5}) {
		t.Errorf("identity %v, %v", id, err)
	}
}
