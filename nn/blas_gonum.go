//go:build !openblas

package nn

import "gonum.org/v1/gonum/blas/gonum"

// blasImpl is the pure-Go gonum BLAS; build with -tags openblas for the
// much faster OpenBLAS backend. Its GEMM runs only where the assembly
// one cannot (see gemm).
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

// multiThreadedBLAS is false: gonum's GEMM runs only where the assembly
// one cannot, whatever GOMAXPROCS.
func multiThreadedBLAS() bool { return false }
