//go:build openblas

package nn

/*
#cgo LDFLAGS: -lopenblas
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
*/
import "C"

import "gonum.org/v1/netlib/blas/netlib"

// blasImpl is OpenBLAS through gonum's cgo bindings. The LDFLAGS above make
// `go build -tags openblas` link without CGO_LDFLAGS (needs
// libopenblas-dev).
type blasImpl = netlib.Implementation

// BLASBackend names the BLAS implementation compiled into this binary:
// "gonum" or "openblas".
func BLASBackend() string { return "openblas" }

// SetBLASThreads sets OpenBLAS's thread count for the whole process (it
// overrides OPENBLAS_NUM_THREADS). n < 1 is ignored.
func SetBLASThreads(n int) {
	if n < 1 {
		return
	}
	C.openblas_set_num_threads(C.int(n))
}

// BLASThreads reports OpenBLAS's current thread count.
func BLASThreads() int { return int(C.openblas_get_num_threads()) }

// nativeGemm defers every product to OpenBLAS.
func nativeGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	return false
}
