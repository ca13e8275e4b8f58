package nn

import (
	"math"
	"math/rand"
	"testing"
)

func TestFMInteractionGrad(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	checkGrads(t, NewFMInteraction("fm"), randTensor(rng, 3, 5, 4), defaultTol, rng)
}

// The O(F·D) formula must equal the explicit sum over field pairs.
func TestFMInteractionMatchesPairs(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	x := randTensor(rng, 2, 6, 3)
	y := NewFMInteraction("fm").Forward(x, false)
	for r := 0; r < 2; r++ {
		var want float64
		for i := 0; i < 6; i++ {
			for j := i + 1; j < 6; j++ {
				for k := 0; k < 3; k++ {
					want += float64(x.Data[(r*6+i)*3+k]) * float64(x.Data[(r*6+j)*3+k])
				}
			}
		}
		if math.Abs(float64(y.Data[r])-want) > 1e-4 {
			t.Errorf("row %d: got %v, want %v", r, y.Data[r], want)
		}
	}
}
