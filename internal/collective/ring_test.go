package collective

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const testTimeout = 2 * time.Second

func TestAllReduce(t *testing.T) {
	counts := []int{0, 1, 2, 3, 5, 1001, 3_000_001}
	variants := []struct {
		name   string
		adjust func(*Config)
		// portable sends through the byte-order independent codec.
		portable bool
		// tcp: over TCP rather than the same-host Unix sockets.
		tcp bool
	}{
		{"default", nil, false, false},
		{"tcp", nil, false, true},
		// Tiny segments, different on every member: many pipeline stages,
		// and the segmentation is local to each member.
		{"mixed-segments", func(c *Config) { c.SegmentBytes = 4 * (1 + 2*c.Rank) }, false, false},
		{"portable", nil, true, false},
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for n := 1; n <= 4; n++ {
		for _, v := range variants {
			t.Run(fmt.Sprintf("n=%d/%s", n, v.name), func(t *testing.T) {
				rings := formRings(t, newListenersOver(t, n, !v.tcp), 1, testTimeout, v.adjust)
				for _, r := range rings {
					r.portable = v.portable
				}
				for _, count := range counts {
					if v.name != "default" && v.name != "tcp" && count > 10_000 {
						continue // tiny segments on 3M floats would take minutes
					}
					inputs := randomInputs(rng, n, count)
					want := ringOrderSum(inputs)
					bufs := make([][]float32, n)
					errs := onAll(n, func(i int) error {
						bufs[i] = append([]float32(nil), inputs[i]...)
						return rings[i].AllReduce(context.Background(), bufs[i])
					})
					for i := range n {
						if errs[i] != nil {
							t.Fatalf("count %d: member %d: %v", count, i, errs[i])
						}
						if d := firstBitDiff(bufs[i], want); d != -1 {
							t.Fatalf("count %d: member %d differs from the ring-order reference at %d", count, i, d)
						}
					}
				}
			})
		}
	}
}

// The reference order matters: summing the same inputs in rank order gives
// other bits, so TestAllReduce would catch a ring that summed in another
// order (or in different orders on different members).
func TestOrderIsObservable(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	inputs := randomInputs(rng, 4, 10_000)
	ring := ringOrderSum(inputs)
	diffs := 0
	for i := range ring {
		naive := inputs[0][i] + inputs[1][i] + inputs[2][i] + inputs[3][i]
		if naive != ring[i] {
			diffs++
		}
	}
	if diffs == 0 {
		t.Fatal("rank-order and ring-order sums agree everywhere: the inputs cannot tell orders apart")
	}
}

func TestBroadcast(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			rings := formRings(t, newListeners(t, n), 1, testTimeout, func(c *Config) { c.SegmentBytes = 4096 })
			for root := range n {
				for _, count := range []int{0, 1, 5, 1001, 100_003} {
					inputs := randomInputs(rng, n, count)
					bufs := make([][]float32, n)
					errs := onAll(n, func(i int) error {
						bufs[i] = append([]float32(nil), inputs[i]...)
						return rings[i].Broadcast(context.Background(), root, bufs[i])
					})
					for i := range n {
						if errs[i] != nil {
							t.Fatalf("root %d count %d: member %d: %v", root, count, i, errs[i])
						}
						if d := firstBitDiff(bufs[i], inputs[root]); d != -1 {
							t.Fatalf("root %d count %d: member %d differs from the root at %d", root, count, i, d)
						}
					}
				}
			}
			if err := rings[0].Broadcast(context.Background(), n, nil); err == nil {
				t.Errorf("broadcast from rank %d of %d succeeded", n, n)
			}
		})
	}
}

