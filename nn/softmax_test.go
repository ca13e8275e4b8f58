package nn

import (
	"math"
	"testing"
)

func TestAppendSoftmax(t *testing.T) {
	got := AppendSoftmax([]float32{9}, []float32{1000, 1000, 1000 - float32(math.Log(2))})
	want := []float32{9, 0.4, 0.4, 0.2}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5 {
			t.Fatalf("got %v, want %v (large logits must not overflow)", got, want)
		}
	}
}
