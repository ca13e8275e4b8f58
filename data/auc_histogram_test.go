package data

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestScoreHistogramAUC checks the histogram AUC against the exact one on
// click-like scores, and that merging per-task histograms gives the same
// AUC whatever the split.
func TestScoreHistogramAUC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200_000
	scores := make([]float64, n)
	labels := make([]int32, n)
	for i := range n {
		// A logistic model's probabilities, mostly in [0.05, 0.6].
		p := 1 / (1 + math.Exp(-(-1.2 + rng.NormFloat64())))
		scores[i] = p
		if rng.Float64() < p {
			labels[i] = 1
		}
	}
	exact := AUC(scores, labels)
	whole := NewScoreHistogram()
	for i := range n {
		whole.Add(scores[i], labels[i])
	}
	if got := whole.AUC(); math.Abs(got-exact) > 1e-4 {
		t.Errorf("histogram AUC %.6f, exact %.6f: differ by more than 1e-4", got, exact)
	}
	// Tasks of uneven sizes, merged in any order.
	merged := NewScoreHistogram()
	for start := 0; start < n; {
		end := min(n, start+1+rng.IntN(5000))
		h := NewScoreHistogram()
		for i := start; i < end; i++ {
			h.Add(scores[i], labels[i])
		}
		if err := merged.Merge(h); err != nil {
			t.Fatal(err)
		}
		start = end
	}
	if merged.AUC() != whole.AUC() || merged.Count() != n {
		t.Errorf("merged AUC %v (count %d), whole %v (count %d)", merged.AUC(), merged.Count(), whole.AUC(), n)
	}
}

func TestScoreHistogramEdges(t *testing.T) {
	h := NewScoreHistogram()
	if !math.IsNaN(h.AUC()) {
		t.Errorf("empty histogram AUC %v, want NaN", h.AUC())
	}
	// Out-of-range and NaN scores are clamped, never out of bounds.
	for _, s := range []float64{-1, 0, math.NaN(), 1, 2, math.Inf(1)} {
		h.Add(s, 0)
	}
	h.Add(0.5, 1)
	if h.Count() != 7 {
		t.Errorf("count %d, want 7", h.Count())
	}
	// Positive at 0.5: above 3 negatives (-1, 0, NaN at bucket 0), below 3.
	if got := h.AUC(); got != 0.5 {
		t.Errorf("AUC %v, want 0.5", got)
	}
	if err := h.Merge(&ScoreHistogram{Positive: make([]int64, 3), Negative: make([]int64, 3)}); err == nil {
		t.Error("merging histograms of different sizes: no error")
	}
	bad := []*ScoreHistogram{{}, {Positive: []int64{1}, Negative: []int64{1, 2}}, {Positive: []int64{-1}, Negative: []int64{0}}}
	for _, b := range bad {
		if err := b.Validate(); err == nil {
			t.Errorf("Validate(%v): no error", b)
		}
	}
	if err := h.Validate(); err != nil {
		t.Error(err)
	}
}
