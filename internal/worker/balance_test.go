package worker

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBalancedShare(t *testing.T) {
	for _, c := range []struct {
		name                        string
		global, minibatch, rank, sz int
		rates                       []float32
		want                        int64
	}{
		{"not balancing", 0, 64, 2, 3, []float32{100, 100, 35}, 64},
		{"no rates yet", 0, 64, 0, 3, nil, 64},
		{"idle member", 0, 64, 1, 3, []float32{100, 0, 100}, 64},
		{"equal members", 0, 64, 2, 3, []float32{100, 100, 100}, 64},
		{"the slow member takes less", 0, 64, 2, 3, []float32{100, 100, 35}, 22},
		{"the fast ones keep a minibatch", 0, 64, 0, 3, []float32{100, 100, 35}, 64},
		{"the fastest sets the scale", 0, 64, 1, 3, []float32{50, 100, 100}, 64},
		{"never below the floor", 0, 64, 2, 3, []float32{1000, 1000, 1}, 6},
		{"never below two records (BatchNorm)", 0, 4, 2, 3, []float32{1000, 1000, 1}, 2},
		{"one record when the equal share is one", 0, 1, 2, 3, []float32{1000, 1000, 1}, 1},
		{"global, equal rates", 96, 64, 0, 3, []float32{100, 100, 100}, 32},
		{"global, the slow member's part", 96, 64, 2, 3, []float32{100, 100, 35}, 14},
		{"global, a fast member's part", 96, 64, 0, 3, []float32{100, 100, 35}, 41},
		{"global, an idle member's part goes to the busy ones", 96, 64, 0, 3, []float32{100, 0, 35}, 69},
		{"global, the idle member comes back with its floor", 96, 64, 1, 3, []float32{100, 0, 35}, 3},
		{"not balancing, global, every member busy", 96, 64, 1, 3, []float32{100, 100, 100}, 32},
		{"not balancing, global, an idle member's part goes to the busy ones", 96, 64, 2, 3, []float32{100, 0, 100}, 46},
		{"not balancing, global, the lower busy rank takes the remainder", 96, 64, 0, 3, []float32{100, 0, 100}, 47},
		{"not balancing, global, alone with records", 96, 64, 1, 3, []float32{0, 100, 0}, 90},
		{"not balancing, global, the idle member comes back with its floor", 96, 64, 1, 3, []float32{100, 0, 100}, 3},
		{"not balancing, global, every member idle", 96, 64, 1, 3, []float32{0, 0, 0}, 32},
		{"not balancing, global, the remainder to the lowest busy rank", 101, 64, 1, 3, []float32{0, 100, 100}, 49},
		{"rates of another ring's size", 0, 64, 2, 3, []float32{100, 35}, 64},
	} {
		balancing := !strings.HasPrefix(c.name, "not balancing")
		if got := balancedShare(c.global, c.minibatch, c.rank, c.sz, c.rates, balancing); got != c.want {
			t.Errorf("%s: balancedShare(%d, %d, %d, %d, %v) = %d, want %d", c.name, c.global, c.minibatch, c.rank, c.sz, c.rates, got, c.want)
		}
	}
}

// splitCases are python/tests/test_ringbook.py's SPLIT_CASES too: the SDK's
// split_by_rate gives the same parts.
var splitCases = []struct {
	total         int64
	rates         []float32
	floors, parts []int64
}{
	{96, []float32{100, 100, 35}, []int64{3, 3, 3}, []int64{41, 41, 14}},
	{93, []float32{100, 0, 35}, []int64{3, 3, 3}, []int64{69, 0, 24}},
	{269, []float32{28, 931}, []int64{13, 13}, []int64{13, 256}},         // the slow one's part is its floor
	{100, []float32{1, 1, 1}, []int64{3, 3, 3}, []int64{34, 33, 33}},     // a tie: the lower rank
	{10, []float32{1000, 1, 1}, []int64{3, 3, 3}, []int64{4, 3, 3}},      // floors first, then the rest
	{7, []float32{5, 5, 5, 5}, []int64{2, 2, 2, 2}, []int64{2, 2, 2, 2}}, // floors that do not fit
	{96, []float32{0, 0, 50}, []int64{3, 3, 3}, []int64{0, 0, 96}},       // the idle take no part
	{300, []float32{333.5, 333.25, 100.125}, []int64{10, 10, 10}, []int64{131, 130, 39}},
}

