package optimizer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdamVectorMatchesScalar checks the vector kernel against the scalar
// formula, element by element, for lengths around the vector width and a
// large one, over several steps (so m and v are not zero).
func TestAdamVectorMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 1000, 4099} {
		p, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range p {
			p[i] = rng.Float32()*2 - 1
		}
		rp, rm, rv := append([]float32(nil), p...), make([]float32, n), make([]float32, n)
		const lrt, c1, c2, eps = float32(0.0013), float32(0.1), float32(0.001), float32(1e-7)
		for step := 0; step < 3; step++ {
			for i := range g {
				g[i] = float32(rng.NormFloat64())
				if i%5 == 0 {
					g[i] = 0 // v stays tiny: eps matters
				}
			}
			done := adamVector(p, g, m, v, lrt, c1, c2, eps)
			if done > n || done%8 != 0 {
				t.Fatalf("n=%d: vector kernel did %d elements", n, done)
			}
			for i := done; i < n; i++ { // what the caller's scalar loop does
				m[i] += (g[i] - m[i]) * c1
				v[i] += (g[i]*g[i] - v[i]) * c2
				p[i] -= lrt * m[i] / (sqrt32(v[i]) + eps)
			}
			for i := range rp {
				rm[i] += (g[i] - rm[i]) * c1
				rv[i] += (g[i]*g[i] - rv[i]) * c2
				rp[i] -= lrt * rm[i] / (sqrt32(rv[i]) + eps)
			}
			for i := range p {
				if !closeULP(p[i], rp[i]) || !closeULP(m[i], rm[i]) || !closeULP(v[i], rv[i]) {
					t.Fatalf("n=%d step %d element %d: vector p,m,v = %v,%v,%v; scalar %v,%v,%v", n, step, i, p[i], m[i], v[i], rp[i], rm[i], rv[i])
				}
			}
		}
	}
}

// closeULP: equal, or 1 unit in the last place apart (a compiler may fuse
// the scalar formula's multiply-adds, e.g. with GOAMD64=v3).
func closeULP(a, b float32) bool {
	d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
	return d >= -1 && d <= 1
}
