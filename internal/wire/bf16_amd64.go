//go:build amd64 && !purego

package wire

import "golang.org/x/sys/cpu"

// hasAVX2 is read once: the CPU does not change under a running process.
var hasAVX2 = cpu.X86.HasAVX2

// putBF16Vector converts the longest prefix of src whose length is a
// multiple of 16 (none without AVX2) and returns its length.
func putBF16Vector(dst []byte, src []float32) int {
	n := len(src) &^ 15
	if !hasAVX2 || n == 0 {
		return 0
	}
	putBF16AVX2(dst[:2*n], src[:n])
	return n
}

// getBF16Vector is putBF16Vector's inverse.
func getBF16Vector(dst []float32, src []byte) int {
	n := len(dst) &^ 15
	if !hasAVX2 || n == 0 {
		return 0
	}
	getBF16AVX2(dst[:n], src[:2*n])
	return n
}

//go:noescape
func putBF16AVX2(dst []byte, src []float32)

//go:noescape
func getBF16AVX2(dst []float32, src []byte)