func TestWorldOfOne(t *testing.T) {
	var l *Listener // a lone member needs no listener
	r, err := l.Form(context.Background(), Config{Peers: []string{"unused"}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	data := []float32{1, 2, 3}
	if err := r.AllReduce(context.Background(), data); err != nil || data[0] != 1 || data[2] != 3 {
		t.Fatalf("AllReduce = %v, data %v", err, data)
	}
	if err := r.Broadcast(context.Background(), 0, data); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Ops != 2 || s.BytesSent != 0 {
		t.Errorf("stats %+v, want 2 ops and no bytes", s)
	}
	_ = r.Close()
	if err := r.AllReduce(context.Background(), data); !errors.Is(err, ErrClosed) {
		t.Errorf("AllReduce after Close = %v, want ErrClosed", err)
	}
}

func TestStats(t *testing.T) {
	rings := formRings(t, newListeners(t, 2), 1, testTimeout, nil)
	errs := onAll(2, func(i int) error { return rings[i].AllReduce(context.Background(), make([]float32, 1000)) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		// One half in reduce-scatter, the other in all-gather, plus the header.
		want := int64(headerLen + 4*1000)
		if s := rings[i].Stats(); s.Ops != 1 || s.BytesSent != want || s.BytesReceived != want || s.Busy <= 0 {
			t.Errorf("member %d stats %+v, want 1 op and %d bytes each way", i, s, want)
		}
	}
}

func TestOutOfStep(t *testing.T) {
	cases := []struct {
		name string
		op   func(i int, r *Ring) error
	}{
		{"lengths", func(i int, r *Ring) error { return r.AllReduce(context.Background(), make([]float32, 10+i)) }},
		{"operations", func(i int, r *Ring) error {
			if i == 0 {
				return r.Broadcast(context.Background(), 0, make([]float32, 10))
			}
			return r.AllReduce(context.Background(), make([]float32, 10))
		}},
		{"roots", func(i int, r *Ring) error { return r.Broadcast(context.Background(), i, make([]float32, 10)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rings := formRings(t, newListeners(t, 3), 1, testTimeout, nil)
			start := time.Now()
			errs := onAll(3, func(i int) error { return c.op(i, rings[i]) })
			if took := time.Since(start); took > testTimeout/2 {
				t.Errorf("took %v: a mismatch must fail at once, not by timeout", took)
			}
			sawStep := false
			for i, err := range errs {
				if err == nil {
					t.Errorf("member %d succeeded", i)
					continue
				}
				sawStep = sawStep || strings.Contains(err.Error(), "out of step")
				if err := rings[i].AllReduce(context.Background(), nil); !errors.Is(err, ErrBroken) {
					t.Errorf("member %d: next collective = %v, want ErrBroken", i, err)
				}
			}
			if !sawStep {
				t.Errorf("no member reported being out of step: %v", errs)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A long Timeout: only ctx can end the wait for member 1, which
			// never joins the collective.
			rings := formRings(t, newListeners(t, 2), 1, time.Minute, nil)
			ctx, cancel := c.ctx()
			defer cancel()
			start := time.Now()
			err := rings[0].AllReduce(ctx, make([]float32, 1<<20))
			if !errors.Is(err, c.want) {
				t.Fatalf("AllReduce = %v, want %v", err, c.want)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v to notice the end of ctx", took)
			}
			if err := rings[0].AllReduce(context.Background(), nil); !errors.Is(err, ErrBroken) {
				t.Errorf("next collective = %v, want ErrBroken", err)
			}
		})
	}
}

func TestCloseDuringCollective(t *testing.T) {
	rings := formRings(t, newListeners(t, 2), 1, time.Minute, nil)
	time.AfterFunc(50*time.Millisecond, func() { _ = rings[0].Close() })
	if err := rings[0].AllReduce(context.Background(), make([]float32, 10)); err == nil {
		t.Fatal("AllReduce on a ring closed under it succeeded")
	}
	// The neighbour sees the closed connections at once, not after a minute.
	done := make(chan error, 1)
	go func() { done <- rings[1].AllReduce(context.Background(), make([]float32, 10)) }()
	if err := within(t, done, 5*time.Second, "neighbour of a closed ring"); err == nil {
		t.Fatal("neighbour's AllReduce succeeded")
	}
}

func TestConfigValidation(t *testing.T) {
	ok := Config{Rank: 1, Peers: []string{"a:1", "b:1"}, Timeout: time.Second}
	for _, c := range []struct {
		name   string
		adjust func(*Config)
		want   string
	}{
		{"no peers", func(c *Config) { c.Peers = nil }, "no peers"},
		{"rank", func(c *Config) { c.Rank = 2 }, "rank 2 out of range"},
		{"negative rank", func(c *Config) { c.Rank = -1 }, "rank -1 out of range"},
		{"timeout", func(c *Config) { c.Timeout = 0 }, "timeout must be positive"},
		{"segment", func(c *Config) { c.SegmentBytes = 3 }, "segment size 3"},
		{"duplicate", func(c *Config) { c.Peers = []string{"a:1", "a:1"} }, "share the address a:1"},
		{"empty address", func(c *Config) { c.Peers = []string{"a:1", ""} }, "peer 1 has no address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok
			c.adjust(&cfg)
			err := cfg.validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("validate = %v, want %q", err, c.want)
			}
		})
	}
	if err := ok.validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

func TestWireFormat(t *testing.T) {
	h := header{op: opBroadcast, root: 3, seq: 1 << 40, count: 1 << 33}
	var hb [headerLen]byte
	h.put(&hb)
	if got, err := parseHeader(&hb); err != nil || got != h {
		t.Errorf("header round trip = %+v, %v; want %+v", got, err, h)
	}
	data := []float32{0, 1, -2.5, 3e-38, 1e38}
	b := make([]byte, 4*len(data))
	if _, err := binary.Encode(b, binary.LittleEndian, data); err != nil {
		t.Fatal(err)
	}
	if !hostLittleEndian() {
		t.Skip("memory layout is not the wire format on this host")
	}
	// On this host the ring sends memory as it is: it must be the format.
	if string(b) != string(floatBytes(data)) {
		t.Errorf("little-endian encoding %x differs from memory %x", b, floatBytes(data))
	}
}

// Listeners live across rings: members leave, rejoin in another order, and
// a rejoining member receives the current state by Broadcast.
func TestReformAcrossVersions(t *testing.T) {
	const count = 10_007
	ls := newListeners(t, 3)
	rng := rand.New(rand.NewPCG(13, 14))
	for v, order := range [][]int{{0, 1, 2}, {2, 0}, {1, 2, 0}, {0, 1}} {
		members := make([]*Listener, len(order))
		for i, li := range order {
			members[i] = ls[li]
		}
		rings := formRings(t, members, int64(v+1), testTimeout, nil)
		n := len(rings)
		state := randomInputs(rng, n, count)
		grads := make([][]float32, n)
		for i := range grads {
			grads[i] = memberInput(i, v, count)
		}
		want := ringOrderSum(grads)
		errs := onAll(n, func(i int) error {
			if err := rings[i].Broadcast(context.Background(), n-1, state[i]); err != nil {
				return err
			}
			return rings[i].AllReduce(context.Background(), grads[i])
		})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("version %d member %d: %v", v+1, i, err)
			}
			if d := firstBitDiff(state[i], state[n-1]); d != -1 {
				t.Errorf("version %d member %d: broadcast state differs from the root's at %d", v+1, i, d)
			}
			if d := firstBitDiff(grads[i], want); d != -1 {
				t.Errorf("version %d member %d: allreduce differs from the reference at %d", v+1, i, d)
			}
		}
		for _, r := range rings {
			_ = r.Close()
		}
	}
}

// Members on one host connect over Unix sockets; a member listening on TCP
// only is reached over TCP, so a ring may mix both.
func TestTransports(t *testing.T) {
	local, tcp := newListenersOver(t, 2, true), newListenersOver(t, 1, false)
	ls := []*Listener{local[0], local[1], tcp[0]}
	rings := formRings(t, ls, 1, testTimeout, nil)
	// Member 0 dials member 1 (Unix), member 1 dials member 2 (TCP only),
	// member 2 dials member 0 (Unix).
	for i, want := range []string{"unix", "tcp", "unix"} {
		if got := rings[i].out.RemoteAddr().Network(); got != want {
			t.Errorf("member %d reaches the next over %s, want %s", i, got, want)
		}
	}
	bufs := [][]float32{{1, 2}, {10, 20}, {100, 200}}
	errs := onAll(3, func(i int) error { return rings[i].AllReduce(context.Background(), bufs[i]) })
	for i, err := range errs {
		if err != nil || bufs[i][0] != 111 || bufs[i][1] != 222 {
			t.Fatalf("member %d: %v, %v", i, bufs[i], err)
		}
	}
	if !isLoopback("127.64.1.2:80") || isLoopback("10.0.0.1:80") || isLoopback("nonsense") {
		t.Error("isLoopback")
	}
}
