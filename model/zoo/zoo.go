// Package zoo holds the built-in models; Register adds them to a
// model.Registry. Inputs are NHWC images [N,28,28,1] scaled to [0,1];
// labels are int32 0..9.
//
// Optimizers, measured through the real PS with 2 async workers (seeds 0-3):
// the mlp uses "adam:learning_rate=0.001,decay=0.001": 3 epochs reach
// 0.870-0.876 test accuracy, against 0.851-0.871 without the decay (a
// constant rate leaves the final model noisy). The cnn uses
// "adam:learning_rate=0.002,decay=0.001": 2 epochs reach 0.893-0.899,
// against 0.877-0.886 with lr 0.001. The mlp standardizes its inputs with
// the data set's mean and deviation and starts from Glorot weights.
//
// fashion_mnist.mlp: Standardize → Flatten → Dense 784→256 → ReLU → Dense 256→10.
//
// fashion_mnist.cnn: Conv2D 1→16 3x3 same → ReLU → MaxPool 2 →
// Conv2D 16→32 3x3 same → ReLU → MaxPool 2 → Flatten →
// Dense 1568→128 → ReLU → Dense 128→10.
//
// fashion_mnist.cnn_wide: the same with the classic 32/64 channels
// (Dense 3136→128) and the cnn's optimizer.
//
// Why 16/32 channels and not the classic 32/64 for fashion_mnist.cnn: the
// CNN must sustain ≥ 35 training steps/s (batch 64, one thread, -tags
// openblas) on a 2-core machine. Measured with BenchmarkCNNWidths
// (GOMAXPROCS=1, OPENBLAS_NUM_THREADS=1, AMD EPYC, shared machine so ±20%)
// with the kernels of that time:
//
//	conv 32/64: ~24 steps/s   (GEMMs alone take ~24 ms/step: cannot reach 35)
//	conv 24/48: ~32 steps/s
//	conv 16/32: ~49-60 steps/s  ← chosen, with margin for noisy neighbours
//
// Since issue 13's kernels (nn/internal/kernels) the 32/64 network runs
// ~50 steps/s and the 16/32 one ~140 (bench/RESULTS.md); the cnn keeps its
// widths, so its documented accuracy and the experiments built on it stay
// valid, and the classic one is fashion_mnist.cnn_wide.
//
// Accuracy of the chosen CNN after 2 epochs of Adam (lr 1e-3, batch 64) on
// Fashion-MNIST (TestCNNAccuracy, ELASTICDL_LONG_TESTS=1): 0.8975 test
// accuracy with one worker; 0.889-0.899 with two simulated asynchronous
// workers (gradients one update stale) over three seeds, and 0.886 with
// four (three updates stale). He-uniform initialization was worth about
// +0.01 over Glorot here.
package zoo

import (
	"fmt"
	"math/rand"

	"elasticdl/model"
	"elasticdl/nn"
)

// Names of the built-in models.
const (
	FashionMNISTMLP = "fashion_mnist.mlp"
	FashionMNISTCNN = "fashion_mnist.cnn"
	// FashionMNISTCNNWide is the classic 32/64-channel CNN.
	FashionMNISTCNNWide = "fashion_mnist.cnn_wide"
)

// CNN widths; see the package comment for how they were chosen.
const (
	cnnConv1   = 16
	cnnConv2   = 32
	cnnHidden  = 128
	wideConv1  = 32
	wideConv2  = 64
	defaultOpt = "adam:learning_rate=0.001,decay=0.001"
	cnnOpt     = "adam:learning_rate=0.002,decay=0.001"
)

// Register adds every built-in model to r.
func Register(r *model.Registry) error {
	for _, s := range []model.Spec{MLPSpec(), CNNSpec(), CNNWideSpec(), WideAndDeepSpec(), DeepFMSpec(), XDeepFMSpec()} {
		if err := r.Register(s); err != nil {
			return fmt.Errorf("zoo: %w", err)
		}
	}
	return nil
}

// MLPSpec returns the spec of fashion_mnist.mlp.
func MLPSpec() model.Spec {
	return model.Spec{
		Name:        FashionMNISTMLP,
		Description: "Fashion-MNIST MLP: Flatten, Dense 784->256, ReLU, Dense 256->10",
		InputShape:  []int{28, 28, 1},
		NumClasses:  10,
		Build: func(rng *rand.Rand) *nn.Model {
			d1, d2 := nn.NewDense("dense_1", 28*28, 256, rng), nn.NewDense("dense_2", 256, 10, rng)
			// Keras's default init: it tested a little better than He here.
			d1.Initialize(nn.GlorotUniform, rng)
			d2.Initialize(nn.GlorotUniform, rng)
			return nn.MustModel(nil, standardize(), nn.NewFlatten("flatten"), d1, nn.NewReLU("relu_1"), d2)
		},
		Optimizer: defaultOpt,
	}
}

// CNNSpec returns the spec of fashion_mnist.cnn.
func CNNSpec() model.Spec {
	return model.Spec{
		Name: FashionMNISTCNN,
		Description: fmt.Sprintf("Fashion-MNIST CNN: Conv 3x3 %d, ReLU, MaxPool 2, Conv 3x3 %d, ReLU, MaxPool 2, "+
			"Dense %d->%d, ReLU, Dense %d->10", cnnConv1, cnnConv2, 7*7*cnnConv2, cnnHidden, cnnHidden),
		InputShape: []int{28, 28, 1},
		NumClasses: 10,
		Build: func(rng *rand.Rand) *nn.Model {
			return buildCNN(cnnConv1, cnnConv2, cnnHidden, rng)
		},
		Optimizer: cnnOpt,
	}
}

// CNNWideSpec returns the spec of fashion_mnist.cnn_wide: fashion_mnist.cnn
// with the classic 32/64 channels (about twice its step time).
func CNNWideSpec() model.Spec {
	s := CNNSpec()
	s.Name = FashionMNISTCNNWide
	s.Description = fmt.Sprintf("Fashion-MNIST CNN, wide: Conv 3x3 %d, ReLU, MaxPool 2, Conv 3x3 %d, ReLU, MaxPool 2, "+
		"Dense %d->%d, ReLU, Dense %d->10", wideConv1, wideConv2, 7*7*wideConv2, cnnHidden, cnnHidden)
	s.Build = func(rng *rand.Rand) *nn.Model {
		return buildCNN(wideConv1, wideConv2, cnnHidden, rng)
	}
	return s
}

// Fashion-MNIST's pixel mean and standard deviation (training set, [0,1]).
const fashionMean, fashionStd = 0.2860, 0.3530

// standardize centres the inputs: a model-side choice, so data stays raw.
func standardize() nn.Layer { return nn.NewStandardize("standardize", fashionMean, fashionStd) }

// buildCNN builds the two-conv-block network with the given widths; it is
// separate so the benchmarks can compare widths.
func buildCNN(c1, c2, hidden int, rng *rand.Rand) *nn.Model {
	return nn.MustModel(nil,
		nn.NewConv2D("conv2d_1", 1, c1, 3, 3, 1, nn.Same, rng),
		nn.NewReLU("relu_1"),
		nn.NewMaxPool2D("max_pooling2d_1", 2, 2),
		nn.NewConv2D("conv2d_2", c1, c2, 3, 3, 1, nn.Same, rng),
		nn.NewReLU("relu_2"),
		nn.NewMaxPool2D("max_pooling2d_2", 2, 2),
		nn.NewFlatten("flatten"),
		nn.NewDense("dense_1", 7*7*c2, hidden, rng),
		nn.NewReLU("relu_3"),
		nn.NewDense("dense_2", hidden, 10, rng),
	)
}
