package zoo

import (
	"fmt"
	"math/rand"
	"slices"
	"time"

	"elasticdl/nn"
)

// SGDStep is one plain-SGD training step of a model: zero the gradients,
// forward, mean softmax cross-entropy, backward, value -= lr*grad. It is
// the unit that BenchmarkTrainStep here and bench's BenchmarkKernelsVsTorch
// (against PyTorch's same step) time; it allocates nothing once warm.
type SGDStep struct {
	net     *nn.Model
	params  []*nn.Param
	dlogits *nn.Tensor
	lr      float32
}

// NewSGDStep returns the step of net with learning rate lr.
func NewSGDStep(net *nn.Model, lr float32) *SGDStep {
	return &SGDStep{net: net, params: net.Params(), lr: lr}
}

// Run does one step on the batch x with labels y and returns its loss.
func (s *SGDStep) Run(x *nn.Tensor, y []int32) (float32, error) {
	s.net.ZeroGrads()
	loss, d, err := nn.SoftmaxCrossEntropyInto(s.dlogits, s.net.Forward(x, true), y)
	s.dlogits = d
	if err != nil {
		return 0, fmt.Errorf("train step: %w", err)
	}
	s.net.Backward(s.dlogits)
	nn.SGDUpdate(s.params, s.lr)
	return loss, nil
}

// RandomBatch returns n uniform-random 28x28x1 images in [0,1) and labels
// in 0..9: the benchmarks' input.
func RandomBatch(rng *rand.Rand, n int) (*nn.Tensor, []int32) {
	x := nn.NewTensor(n, 28, 28, 1)
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	y := make([]int32, n)
	for i := range y {
		y[i] = int32(rng.Intn(10))
	}
	return x, y
}

// P10Rate returns 1/(10th-percentile of times) in steps/s, 0 for none: on
// a shared machine the fast steps are the undisturbed ones. It sorts times.
func P10Rate(times []time.Duration) float64 {
	if len(times) == 0 {
		return 0
	}
	slices.Sort(times)
	return 1 / times[len(times)/10].Seconds()
}
