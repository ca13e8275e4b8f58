package worker

import (
	"math"
	"testing"

	"elasticdl/data"
)

func TestShuffleKeepsRecordsTogether(t *testing.T) {
	const n, per = 50, 3
	b := &data.Batch{N: n, Features: make([]float32, n*per), Labels: make([]int32, n), Index: make([]int64, n)}
	for i := 0; i < n; i++ {
		for k := 0; k < per; k++ {
			b.Features[i*per+k] = float32(i*10 + k)
		}
		b.Labels[i], b.Index[i] = int32(i), int64(i)
	}
	shuffle(b, 7, 1)
	moved := 0
	seen := map[int32]bool{}
	for i := 0; i < n; i++ {
		l := b.Labels[i]
		if seen[l] {
			t.Fatalf("record %d appears twice", l)
		}
		seen[l] = true
		if l != int32(i) {
			moved++
		}
		if b.Index[i] != int64(l) {
			t.Fatalf("position %d: index %d does not follow label %d", i, b.Index[i], l)
		}
		for k := 0; k < per; k++ {
			if b.Features[i*per+k] != float32(int(l)*10+k) {
				t.Fatalf("position %d: features %v do not belong to record %d", i, b.Features[i*per:(i+1)*per], l)
			}
		}
	}
	if moved < n/2 {
		t.Fatalf("only %d of %d records moved", moved, n)
	}
	// Same task and epoch, same order: a retried task trains identically.
	c := &data.Batch{N: n, Features: make([]float32, n*per), Labels: make([]int32, n)}
	for i := range c.Labels {
		c.Labels[i] = int32(i)
	}
	shuffle(c, 7, 1)
	for i := range c.Labels {
		if c.Labels[i] != b.Labels[i] {
			t.Fatal("shuffle is not reproducible for the same task and epoch")
		}
	}
}

func TestAppendSoftmax(t *testing.T) {
	got := appendSoftmax([]float32{9}, []float32{1000, 1000, 1000 - float32(math.Log(2))})
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
