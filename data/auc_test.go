package data

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestAUCHandValues(t *testing.T) {
	cases := []struct {
		name   string
		scores []float64
		labels []int32
		want   float64
	}{
		// 4 pairs; only (neg 0.4, pos 0.35) is misordered: 3/4.
		{"sklearn example", []float64{0.1, 0.4, 0.35, 0.8}, []int32{0, 0, 1, 1}, 0.75},
		{"perfect", []float64{1, 2, 3, 4}, []int32{0, 0, 1, 1}, 1},
		{"inverted", []float64{4, 3, 2, 1}, []int32{0, 0, 1, 1}, 0},
		{"all tied", []float64{0.5, 0.5, 0.5, 0.5}, []int32{0, 1, 0, 1}, 0.5},
		// Positives 2 and 3, negatives 1 and 2: 2>1 (1), 2=2 (1/2), 3>1, 3>2 (2): 3.5/4.
		{"one tie", []float64{1, 2, 2, 3}, []int32{0, 1, 0, 1}, 0.875},
		// Average ranks: 1, 2.5, 2.5, 4.5, 4.5, 6; positives at 2.5, 4.5, 6:
		// (13 - 3*4/2) / (3*3) = 7/9.
		{"two tie groups", []float64{0, 1, 1, 2, 2, 3}, []int32{0, 1, 0, 1, 0, 1}, 7.0 / 9},
		// Negatives 0.2, 0.3; positives 0.9 (beats both) and 0.1 (beats none): 2/4.
		{"any non-zero label is positive", []float64{0.2, 0.9, 0.1, 0.3}, []int32{0, 7, -1, 0}, 0.5},
		{"infinite scores", []float64{math.Inf(-1), math.Inf(1), 0}, []int32{0, 1, 0}, 1},
		{"negative zero ties zero", []float64{math.Copysign(0, -1), 0}, []int32{1, 0}, 0.5},
	}
	for _, tc := range cases {
		if got := AUC(tc.scores, tc.labels); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: AUC = %v, want %v", tc.name, got, tc.want)
		}
	}
	for name, tc := range map[string]struct {
		scores []float64
		labels []int32
	}{
		"no positives": {[]float64{1, 2}, []int32{0, 0}},
		"no negatives": {[]float64{1, 2}, []int32{1, 1}},
		"empty":        {nil, nil},
		"NaN score":    {[]float64{1, math.NaN(), 3}, []int32{0, 1, 1}},
	} {
		if got := AUC(tc.scores, tc.labels); !math.IsNaN(got) {
			t.Errorf("%s: AUC = %v, want NaN", name, got)
		}
	}
}

func TestAUCLengthMismatchPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "2 scores but 1 labels") {
			t.Errorf("recover() = %v, want a panic naming the lengths", r)
		}
	}()
	AUC([]float64{1, 2}, []int32{1})
}

// TestAUCMatchesPairCount checks AUC against its definition, counting every
// positive-negative pair, on data with many ties.
func TestAUCMatchesPairCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		n := 2 + rng.IntN(60)
		scores := make([]float64, n)
		labels := make([]int32, n)
		for i := range scores {
			scores[i] = float64(rng.IntN(5)) // few values: many ties
			labels[i] = int32(rng.IntN(2))
		}
		var pairs, wins float64
		for i := range n {
			for j := range n {
				if labels[i] == 0 || labels[j] != 0 {
					continue
				}
				pairs++
				switch {
				case scores[i] > scores[j]:
					wins++
				case scores[i] == scores[j]:
					wins += 0.5
				}
			}
		}
		want := wins / pairs // NaN without both classes, as AUC
		got := AUC(scores, labels)
		if !(math.Abs(got-want) < 1e-12 || math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("AUC(%v, %v) = %v, pair count gives %v", scores, labels, got, want)
		}
	}
}
