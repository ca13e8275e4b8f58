// Package nn is a small CPU neural-network library for training image and
// tabular classifiers on []float32 data.
//
// Tensors are dense and row-major. Images use NHWC layout ([N,H,W,C]),
// which lets Conv2D lower to a single im2col + GEMM whose result already
// is the NHWC output.
//
// Every matrix product goes through one internal GEMM backed by a BLAS
// implementation chosen at build time:
//
//   - default build: pure Go gonum (gonum.org/v1/gonum/blas/gonum);
//   - `-tags openblas`: OpenBLAS through cgo (gonum.org/v1/netlib), linked
//     with -lopenblas automatically (install libopenblas-dev).
//
// BLASBackend reports which one a binary uses. OpenBLAS sizes its thread
// pool from the OPENBLAS_NUM_THREADS environment variable (read once, at
// process start); SetBLASThreads changes it at run time. When many
// workers train in parallel on one machine, set OPENBLAS_NUM_THREADS=1 to
// avoid oversubscribing the cores.
//
// Ownership and reuse: to keep training allocation-free once warm, a
// layer's Forward returns a tensor owned by that layer, which is valid
// until the layer's next Forward call; likewise the dx returned by
// Backward is valid until the next Backward. Callers that need to keep a
// result must copy it, and must not modify a Forward input before the
// matching Backward (layers keep a reference to it, not a copy). Layers,
// Sequential and Model are not safe for concurrent use; give each
// goroutine its own network.
//
// Model is what a trainable network is: embedding lookups (possibly none)
// concatenated with the dense input and fed through a tower of layers.
package nn
