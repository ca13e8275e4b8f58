package collective

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"elasticdl/internal/tlsid"
	"elasticdl/internal/tlsid/tlstest"
)

// tlsListener listens on loopback with creds (nil: plaintext); local:
// same-host peers connect over the Unix socket.
func tlsListener(t testing.TB, creds *tlsid.Creds, local bool) *Listener {
	t.Helper()
	l, err := listen("127.0.0.1:0", quietLogger(), local, creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// workerListeners are listeners of workers ids of job.
func workerListeners(t testing.TB, job *tlstest.Job, ids []int, local bool) []*Listener {
	t.Helper()
	ls := make([]*Listener, len(ids))
	for i, id := range ids {
		ls[i] = tlsListener(t, job.Creds(tlsid.Worker, id), local)
	}
	return ls
}

// A ring of workers over TLS forms and sums, over TCP and Unix sockets.
func TestTLSRing(t *testing.T) {
	job := tlstest.NewJob(t, "job")
	ids := []int{10, 11, 12}
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) {
			ls := workerListeners(t, job, ids, local)
			rings := formRings(t, ls, 1, 20*time.Second, func(c *Config) { c.PeerIDs = ids })
			// Past the handshake local links carry plaintext on the socket;
			// TCP links stay TLS.
			for i, r := range rings {
				for _, c := range []net.Conn{r.in, r.out} {
					_, plain := c.(*net.UnixConn)
					_, secure := c.(linkConn)
					if local && !plain || !local && !secure {
						t.Errorf("member %d: a link on a %T (local %v)", i, c, local)
					}
				}
			}
			errs := onAll(len(rings), func(i int) error {
				_, err := runAllReduces(context.Background(), rings[i], 100_003, 3, true, nil)
				return err
			})
			for i, err := range errs {
				if err != nil {
					t.Errorf("member %d: %v", i, err)
				}
			}
		})
	}
}

// A dialer that is not the job's worker expected at its rank is refused:
// the honest member's ring forms with the right worker only.
func TestTLSRefusesImpostors(t *testing.T) {
	job := tlstest.NewJob(t, "job")
	other := tlstest.NewJob(t, "other")
	impostors := []struct {
		name    string
		creds   *tlsid.Creds
		refused bool // told so (ErrRefused) rather than cut off at the handshake
	}{
		{"no certificate", nil, false},
		{"another job's worker", other.Creds(tlsid.Worker, 10), false},
		{"expired worker", job.Expired(tlsid.Worker, 10), false},
		{"another worker", job.Creds(tlsid.Worker, 12), true},
		{"a PS", job.Creds(tlsid.PS, 10), true},
	}
	for _, local := range []bool{false, true} {
		for v, imp := range impostors {
			t.Run(fmt.Sprintf("local=%v/%s", local, imp.name), func(t *testing.T) {
				ls := workerListeners(t, job, []int{10, 11}, local)
				cfg := Config{Peers: addrs(ls), PeerIDs: []int{10, 11}, Version: int64(v), Timeout: 20 * time.Second, Logger: quietLogger()}
				honest := make(chan error, 2)
				rings := make([]*Ring, 2)
				formAs := func(rank int) {
					c := cfg
					c.Rank = rank
					var err error
					rings[rank], err = ls[rank].Form(context.Background(), c)
					honest <- err
				}
				go formAs(1)
				// The impostor takes rank 0's place towards rank 1.
				x := tlsListener(t, imp.creds, local)
				xc := cfg
				xc.Rank, xc.PeerIDs, xc.Timeout = 0, nil, time.Second
				_, err := x.Form(context.Background(), xc)
				if err == nil || imp.refused != errors.Is(err, ErrRefused) {
					t.Fatalf("the impostor's Form: %v, want refused (%v)", err, imp.refused)
				}
				go formAs(0)
				for range 2 {
					if err := within(t, honest, 30*time.Second, "honest Form"); err != nil {
						t.Fatal(err)
					}
				}
				for _, r := range rings {
					t.Cleanup(func() { _ = r.Close() })
				}
				errs := onAll(2, func(i int) error {
					_, err := runAllReduces(context.Background(), rings[i], 1000, 1, true, nil)
					return err
				})
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// A dialer refuses a member that is not the worker expected at the next
// rank, at once.
func TestTLSDialerChecksTheNext(t *testing.T) {
	job := tlstest.NewJob(t, "job")
	x := tlsListener(t, job.Creds(tlsid.Worker, 12), true)
	b := tlsListener(t, job.Creds(tlsid.Worker, 11), true)
	cfg := Config{Rank: 1, Peers: []string{x.Addr(), b.Addr()}, PeerIDs: []int{10, 11}, Version: 1, Timeout: 20 * time.Second}
	if _, err := b.Form(context.Background(), cfg); !errors.Is(err, ErrRefused) {
		t.Fatalf("Form with worker 12 at rank 0's place: %v, want ErrRefused", err)
	}
	bad := cfg
	bad.PeerIDs = []int{11}
	if _, err := b.Form(context.Background(), bad); err == nil {
		t.Error("Form with 1 peer ID for 2 peers")
	}
}

// BenchmarkTLS: the ring's cost of TLS, 3 members over TCP and the local
// socket, with and without, in one run.
func BenchmarkTLS(b *testing.B) {
	job := tlstest.NewJob(b, "job")
	ids := []int{0, 1, 2}
	for _, mib := range []int{4, 64} {
		for _, tr := range []string{"tcp", "unix"} {
			for _, secure := range []bool{false, true} {
				b.Run(fmt.Sprintf("members=3/%dMiB/%s/tls=%v", mib, tr, secure), func(b *testing.B) {
					ls := make([]*Listener, len(ids))
					for i, id := range ids {
						var creds *tlsid.Creds
						if secure {
							creds = job.Creds(tlsid.Worker, id)
						}
						ls[i] = tlsListener(b, creds, tr == "unix")
					}
					benchOver(b, ls, mib<<20, 0)
				})
			}
		}
	}
}
