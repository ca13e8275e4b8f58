package nn

import (
	"math"
	"math/rand"
	"testing"
)

func TestCINGrad(t *testing.T) {
	for _, sizes := range [][]int{{3}, {4, 2}, {2, 3, 2}} {
		rng := rand.New(rand.NewSource(5))
		// Inputs of moderate size keep the cubic terms well conditioned
		// for float32 central differences.
		x := randTensor(rng, 3, 4, 3)
		for i := range x.Data {
			x.Data[i] *= 0.7
		}
		checkGrads(t, NewCIN("cin", 4, 3, sizes, rng), x, gradTol{eps: 1e-2, atol: 3e-3, rtol: 2e-2}, rng)
	}
}

// The GEMM formulation must equal the definition, summed term by term.
func TestCINMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	const n, f, d = 2, 3, 4
	sizes := []int{2, 3}
	l := NewCIN("cin", f, d, sizes, rng)
	x := randTensor(rng, n, f, d)
	y := l.Forward(x, false)
	if y.Shape[0] != n || y.Shape[1] != 5 || l.OutputSize() != 5 {
		t.Fatalf("output shape %v", y.Shape)
	}
	for r := 0; r < n; r++ {
		x0 := func(j, e int) float64 { return float64(x.Data[(r*f+j)*d+e]) }
		prev := make([][]float64, f)
		for j := range prev {
			prev[j] = make([]float64, d)
			for e := range d {
				prev[j][e] = x0(j, e)
			}
		}
		col := 0
		for k, h := range sizes {
			w := l.weights[k].Value.Data
			next := make([][]float64, h)
			for hh := range h {
				next[hh] = make([]float64, d)
				for i := range prev {
					for j := range f {
						for e := range d {
							next[hh][e] += float64(w[hh*len(prev)*f+i*f+j]) * prev[i][e] * x0(j, e)
						}
					}
				}
				var s float64
				for _, v := range next[hh] {
					s += v
				}
				if got := float64(y.Data[r*5+col+hh]); math.Abs(got-s) > 1e-4*(1+math.Abs(s)) {
					t.Errorf("record %d layer %d map %d: %v, want %v", r, k, hh, got, s)
				}
			}
			col += h
			prev = next
		}
	}
}
