package collective

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// randomInputs returns n buffers of count floats of mixed magnitudes, so that
// summing them in another order changes low bits.
func randomInputs(rng *rand.Rand, n, count int) [][]float32 {
	in := make([][]float32, n)
	for r := range in {
		in[r] = make([]float32, count)
		for i := range in[r] {
			in[r][i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
		}
	}
	return in
}

var magnitudes = [8]float32{1e-3, 1e-2, 1e-1, 1, 1e1, 1e2, 1e3, 1e4}

// memberInput is member rank's deterministic input for iteration iter: any
// process can compute every member's input, hence the expected sum.
func memberInput(rank, iter, count int) []float32 {
	x := make([]float32, count)
	s := uint64(rank)<<48 ^ uint64(iter)<<24 ^ 0x9e3779b97f4a7c15
	for i := range x {
		s += 0x9e3779b97f4a7c15 // splitmix64
		z := s
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		// mantissa from the low bits, magnitude 1e-3..1e4 from the high ones
		x[i] = (float32(z&0xffffff)/(1<<23) - 1) * magnitudes[z>>61]
	}
	return x
}

// ringOrderSum is the documented result, computed independently of the
// package: the buffer is cut into n contiguous chunks, the first count%n one
// element longer; chunk c is summed in float32 starting with member c's
// values and going round the ring: ((x[c] + x[c+1]) + x[c+2]) + ...
func ringOrderSum(inputs [][]float32) []float32 {
	n, count := len(inputs), len(inputs[0])
	out := make([]float32, count)
	i := 0
	for c := range n {
		length := count / n
		if c < count%n {
			length++
		}
		for end := i + length; i < end; i++ {
			acc := inputs[c][i]
			for k := 1; k < n; k++ {
				acc += inputs[(c+k)%n][i]
			}
			out[i] = acc
		}
	}
	return out
}

// firstBitDiff is the first index where a and b differ in bits (or in
// length, then -2), or -1.
func firstBitDiff(a, b []float32) int {
	if len(a) != len(b) {
		return -2
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newListeners(t testing.TB, n int) []*Listener {
	t.Helper()
	return newListenersOver(t, n, true)
}

// newListenersOver makes n listeners on loopback; local: same-host peers
// connect over Unix sockets, else over TCP.
func newListenersOver(t testing.TB, n int, local bool) []*Listener {
	t.Helper()
	ls := make([]*Listener, n)
	for i := range ls {
		l, err := listen("127.0.0.1:0", quietLogger(), local, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ls[i] = l
	}
	return ls
}

func addrs(ls []*Listener) []string {
	peers := make([]string, len(ls))
	for i, l := range ls {
		peers[i] = l.Addr()
	}
	return peers
}

// formRings forms one ring over ls (all members in this process); adjust may
// change each member's config.
func formRings(t testing.TB, ls []*Listener, version int64, timeout time.Duration, adjust func(*Config)) []*Ring {
	t.Helper()
	rings := make([]*Ring, len(ls))
	errs := onAll(len(ls), func(i int) error {
		cfg := Config{Rank: i, Peers: addrs(ls), Version: version, Timeout: timeout, Logger: quietLogger()}
		if adjust != nil {
			adjust(&cfg)
		}
		var err error
		rings[i], err = ls[i].Form(context.Background(), cfg)
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	for _, r := range rings {
		t.Cleanup(func() { _ = r.Close() })
	}
	return rings
}

// onAll runs f(0..n-1) concurrently and returns their errors.
func onAll(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errs
}

// runAllReduces runs iters allreduces (0: until one fails) of count floats
// on ring, each on memberInput of this rank and iteration. With verify it
// checks every result against ringOrderSum of all members' inputs. progress,
// if not nil, is called after each one. It returns how many completed.
func runAllReduces(ctx context.Context, ring *Ring, count, iters int, verify bool, progress func(int)) (int, error) {
	data := memberInput(ring.Rank(), 0, count)
	for it := 0; iters == 0 || it < iters; it++ {
		if verify {
			data = memberInput(ring.Rank(), it, count)
		}
		if err := ring.AllReduce(ctx, data); err != nil {
			return it, err
		}
		if verify {
			inputs := make([][]float32, ring.Size())
			for r := range inputs {
				inputs[r] = memberInput(r, it, count)
			}
			if i := firstBitDiff(data, ringOrderSum(inputs)); i != -1 {
				return it, fmt.Errorf("iteration %d: result differs from the reference at element %d", it, i)
			}
		}
		if progress != nil {
			progress(it + 1)
		}
	}
	return iters, nil
}

// within returns what ch yields, failing the test when nothing comes within d.
func within(t *testing.T, ch <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("%s: still waiting after %v", what, d)
		return nil
	}
}
