package nn

import (
	"math"
	"math/rand"
)

// glorotUniform fills w with U(-l, l), l = sqrt(6/(fanIn+fanOut)), the
// Keras default, so models trained here behave like their Keras originals.
func glorotUniform(w []float32, fanIn, fanOut int, rng *rand.Rand) {
	limit := math.Sqrt(6 / float64(fanIn+fanOut))
	for i := range w {
		w[i] = float32((2*rng.Float64() - 1) * limit)
	}
}
