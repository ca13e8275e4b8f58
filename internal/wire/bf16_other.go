//go:build !amd64 || purego

package wire

// The scalar loops in bf16.go do all the work here.
func putBF16Vector(dst []byte, src []float32) int { return 0 }
func getBF16Vector(dst []float32, src []byte) int { return 0 }
