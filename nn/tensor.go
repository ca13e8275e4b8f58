package nn

import "fmt"

// Tensor is a dense row-major float32 array. len(Data) equals the product
// of Shape.
type Tensor struct {
	Shape []int
	Data  []float32
}

// NewTensor returns a zeroed tensor of the given shape. It panics on a
// negative dimension, which is a programming error.
func NewTensor(shape ...int) *Tensor {
	// Work on the copy only, so that shape itself does not escape and
	// callers' variadic arguments stay on the stack.
	s := make([]int, len(shape))
	copy(s, shape)
	n := 1
	for _, d := range s {
		if d < 0 {
			panic(fmt.Sprintf("nn: negative dimension in shape %v", s))
		}
		n *= d
	}
	return &Tensor{Shape: s, Data: make([]float32, n)}
}

// Len returns the number of elements, len(t.Data).
func (t *Tensor) Len() int { return len(t.Data) }

// Clone returns a deep copy of t.
func (t *Tensor) Clone() *Tensor {
	c := NewTensor(t.Shape...)
	copy(c.Data, t.Data)
	return c
}

// String summarizes the tensor's shape; the data can be large.
func (t *Tensor) String() string { return fmt.Sprintf("Tensor%v", t.Shape) }

// ensure returns t when it already has exactly this shape, otherwise a new
// zeroed tensor. Layers use it to reuse buffers across same-sized batches.
// The contents of a reused tensor are NOT cleared.
func ensure(t *Tensor, shape ...int) *Tensor {
	if t != nil && sameShape(t.Shape, shape) {
		return t
	}
	return NewTensor(shape...)
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ensureInt32 is ensure for index buffers.
func ensureInt32(b []int32, n int) []int32 {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]int32, n)
}

// checkRank panics with a descriptive message when x has the wrong rank;
// a shape mismatch inside Forward is a programming error in model code.
func checkRank(layer string, x *Tensor, rank int) {
	if len(x.Shape) != rank {
		panic(fmt.Sprintf("nn: %s: want rank-%d input, got shape %v", layer, rank, x.Shape))
	}
}
