//go:build !amd64 || purego

package kernels

// Enabled reports whether the kernels run on this CPU; never here.
var Enabled = false

// MaxPool2x2Row has no kernel on this platform: it reports false.
func MaxPool2x2Row(r0, r1, out []float32, idx []int32, ow, c, rowLen, base int) bool {
	return false
}

// AddTo has no kernel on this platform: it reports false.
func AddTo(dst, src []float32) bool { return false }

// ReLU has no kernel on this platform: it reports false.
func ReLU(dst, src []float32) bool { return false }

// ReLUGrad has no kernel on this platform: it reports false.
func ReLUGrad(dx, dy, y []float32) bool { return false }

// GemmEnabled reports whether Sgemm runs here; never on this platform.
var GemmEnabled = false

// Sgemm has no kernel on this platform: it reports false.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	return false
}

// MaxPool2x2BackRow has no kernel on this platform: it reports false.
func MaxPool2x2BackRow(r0, r1, dy []float32, idx []int32, ow, c, rowLen, base int) bool {
	return false
}

// SgemmBias has no kernel on this platform: it reports false.
func SgemmBias(transA, transB bool, m, n, k int, a []float32, lda int,
	b []float32, ldb int, bias, c []float32, ldc int) bool {
	return false
}
