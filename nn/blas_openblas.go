//go:build openblas

package nn

/*
#cgo LDFLAGS: -lopenblas
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
*/
import "C"

import (
	"sync/atomic"

	"gonum.org/v1/netlib/blas/netlib"
)

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
	blasThreads.Store(int32(n))
}

// blasThreads caches OpenBLAS's thread count for multiThreadedBLAS.
var blasThreads atomic.Int32

func init() { blasThreads.Store(int32(C.openblas_get_num_threads())) }

// multiThreadedBLAS reports whether OpenBLAS was given more than one
// thread (OPENBLAS_NUM_THREADS, SetBLASThreads): then its GEMM runs,
// parallel, instead of the single-threaded assembly one.
func multiThreadedBLAS() bool { return blasThreads.Load() > 1 }

// BLASThreads reports OpenBLAS's current thread count.
func BLASThreads() int { return int(C.openblas_get_num_threads()) }
