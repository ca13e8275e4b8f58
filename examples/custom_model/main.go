// Command custom_model is a user's own elasticdl: the built-in models plus
// one of the user's, "example.two_layer", built into a binary of its own.
// The binary is the job's binary too — the master launches its workers
// and PS from it — so every process of a job knows the model. See
// docs/models.md for the walk-through.
//
//	go build -o bin/my-elasticdl ./examples/custom_model
//	bin/my-elasticdl train --model_def=example.two_layer --model_params="hidden=64" \
//	  --training_data=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz --output=out
package main

import (
	"fmt"
	"math/rand"
	"os"

	"elasticdl/cli"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/nn"
)

// twoLayerName is the model's name in --model_def.
const twoLayerName = "example.two_layer"

// twoLayer is a two-layer perceptron for 28×28 grey images in 10 classes,
// its hidden width a --model_params parameter.
func twoLayer(hidden int) model.Spec {
	return model.Spec{
		Name:        twoLayerName,
		Description: fmt.Sprintf("example: Flatten, Dense 784->%d, ReLU, Dense %d->10", hidden, hidden),
		InputShape:  []int{28, 28, 1},
		NumClasses:  10,
		// The same rng gives the same weights: every worker starts from
		// the same model.
		Build: func(rng *rand.Rand) *nn.Model {
			d1 := nn.NewDense("dense_1", 28*28, hidden, rng)
			d2 := nn.NewDense("dense_2", hidden, 10, rng)
			d1.Initialize(nn.GlorotUniform, rng)
			d2.Initialize(nn.GlorotUniform, rng)
			return nn.MustModel(nil, nn.NewFlatten("flatten"), d1, nn.NewReLU("relu"), d2)
		},
		Optimizer: "adam:learning_rate=0.001",
		// --model_params="hidden=N"; the reader rejects any other key.
		Configure: func(p model.Params) (model.Spec, error) {
			r := p.Reader()
			h := r.Int("hidden", 128, 1, 4096)
			if err := r.Err(); err != nil {
				return model.Spec{}, err
			}
			return twoLayer(h), nil
		},
		ParamsHelp: "hidden=N (the hidden layer's width, default 128)",
	}
}

// registry is the zoo and the user's model.
func registry() (*model.Registry, error) {
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		return nil, err
	}
	if err := reg.Register(twoLayer(128)); err != nil {
		return nil, err
	}
	return reg, nil
}

func main() {
	reg, err := registry()
	if err != nil {
		fmt.Fprintln(os.Stderr, "my-elasticdl:", err)
		os.Exit(1)
	}
	os.Exit(cli.Main(os.Args[1:], reg))
}
