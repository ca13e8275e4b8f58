package autoscale

import (
	"math"
	"testing"
)

func TestFitSpeedup(t *testing.T) {
	prior := DefaultPrior()
	// A job whose true curve is 100·w^0.6.
	truth := func(w int) float64 { return 100 * math.Pow(float64(w), 0.6) }
	cases := []struct {
		name    string
		samples []Sample
		ok      bool
		base    float64
		exp     float64
		tol     float64
	}{
		{"none", nil, false, 0, 0.8, 1e-9},
		{"one size only: the prior's exponent", []Sample{{4, 400, 10}}, true, 400 / math.Pow(4, 0.8), 0.8, 1e-9},
		{"exact, two sizes", []Sample{{1, truth(1), 5}, {8, truth(8), 5}}, true, 100, 0.6, 0.02},
		{"exact, four sizes", []Sample{{1, truth(1), 5}, {2, truth(2), 5}, {4, truth(4), 5}, {16, truth(16), 5}}, true, 100, 0.6, 0.01},
		{"noisy (±10%)", []Sample{{1, truth(1) * 1.1, 20}, {2, truth(2) * 0.9, 20}, {4, truth(4) * 1.05, 20},
			{8, truth(8) * 0.92, 20}, {16, truth(16) * 1.08, 20}}, true, 100, 0.6, 0.06},
		{"nonsense left out", []Sample{{1, truth(1), 5}, {8, truth(8), 5}, {0, 50, 5}, {-2, 50, 5}, {4, 0, 5},
			{4, -3, 5}, {4, math.NaN(), 5}, {4, math.Inf(1), 5}, {2, 1e9, 0}}, true, 100, 0.6, 0.02},
		{"only nonsense", []Sample{{0, 50, 5}, {4, math.NaN(), 5}}, false, 0, 0.8, 1e-9},
		{"decreasing: exponent 0", []Sample{{1, 100, 5}, {2, 80, 5}, {4, 60, 5}}, true, 78.3, 0, 0.01},
		{"superlinear: exponent 1", []Sample{{1, 100, 5}, {2, 300, 5}}, true, 122.5, 1, 0.01},
		{"repeated size: count-weighted", []Sample{{2, truth(2) * 1.2, 1}, {2, truth(2), 99}, {8, truth(8), 100}}, true, 100, 0.6, 0.02},
	}
	for _, c := range cases {
		m, ok := FitSpeedup(c.samples, prior)
		if ok != c.ok {
			t.Errorf("%s: ok %v, want %v", c.name, ok, c.ok)
			continue
		}
		if math.Abs(m.Exponent-c.exp) > c.tol {
			t.Errorf("%s: exponent %.4f, want %.4f", c.name, m.Exponent, c.exp)
		}
		if ok && math.Abs(m.Base-c.base)/c.base > max(c.tol, 0.01) {
			t.Errorf("%s: base %.2f, want %.2f", c.name, m.Base, c.base)
		}
	}
}

func TestFitSpeedupPeak(t *testing.T) {
	cases := []struct {
		name    string
		samples []Sample
		want    int
	}{
		{"rising", []Sample{{1, 100, 5}, {4, 300, 5}, {16, 800, 5}}, 0},
		{"flat within noise", []Sample{{1, 100, 5}, {4, 300, 5}, {16, 290, 5}}, 0},
		{"falls beyond 4", []Sample{{1, 100, 5}, {4, 300, 5}, {8, 250, 5}, {16, 200, 5}}, 4},
		{"one size", []Sample{{4, 300, 5}}, 0},
	}
	for _, c := range cases {
		m, _ := FitSpeedup(c.samples, DefaultPrior())
		if m.Peak != c.want {
			t.Errorf("%s: peak %d, want %d", c.name, m.Peak, c.want)
		}
		if last := c.samples[len(c.samples)-1].Workers; m.Measured != last {
			t.Errorf("%s: largest measured %d, want %d", c.name, m.Measured, last)
		}
	}
}

func TestSpeedupThroughput(t *testing.T) {
	m := Speedup{Base: 10, Exponent: 0.5}
	for _, c := range []struct {
		w    int
		want float64
	}{{-1, 0}, {0, 0}, {1, 10}, {4, 20}, {16, 40}} {
		if got := m.Throughput(c.w); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Throughput(%d) = %v, want %v", c.w, got, c.want)
		}
	}
}
