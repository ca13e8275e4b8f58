package nn

import (
	"errors"
	"fmt"
)

// Param is a trainable parameter and its gradient accumulator. Grad has
// the same shape as Value.
type Param struct {
	Name  string
	Value *Tensor
	Grad  *Tensor
}

func newParam(name string, shape ...int) *Param {
	return &Param{Name: name, Value: NewTensor(shape...), Grad: NewTensor(shape...)}
}

// Layer is one differentiable stage of a network.
//
// Forward caches whatever Backward needs, so Backward must follow the
// Forward whose output it differentiates. Backward returns dL/dx and
// ACCUMULATES (+=) parameter gradients into Params()[i].Grad, so several
// backward passes can be summed before an update; call ZeroGrads between
// steps.
type Layer interface {
	Name() string
	Forward(x *Tensor, train bool) *Tensor
	Backward(dy *Tensor) *Tensor
	Params() []*Param
}

// ParamBackwarder is implemented by layers that can accumulate their
// parameter gradients without computing dL/dx. Sequential uses it for its
// first parameterized layer, whose dx nobody reads (it saves a GEMM).
type ParamBackwarder interface {
	BackwardParams(dy *Tensor)
}

// Sequential chains layers; the output of each is the input of the next.
type Sequential struct {
	Layers []Layer
}

// NewSequential builds a Sequential and checks that layer names are
// non-empty and unique, which makes parameter names unique.
func NewSequential(layers ...Layer) (*Sequential, error) {
	if err := checkNames(layers); err != nil {
		return nil, fmt.Errorf("nn: %w", err)
	}
	return &Sequential{Layers: layers}, nil
}

// checkNames reports a nil layer or an empty or repeated layer name.
func checkNames(layers []Layer) error {
	seen := make(map[string]bool, len(layers))
	for i, l := range layers {
		if l == nil {
			return fmt.Errorf("layer %d is nil", i)
		}
		n := l.Name()
		if n == "" {
			return fmt.Errorf("layer %d has an empty name", i)
		}
		if seen[n] {
			return fmt.Errorf("duplicate layer name %q", n)
		}
		seen[n] = true
	}
	return nil
}

// MustSequential is NewSequential for statically known architectures; it
// panics on invalid names.
func MustSequential(layers ...Layer) *Sequential {
	s, err := NewSequential(layers...)
	if err != nil {
		panic(err)
	}
	return s
}

// Forward runs all layers. The result is owned by the last layer.
//
// A ReLU directly followed by a MaxPool2D runs after it instead: max
// pooling commutes with any non-decreasing function, so
// pool(relu(x)) = relu(pool(x)) exactly, with the gradient reaching the
// same inputs, and the ReLU (both ways) then touches a quarter of the
// values for 2x2 pooling.
func (s *Sequential) Forward(x *Tensor, train bool) *Tensor {
	for i := 0; i < len(s.Layers); i++ {
		if reluThenPool(s.Layers, i) {
			x = s.Layers[i].Forward(s.Layers[i+1].Forward(x, train), train)
			i++
			continue
		}
		x = s.Layers[i].Forward(x, train)
	}
	return x
}

// reluThenPool reports whether layers i and i+1 are a ReLU and a
// MaxPool2D, the pair Forward swaps (and Backward with it).
func reluThenPool(ls []Layer, i int) bool {
	if i < 0 || i+1 >= len(ls) {
		return false
	}
	_, relu := ls[i].(*ReLU)
	_, pool := ls[i+1].(*MaxPool2D)
	return relu && pool
}

// backwardFrom back-propagates dy through layers last down to from+1 and
// returns the gradient of layer from+1's input, undoing Forward's swapped
// ReLU/MaxPool2D pairs in reverse.
func (s *Sequential) backwardFrom(dy *Tensor, from int) *Tensor {
	for i := len(s.Layers) - 1; i > from; i-- {
		if reluThenPool(s.Layers, i-1) && i-1 > from {
			dy = s.Layers[i].Backward(s.Layers[i-1].Backward(dy))
			i--
			continue
		}
		dy = s.Layers[i].Backward(dy)
	}
	return dy
}

// Backward back-propagates dy (the gradient w.r.t. the output of the last
// Forward) and accumulates all parameter gradients. Layers in front of the
// first parameterized layer are skipped entirely and that layer computes
// only its parameter gradients, since the input gradient is never used.
func (s *Sequential) Backward(dy *Tensor) {
	first := -1
	for i, l := range s.Layers {
		if len(l.Params()) > 0 {
			first = i
			break
		}
	}
	if first < 0 {
		return
	}
	dy = s.backwardFrom(dy, first)
	if pb, ok := s.Layers[first].(ParamBackwarder); ok {
		pb.BackwardParams(dy)
		return
	}
	s.Layers[first].Backward(dy)
}

// backwardInput back-propagates dy through every layer and returns the
// gradient of the input: what a Model's embeddings need, and what Backward
// saves itself from computing.
func (s *Sequential) backwardInput(dy *Tensor) *Tensor {
	return s.backwardFrom(dy, -1)
}

// Params returns all parameters in layer order (kernel before bias).
func (s *Sequential) Params() []*Param {
	var ps []*Param
	for _, l := range s.Layers {
		ps = append(ps, l.Params()...)
	}
	return ps
}

// ZeroGrads clears every parameter gradient.
func (s *Sequential) ZeroGrads() {
	for _, l := range s.Layers {
		for _, p := range l.Params() {
			clear(p.Grad.Data)
		}
	}
}

// NumParams returns the total number of scalar parameters.
func (s *Sequential) NumParams() int { return numParams(s.Params()) }

func numParams(ps []*Param) int {
	n := 0
	for _, p := range ps {
		n += p.Value.Len()
	}
	return n
}

// ErrShape reports tensors whose shapes do not fit together.
var ErrShape = errors.New("nn: shape mismatch")

// CopyParams copies parameter values from src into dst (Sequentials or
// Models); both must have the same architecture. Useful to clone a model
// or load weights.
func CopyParams(dst, src interface{ Params() []*Param }) error {
	dp, sp := dst.Params(), src.Params()
	if len(dp) != len(sp) {
		return fmt.Errorf("copy params: %d vs %d params: %w", len(dp), len(sp), ErrShape)
	}
	for i := range dp {
		if dp[i].Name != sp[i].Name || !sameShape(dp[i].Value.Shape, sp[i].Value.Shape) {
			return fmt.Errorf("copy params: %s%v vs %s%v: %w",
				dp[i].Name, dp[i].Value.Shape, sp[i].Name, sp[i].Value.Shape, ErrShape)
		}
		copy(dp[i].Value.Data, sp[i].Value.Data)
	}
	return nil
}
