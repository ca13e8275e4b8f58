//go:build !openblas

package nn

import (
	"gonum.org/v1/gonum/blas/gonum"

	"elasticdl/nn/internal/kernels"
)

// blasImpl is the pure-Go gonum BLAS; build with -tags openblas for the
// much faster OpenBLAS backend. Its GEMM runs only where nativeGemm
// cannot.
type blasImpl = gonum.Implementation

// BLASBackend names the BLAS implementation compiled into this binary:
// "gonum" or "openblas".
func BLASBackend() string { return "gonum" }

// SetBLASThreads sets the BLAS thread count. The gonum backend sizes its
// parallelism from GOMAXPROCS, so this is a no-op there.
func SetBLASThreads(n int) {}

// BLASThreads reports the BLAS thread count; for gonum it is 0, meaning
// "governed by GOMAXPROCS".
func BLASThreads() int { return 0 }

// nativeGemm is gemm by the Go-assembly AVX2/FMA kernel (on the calling
// goroutine) where the CPU has it, 3-5x gonum's single-threaded speed; it
// reports false elsewhere, and gonum's GEMM runs.
func nativeGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	return kernels.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
