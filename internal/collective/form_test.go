package collective

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// What a hello gets from a Listener forming version 5 as rank 1 of 3.
func TestRoute(t *testing.T) {
	peers := []string{"a:1", "b:1", "c:1"}
	good := hello{version: 5, from: 0, to: 1, world: 3, peers: peersHash(peers)}
	for _, c := range []struct {
		name   string
		adjust func(*hello)
		status byte
		reason string
	}{
		{"match", func(*hello) {}, statusOK, ""},
		{"older version", func(h *hello) { h.version = 4 }, statusRefused, "version 4 is stale"},
		{"newer version", func(h *hello) { h.version = 6 }, statusRetry, "not forming here yet"},
		{"wrong sender", func(h *hello) { h.from = 2 }, statusRefused, "from rank 2"},
		{"wrong target", func(h *hello) { h.to = 2 }, statusRefused, "wants rank 2"},
		{"world size", func(h *hello) { h.world = 4 }, statusRefused, "dialer has 4 members"},
		{"member list", func(h *hello) { h.peers = peersHash(peers[:2]) }, statusRefused, "member list differs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newListeners(t, 1)[0]
			if _, err := l.register(Config{Rank: 1, Peers: peers, Version: 5, Timeout: time.Second}); err != nil {
				t.Fatal(err)
			}
			h := good
			c.adjust(&h)
			status, reason, _ := l.route(h, nil)
			if status != c.status || !strings.Contains(reason, c.reason) {
				t.Errorf("route = %d %q, want %d %q", status, reason, c.status, c.reason)
			}
			if c.status == statusOK {
				if status, reason, _ := l.route(h, nil); status != statusRefused || !strings.Contains(reason, "already connected") {
					t.Errorf("second connection: route = %d %q, want a refusal", status, reason)
				}
			}
		})
	}
}

// Stray, stale and mismatched connections are refused with a reason while a
// correct ring forms at the same listeners.
func TestRefusalsDoNotDisturbForm(t *testing.T) {
	ls := newListeners(t, 2)
	// Version 2 formed and gone: version 2 is stale on both listeners now.
	for _, r := range formRings(t, ls, 2, testTimeout, nil) {
		_ = r.Close()
	}
	// Member 1 starts forming version 3; member 0 comes late.
	ring1 := make(chan error, 1)
	go func() {
		r, err := ls[1].Form(context.Background(), Config{Rank: 1, Peers: addrs(ls), Version: 3, Timeout: 5 * time.Second})
		if err == nil {
			defer r.Close()
			err = r.AllReduce(context.Background(), make([]float32, 10))
		}
		ring1 <- err
	}()
	time.Sleep(50 * time.Millisecond)

	// A member of the old ring version 2 dials late: refused, for good.
	stray := newListeners(t, 1)[0]
	_, err := stray.Form(context.Background(), Config{Rank: 0, Peers: []string{stray.Addr(), ls[1].Addr()}, Version: 2, Timeout: time.Second})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "version 2 is stale") {
		t.Errorf("stale version: Form = %v, want a refusal naming the stale version", err)
	}
	// Version 3 but another member list (a third member): refused.
	other := newListeners(t, 1)[0]
	_, err = other.Form(context.Background(), Config{Rank: 2, Peers: []string{ls[1].Addr(), "127.0.0.1:1", other.Addr()}, Version: 3, Timeout: time.Second})
	if !errors.Is(err, ErrRefused) {
		t.Errorf("wrong world: Form = %v, want ErrRefused", err)
	}
	// Not a ring connection at all.
	c, err := net.Dial("tcp", ls[1].Addr())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte(strings.Repeat("x", helloLen)))
	_ = c.SetDeadline(time.Now().Add(testTimeout))
	status, reason, err := readReply(c)
	if err != nil || status != statusRefused || !strings.Contains(reason, "not a ring connection") {
		t.Errorf("garbage: reply %d %q %v", status, reason, err)
	}
	_ = c.Close()

	// The right member 0 arrives: the ring forms and works.
	r0, err := ls[0].Form(context.Background(), Config{Rank: 0, Peers: addrs(ls), Version: 3, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r0.Close()
	if err := r0.AllReduce(context.Background(), make([]float32, 10)); err != nil {
		t.Fatal(err)
	}
	if err := <-ring1; err != nil {
		t.Fatal(err)
	}
}

// Form dials again while the next member's listener is not up yet.
func TestFormWaitsForLateListener(t *testing.T) {
	early := newListeners(t, 1)[0]
	// Find a free port, then free it: nobody listens there for a while.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lateAddr := probe.Addr().String()
	_ = probe.Close()
	peers := []string{early.Addr(), lateAddr}

	formed := make(chan error, 1)
	go func() {
		r, err := early.Form(context.Background(), Config{Rank: 0, Peers: peers, Version: 1, Timeout: 10 * time.Second})
		if err == nil {
			defer r.Close()
			err = r.AllReduce(context.Background(), []float32{1})
		}
		formed <- err
	}()
	time.Sleep(300 * time.Millisecond)
	late, err := Listen(lateAddr, quietLogger())
	if err != nil {
		t.Skipf("port %s was taken meanwhile: %v", lateAddr, err)
	}
	defer late.Close()
	r, err := late.Form(context.Background(), Config{Rank: 1, Peers: peers, Version: 1, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data := []float32{2}
	if err := r.AllReduce(context.Background(), data); err != nil || data[0] != 3 {
		t.Fatalf("AllReduce = %v, %v", err, data)
	}
	if err := <-formed; err != nil {
		t.Fatal(err)
	}
}

func TestFormTimeout(t *testing.T) {
	ls := newListeners(t, 2) // member 1 never forms
	start := time.Now()
	_, err := ls[0].Form(context.Background(), Config{Rank: 0, Peers: addrs(ls), Version: 1, Timeout: 300 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Form = %v, want a deadline error", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Form took %v with a 300ms timeout", took)
	}
	// The listener is free for the next version.
	rings := formRings(t, ls, 2, testTimeout, nil)
	if err := rings[0].Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFormSupersededAndClosed(t *testing.T) {
	ls := newListeners(t, 2)
	cfg := Config{Rank: 0, Peers: addrs(ls), Version: 1, Timeout: time.Minute}
	first := make(chan error, 1)
	go func() {
		_, err := ls[0].Form(context.Background(), cfg)
		first <- err
	}()
	time.Sleep(50 * time.Millisecond)
	second := make(chan error, 1)
	cfg2 := cfg
	cfg2.Version = 2
	go func() {
		_, err := ls[0].Form(context.Background(), cfg2)
		second <- err
	}()
	if err := within(t, first, 5*time.Second, "Form superseded by a newer one"); !errors.Is(err, ErrSuperseded) {
		t.Errorf("first Form = %v, want ErrSuperseded", err)
	}
	cfg.Version = 1
	if _, err := ls[0].Form(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "older than version 2") {
		t.Errorf("Form of an older version = %v, want a refusal", err)
	}
	_ = ls[0].Close()
	if err := within(t, second, 5*time.Second, "Form on a closed listener"); !errors.Is(err, ErrClosed) {
		t.Errorf("Form on a closed listener = %v, want ErrClosed", err)
	}
}
