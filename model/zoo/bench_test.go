package zoo

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"elasticdl/nn"
)

func benchTrain(b *testing.B, net *nn.Model) {
	x, y := RandomBatch(rand.New(rand.NewSource(1)), 64)
	st := NewSGDStep(net, 0.01)
	if _, err := st.Run(x, y); err != nil { // warm buffers before timing
		b.Fatal(err)
	}
	times := make([]time.Duration, 0, 1<<12)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t := time.Now()
		if _, err := st.Run(x, y); err != nil {
			b.Fatal(err)
		}
		if len(times) < cap(times) {
			times = append(times, time.Since(t))
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(P10Rate(times), "p10-steps/s")
}

// BenchmarkTrainStep measures batch-64 SGD steps of the zoo models:
// steps/s is the mean rate, p10-steps/s the rate of the 10th-percentile
// step, which other tenants' load on a shared machine disturbs least. Run
// single-threaded to match one worker per core:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test -tags openblas -run '^$' -bench TrainStep -benchtime 3s ./model/zoo/
func BenchmarkTrainStep(b *testing.B) {
	b.Logf("BLAS backend: %s", nn.BLASBackend())
	b.Run("mlp", func(b *testing.B) { benchTrain(b, MLPSpec().Build(rand.New(rand.NewSource(1)))) })
	b.Run("cnn", func(b *testing.B) { benchTrain(b, CNNSpec().Build(rand.New(rand.NewSource(1)))) })
	b.Run("cnn_wide", func(b *testing.B) { benchTrain(b, CNNWideSpec().Build(rand.New(rand.NewSource(1)))) })
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
