package nn

import (
	"fmt"
	"math"

	"elasticdl/nn/internal/kernels"
)

// Flatten reshapes [N, d1, d2, ...] to [N, d1*d2*...] without copying.
type Flatten struct {
	name    string
	inShape []int
	y, dx   Tensor // views sharing the caller's data
}

// NewFlatten returns a Flatten layer.
func NewFlatten(name string) *Flatten { return &Flatten{name: name} }

// Name implements Layer.
func (f *Flatten) Name() string { return f.name }

// Params implements Layer; Flatten has none.
func (f *Flatten) Params() []*Param { return nil }

// Forward implements Layer. The result aliases x.Data.
func (f *Flatten) Forward(x *Tensor, train bool) *Tensor {
	if len(x.Shape) < 1 {
		panic(fmt.Sprintf("nn: %s: cannot flatten a scalar", f.name))
	}
	n := x.Shape[0]
	rest := 1
	for _, d := range x.Shape[1:] {
		rest *= d
	}
	f.inShape = append(f.inShape[:0], x.Shape...)
	f.y.Shape = append(f.y.Shape[:0], n, rest)
	f.y.Data = x.Data
	return &f.y
}

// Backward implements Layer. The result aliases dy.Data.
func (f *Flatten) Backward(dy *Tensor) *Tensor {
	if len(dy.Data) != len(f.y.Data) {
		panic(fmt.Sprintf("nn: %s: Backward dy shape %v does not match last Forward", f.name, dy.Shape))
	}
	f.dx.Shape = append(f.dx.Shape[:0], f.inShape...)
	f.dx.Data = dy.Data
	return &f.dx
}

// ReLU is the elementwise max(x, 0).
type ReLU struct {
	name  string
	y, dx *Tensor
}

// NewReLU returns a ReLU layer.
func NewReLU(name string) *ReLU { return &ReLU{name: name} }

// Name implements Layer.
func (r *ReLU) Name() string { return r.name }

// Params implements Layer; ReLU has none.
func (r *ReLU) Params() []*Param { return nil }

// Forward implements Layer.
func (r *ReLU) Forward(x *Tensor, train bool) *Tensor {
	r.y = ensure(r.y, x.Shape...)
	y := r.y.Data[:len(x.Data)]
	if kernels.ReLU(y, x.Data) {
		return r.y
	}
	for i, v := range x.Data {
		// Integer sign test instead of float max: no NaN/±0 fix-ups, and it
		// compiles to a few branch-free ALU ops. Negative inputs (and -0)
		// become +0; NaN passes through.
		b := math.Float32bits(v)
		y[i] = math.Float32frombits(b &^ uint32(int32(b)>>31))
	}
	return r.y
}

// Backward implements Layer. The mask comes from the cached output, since
// y > 0 exactly where x > 0.
func (r *ReLU) Backward(dy *Tensor) *Tensor {
	if r.y == nil || len(dy.Data) != len(r.y.Data) {
		panic(fmt.Sprintf("nn: %s: Backward dy shape %v does not match last Forward", r.name, dy.Shape))
	}
	r.dx = ensure(r.dx, dy.Shape...)
	dx, y := r.dx.Data[:len(dy.Data)], r.y.Data[:len(dy.Data)]
	if kernels.ReLUGrad(dx, dy.Data, y) {
		return r.dx
	}
	for i, g := range dy.Data {
		// Branch-free: y is +0 or positive (or NaN), so its bit pattern is
		// zero exactly where the gradient is blocked. A data-dependent
		// branch here mispredicts half the time and was 12% of a CNN step.
		yb := int32(math.Float32bits(y[i]))
		mask := uint32(-yb >> 31)
		dx[i] = math.Float32frombits(math.Float32bits(g) & mask)
	}
	return r.dx
}

// Standardize maps x to (x - mean) / std elementwise: centred, unit-scale
// inputs make gradient descent better conditioned than raw [0,1] pixels.
type Standardize struct {
	name      string
	mean, inv float32
	y, dx     *Tensor
}

// NewStandardize returns a Standardize layer; std must be positive.
func NewStandardize(name string, mean, std float32) *Standardize {
	if !(std > 0) {
		panic(fmt.Sprintf("nn: %s: std must be positive, got %v", name, std))
	}
	return &Standardize{name: name, mean: mean, inv: 1 / std}
}

// Name implements Layer.
func (s *Standardize) Name() string { return s.name }

// Params implements Layer; Standardize has none.
func (s *Standardize) Params() []*Param { return nil }

// Forward implements Layer.
func (s *Standardize) Forward(x *Tensor, train bool) *Tensor {
	s.y = ensure(s.y, x.Shape...)
	y := s.y.Data[:len(x.Data)]
	for i, v := range x.Data {
		y[i] = (v - s.mean) * s.inv
	}
	return s.y
}

// Backward implements Layer.
func (s *Standardize) Backward(dy *Tensor) *Tensor {
	s.dx = ensure(s.dx, dy.Shape...)
	dx := s.dx.Data[:len(dy.Data)]
	for i, v := range dy.Data {
		dx[i] = v * s.inv
	}
	return s.dx
}

// Affine returns the mean and the reciprocal of std: Forward computes
// (x - mean) * inv, in float32, which an exporter must repeat exactly.
func (s *Standardize) Affine() (mean, inv float32) { return s.mean, s.inv }
