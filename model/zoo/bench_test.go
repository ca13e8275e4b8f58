package zoo

import (
	"fmt"
	"math/rand"
	"testing"

	"elasticdl/nn"
)

// trainStep is one plain-SGD step: the unit BenchmarkTrainStep measures.
type trainStep struct {
	net     *nn.Model
	params  []*nn.Param
	dlogits *nn.Tensor
	lr      float32
}

func (s *trainStep) run(x *nn.Tensor, y []int32) (float32, error) {
	s.net.ZeroGrads()
	loss, d, err := nn.SoftmaxCrossEntropyInto(s.dlogits, s.net.Forward(x, true), y)
	s.dlogits = d
	if err != nil {
		return 0, fmt.Errorf("train step: %w", err)
	}
	s.net.Backward(s.dlogits)
	for _, p := range s.params {
		g := p.Grad.Data
		for i := range p.Value.Data {
			p.Value.Data[i] -= s.lr * g[i]
		}
	}
	return loss, nil
}

func benchTrain(b *testing.B, net *nn.Model) {
	const batch = 64
	rng := rand.New(rand.NewSource(1))
	x := nn.NewTensor(batch, 28, 28, 1)
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	y := make([]int32, batch)
	for i := range y {
		y[i] = int32(rng.Intn(10))
	}
	st := &trainStep{net: net, params: net.Params(), lr: 0.01}
	if _, err := st.run(x, y); err != nil { // warm buffers before timing
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := st.run(x, y); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}

// BenchmarkTrainStep measures batch-64 SGD steps of the zoo models. Run
// single-threaded to match one worker per core:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test -tags openblas -run '^$' -bench TrainStep -benchtime 3s ./model/zoo/
func BenchmarkTrainStep(b *testing.B) {
	b.Logf("BLAS backend: %s", nn.BLASBackend())
	b.Run("mlp", func(b *testing.B) { benchTrain(b, MLPSpec().Build(rand.New(rand.NewSource(1)))) })
	b.Run("cnn", func(b *testing.B) { benchTrain(b, CNNSpec().Build(rand.New(rand.NewSource(1)))) })
}

// BenchmarkCNNWidths compares candidate CNN widths (conv1, conv2, hidden);
// it backs the width choice documented in the package comment.
func BenchmarkCNNWidths(b *testing.B) {
	for _, w := range [][3]int{{32, 64, 128}, {24, 48, 128}, {16, 32, 128}} {
		b.Run(fmt.Sprintf("c%d_c%d_h%d", w[0], w[1], w[2]), func(b *testing.B) {
			benchTrain(b, buildCNN(w[0], w[1], w[2], rand.New(rand.NewSource(1))))
		})
	}
}
