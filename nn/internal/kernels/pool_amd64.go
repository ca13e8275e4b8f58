//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

// Enabled reports whether the kernels run on this CPU (AVX2).
var Enabled = cpu.X86.HasAVX2

// maxPool2x2RowAVX2: see MaxPool2x2Row.
//
//go:noescape
func maxPool2x2RowAVX2(r0, r1, out *float32, idx *int32, ow, c, rowLen int, base int32)

// MaxPool2x2Row pools one output row of a 2x2/stride-2 max pooling on
// NHWC data: ow windows of c channels. r0 and r1 start at the two input
// rows' first window, out and idx at the output row; rowLen is the input
// row length (w*c) and base the flat input index of r0[0]. It writes each
// window's per-channel maximum and the flat input index of its first
// occurrence (row-major window order, strict >), and reports false,
// doing nothing, when the kernel does not apply: not Enabled, c%8 != 0,
// or an empty row.
func MaxPool2x2Row(r0, r1, out []float32, idx []int32, ow, c, rowLen, base int) bool {
	if !poolRowApplies(r0, r1, out, idx, ow, c) {
		return false
	}
	maxPool2x2RowAVX2(&r0[0], &r1[0], &out[0], &idx[0], ow, c, rowLen, int32(base))
	return true
}

//go:noescape
func maxPool2x2BackRowAVX2(r0, r1, dy *float32, idx *int32, ow, c, rowLen int, base int32)

// MaxPool2x2BackRow is MaxPool2x2Row's adjoint where the windows tile the
// input: it writes all 2*ow*c gradients of each of the two input rows r0
// and r1 (the row's output gradient dy where idx, the forward's argmax,
// names the input, 0 elsewhere) and reports false, doing nothing, when the
// kernel does not apply (as MaxPool2x2Row).
func MaxPool2x2BackRow(r0, r1, dy []float32, idx []int32, ow, c, rowLen, base int) bool {
	if !poolRowApplies(r0, r1, dy, idx, ow, c) {
		return false
	}
	maxPool2x2BackRowAVX2(&r0[0], &r1[0], &dy[0], &idx[0], ow, c, rowLen, int32(base))
	return true
}

// poolRowApplies reports whether the pooling kernels apply to a row of ow
// windows of c channels (Enabled, c%8 == 0, a non-empty row) and then
// checks, once per row, the bounds they rely on: 2*ow*c floats in each
// input row r0 and r1, ow*c in the output row v and its indices idx.
func poolRowApplies(r0, r1, v []float32, idx []int32, ow, c int) bool {
	if !Enabled || c%8 != 0 || ow <= 0 || c <= 0 {
		return false
	}
	_ = r0[2*ow*c-1]
	_ = r1[2*ow*c-1]
	_ = v[ow*c-1]
	_ = idx[ow*c-1]
	return true
}
