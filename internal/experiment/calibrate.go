package experiment

import (
	"fmt"
	"math/rand"
	"time"

	"elasticdl/model/zoo"
	"elasticdl/nn"
)

// CNNSecondsPerRecord measures what a record costs a real worker of
// fashion_mnist.cnn on one CPU of this machine: batch-64 training steps
// (forward, loss, backward), on this goroutine, for at least d; the
// calibration of modelled compute. Run it with one BLAS thread
// (OPENBLAS_NUM_THREADS=1) to measure one CPU.
func CNNSecondsPerRecord(d time.Duration) (float64, error) {
	const batch = 64
	rng := rand.New(rand.NewSource(1))
	net := zoo.CNNSpec().Build(rng)
	x := nn.NewTensor(batch, 28, 28, 1)
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	y := make([]int32, batch)
	for i := range y {
		y[i] = int32(rng.Intn(10))
	}
	var dlogits *nn.Tensor
	step := func() error {
		net.ZeroGrads()
		_, dl, err := nn.SoftmaxCrossEntropyInto(dlogits, net.Forward(x, true), y)
		if err != nil {
			return fmt.Errorf("calibration step: %w", err)
		}
		dlogits = dl
		net.Backward(dlogits)
		return nil
	}
	if err := step(); err != nil { // warm the buffers
		return 0, err
	}
	start := time.Now()
	steps := 0
	for time.Since(start) < d || steps < 3 {
		if err := step(); err != nil {
			return 0, err
		}
		steps++
	}
	return time.Since(start).Seconds() / float64(steps*batch), nil
}
