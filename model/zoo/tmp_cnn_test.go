package zoo

import (
	"fmt"
	"math/rand"
	"testing"

	"elasticdl/model"
	"elasticdl/nn"
)

func TestTmpCNN(t *testing.T) {
	train, test := loadFashion(t, "train"), loadFashion(t, "t10k")
	for _, c := range []struct {
		c1, c2, h int
		seed      int64
	}{{16, 32, 128, 2}, {16, 32, 128, 3}, {16, 32, 256, 1}, {16, 32, 256, 2}} {
		c := c
		spec := CNNSpec()
		spec.Build = func(rng *rand.Rand) *nn.Sequential { return buildCNN(c.c1, c.c2, c.h, rng) }
		net := trainAdam(t, model.Spec(spec), train, 2, 1, c.seed)
		fmt.Printf("RESULT %+v acc %.4f\n", c, evaluate(net, test))
	}
}
