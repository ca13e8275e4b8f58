//go:build amd64 && !purego

package optimizer

import "golang.org/x/sys/cpu"

// hasAVX2 is read once: the CPU does not change under a running process.
var hasAVX2 = cpu.X86.HasAVX2

// adamVector runs Adam's update on the longest prefix of p whose length
// is a multiple of 8, eight lanes at a time, and returns that length (0
// without AVX2). It computes what the scalar loop does, in the same order
// and with the same roundings (no fused multiply-add), so both give the
// same bits.
func adamVector(p, g, m, v []float32, lrt, c1, c2, eps float32) int {
	n := len(p) &^ 7
	if !hasAVX2 || n == 0 {
		return 0
	}
	adamAVX2(p[:n], g[:n], m[:n], v[:n], lrt, c1, c2, eps)
	return n
}

// adamAVX2 is in adam_amd64.s; len(p) is a multiple of 8 and g, m, v are
// at least as long.
//
//go:noescape
func adamAVX2(p, g, m, v []float32, lrt, c1, c2, eps float32)