func TestSplitByRate(t *testing.T) {
	for _, c := range splitCases {
		if got := splitByRate(c.total, c.rates, c.floors); !slices.Equal(got, c.parts) {
			t.Errorf("splitByRate(%d, %v, %v) = %v, want %v", c.total, c.rates, c.floors, got, c.parts)
		}
	}
}

// With a global batch the members' shares, each decided from the same
// rates, add up to it exactly whichever members were idle in the last
// step: one back from idle takes only its floor, which the others left it
// (one that stays idle leaves its floor untrained: the step is smaller,
// never larger).
func TestBalancedSharesKeepTheGlobalBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 1))
	for range 20000 {
		size, global := 1+rng.IntN(6), 1+rng.IntN(300)
		rates := make([]float32, size)
		for r := range rates {
			if rng.IntN(3) > 0 {
				rates[r] = float32(1 + rng.IntN(1000))
			}
		}
		for _, balancing := range []bool{false, true} {
			var sum int64
			for r := range size {
				sum += balancedShare(global, 64, r, size, rates, balancing)
			}
			// Below the ring's size, every member still takes a record.
			if want := int64(max(global, size)); sum != want && (global >= size || sum > want) {
				t.Fatalf("global %d, rates %v, balancing %v: the members take %d records", global, rates, balancing, sum)
			}
		}
	}
}

func TestRateMeter(t *testing.T) {
	var m rateMeter
	m.observe(0, time.Second) // nothing trained: no rate
	m.observe(100, 0)
	if m.rate != 0 {
		t.Fatalf("rate %v from nothing", m.rate)
	}
	m.observe(100, time.Second)
	if m.rate != 100 {
		t.Fatalf("first rate %v, want 100", m.rate)
	}
	m.observe(200, time.Second)
	if want := 1 / (0.7/100 + 0.3/200); math.Abs(m.rate-want) > 1e-9 {
		t.Fatalf("smoothed rate %v, want %v (the time per record smoothed)", m.rate, want)
	}
	// Bursts: a step at full speed, one with a stop inside, alternately:
	// the rate settles near records over time, not the mean of the rates.
	m = rateMeter{}
	for i := range 200 {
		d := 10 * time.Millisecond
		if i%2 == 1 {
			d = 90 * time.Millisecond
		}
		m.observe(10, d)
	}
	if m.rate < 150 || m.rate > 270 {
		t.Fatalf("rate %v under bursts, want near 20 records / 0.1 s = 200 (the mean of the rates is 556)", m.rate)
	}
}

func TestBalanceNext(t *testing.T) {
	slow, noisy, even := []float32{100, 100, 35}, []float32{100, 100, 75}, []float32{100, 100, 90}
	for _, c := range []struct {
		name  string
		from  balance
		rates []float32
		want  balance
	}{
		{"no rates", balance{}, nil, balance{}},
		{"even members", balance{}, even, balance{}},
		{"noise above 0.7 is not slow", balance{}, noisy, balance{}},
		{"a slow step counts", balance{}, slow, balance{below: 1}},
		{"two in a row", balance{below: 1}, slow, balance{below: 2}},
		{"the third turns shares on", balance{below: 2}, slow, balance{on: true}},
		{"a step back in the band resets the count", balance{below: 2}, noisy, balance{}},
		{"on, still slow", balance{on: true}, slow, balance{on: true}},
		{"on, below 0.85 stays on", balance{on: true}, []float32{100, 100, 80}, balance{on: true}},
		{"on, back within 0.85 counts", balance{on: true}, []float32{100, 100, 90}, balance{on: true, below: 1}},
		{"on, back within 0.85 twice", balance{on: true, below: 1}, []float32{100, 100, 90}, balance{on: true, below: 2}},
		{"on, the third step within 0.85 turns shares off", balance{on: true, below: 2}, []float32{100, 100, 90}, balance{}},
		{"on, a slow step again resets the count", balance{on: true, below: 2}, slow, balance{on: true}},
		{"one busy member: nothing to balance", balance{on: true}, []float32{100, 0, 0}, balance{}},
		{"none busy", balance{below: 2}, []float32{0, 0, 0}, balance{}},
	} {
		if got := c.from.next(c.rates); got != c.want {
			t.Errorf("%s: %+v.next(%v) = %+v, want %+v", c.name, c.from, c.rates, got, c.want)
		}
	}
}
