package nn

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// naiveGemm is the definition gemm is checked against, in float64.
func naiveGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			c[i*ldc+j] = float32(float64(alpha)*s + float64(beta)*float64(c[i*ldc+j]))
		}
	}
}

// TestGemmMatchesNaive checks gemm (whichever kernel this build and CPU
// run: OpenBLAS, the assembly kernel or gonum) on all four layouts, odd
// sizes around the 6x16 tile and the 256/512 blocks, padded leading
// dimensions, and alpha/beta other than 1/0.
func TestGemmMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	sizes := [][3]int{{1, 1, 1}, {6, 16, 1}, {5, 15, 7}, {7, 17, 3}, {13, 33, 9}, {64, 128, 300}, {12, 520, 5}, {300, 40, 17}, {2, 3, 600}}
	for _, s := range sizes {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, ab := range [][2]float32{{1, 0}, {1, 1}, {0.5, -2}} {
				m, n, k := s[0], s[1], s[2]
				name := fmt.Sprintf("%dx%dx%d_t%v%v_a%v_b%v", m, n, k, tr[0], tr[1], ab[0], ab[1])
				// Leading dimensions with padding, as sub-matrix views.
				ar, ac := m, k
				if tr[0] {
					ar, ac = k, m
				}
				br, bc := k, n
				if tr[1] {
					br, bc = n, k
				}
				lda, ldb, ldc := ac+3, bc+1, n+2
				a, b := make([]float32, ar*lda), make([]float32, br*ldb)
				for i := range a {
					a[i] = float32(rng.NormFloat64())
				}
				for i := range b {
					b[i] = float32(rng.NormFloat64())
				}
				c := make([]float32, m*ldc)
				for i := range c {
					c[i] = float32(rng.NormFloat64())
				}
				want := append([]float32(nil), c...)
				gemm(tr[0], tr[1], m, n, k, ab[0], a, lda, b, ldb, ab[1], c, ldc)
				naiveGemm(tr[0], tr[1], m, n, k, ab[0], a, lda, b, ldb, ab[1], want, ldc)
				for i := range c {
					if d := math.Abs(float64(c[i] - want[i])); d > 1e-4*math.Sqrt(float64(k))*(1+math.Abs(float64(want[i]))) {
						t.Fatalf("%s: c[%d] = %v, want %v", name, i, c[i], want[i])
					}
				}
			}
		}
	}
}

// TestGemmConcurrent runs gemm from several goroutines at once (workers
// share the kernel's packing buffers' free list); run it with -race.
func TestGemmConcurrent(t *testing.T) {
	const m, n, k = 37, 70, 300
	errs := make(chan string, 4)
	for g := 0; g < 4; g++ {
		go func(seed int64) {
			rng := rand.New(rand.NewSource(seed))
			a, b := make([]float32, m*k), make([]float32, k*n)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			for i := range b {
				b[i] = float32(rng.NormFloat64())
			}
			c, want := make([]float32, m*n), make([]float32, m*n)
			for it := 0; it < 20; it++ {
				gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
			}
			naiveGemm(false, false, m, n, k, 1, a, k, b, n, 0, want, n)
			for i := range c {
				if math.Abs(float64(c[i]-want[i])) > 1e-3*(1+math.Abs(float64(want[i]))) {
					errs <- fmt.Sprintf("goroutine %d: c[%d] = %v, want %v", seed, i, c[i], want[i])
					return
				}
			}
			errs <- ""
		}(int64(g))
	}
	for g := 0; g < 4; g++ {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}

// TestGemmBiasMatchesNaive checks gemmBias (the kernel's bias-on-store
// path, or seeding plus GEMM) against the definition on odd sizes.
func TestGemmBiasMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, s := range [][3]int{{1, 1, 1}, {6, 16, 9}, {7, 17, 3}, {13, 40, 300}, {64, 128, 1568}, {50, 16, 9}, {3, 5, 0}} {
		m, n, k := s[0], s[1], s[2]
		a, b, bias := make([]float32, m*k), make([]float32, k*n), make([]float32, n)
		for _, v := range [][]float32{a, b, bias} {
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
		}
		c, want := make([]float32, m*n), make([]float32, m*n)
		for i := range c {
			c[i] = 42 // overwritten, never read
			want[i] = bias[i%n]
		}
		gemmBias(m, n, k, a, b, bias, c)
		naiveGemm(false, false, m, n, k, 1, a, k, b, n, 1, want, n)
		for i := range c {
			if d := math.Abs(float64(c[i] - want[i])); d > 1e-4*math.Sqrt(float64(k+1))*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%v: c[%d] = %v, want %v", s, i, c[i], want[i])
			}
		}
	}
}
