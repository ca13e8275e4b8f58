//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math/rand"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's CPU time in ns: on a shared machine it
// leaves out the time other processes hold the core, unlike ns/op.
func threadCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// BenchmarkSgemm times Sgemm and SgemmBias on shapes that exercise the
// in-place and packed B paths, the partial edge tiles and several blocks.
func BenchmarkSgemm(b *testing.B) {
	if !GemmEnabled {
		b.Skip("no AVX2/FMA")
	}
	shapes := []struct {
		m, n, k        int
		transA, transB bool
		bias           bool
	}{
		{64, 64, 64, false, false, false},
		{128, 512, 256, false, false, false},
		{128, 512, 256, false, true, false},
		{256, 256, 256, true, false, false},
		{100, 250, 300, false, false, true},
		{9, 32, 1000, true, false, false},
		{512, 1030, 600, false, false, false},
	}
	rng := rand.New(rand.NewSource(1))
	fill := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(rng.NormFloat64())
		}
		return s
	}
	for _, s := range shapes {
		name := fmt.Sprintf("%dx%dx%d_t%v%v_bias%v", s.m, s.n, s.k, s.transA, s.transB, s.bias)
		a, bm, c, bias := fill(s.m*s.k), fill(s.k*s.n), fill(s.m*s.n), fill(s.n)
		lda, ldb := s.k, s.n
		if s.transA {
			lda = s.m
		}
		if s.transB {
			ldb = s.k
		}
		b.Run(name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu0 := threadCPU()
			for i := 0; i < b.N; i++ {
				if s.bias {
					SgemmBias(s.transA, s.transB, s.m, s.n, s.k, a, lda, bm, ldb, bias, c, s.n)
				} else {
					Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n)
				}
			}
			b.ReportMetric(float64(threadCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
