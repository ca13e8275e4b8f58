//go:build !amd64 || purego

package kernels

// Enabled reports whether the kernels run on this CPU; never here.
var Enabled = false

// MaxPool2x2Row has no kernel on this platform: it reports false.
func MaxPool2x2Row(r0, r1, out []float32, idx []int32, ow, c, rowLen, base int) bool {
	return false
}
