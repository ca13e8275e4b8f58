package nn

import (
	"fmt"
	"math/rand"
	"testing"

	"elasticdl/nn/internal/kernels"
)

// TestMaxPoolKernelMatchesGo compares the vectorized 2x2/stride-2 pooling
// (where the CPU has it) with the portable loops, on odd sizes, several
// channel counts and inputs full of ties, outputs and argmax indices
// alike, and the backward pass on top.
func TestMaxPoolKernelMatchesGo(t *testing.T) {
	if !kernels.Enabled {
		t.Skip("no vector kernel on this CPU/platform")
	}
	rng := rand.New(rand.NewSource(5))
	for _, s := range [][4]int{{1, 2, 2, 8}, {2, 5, 7, 8}, {3, 6, 4, 16}, {2, 9, 9, 24}, {64, 28, 28, 32}, {1, 4, 6, 3}, {2, 3, 3, 12}} {
		for _, ties := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v_ties%v", s, ties), func(t *testing.T) {
				x := randTensor(rng, s[0], s[1], s[2], s[3])
				if ties {
					for i := range x.Data {
						x.Data[i] = float32(rng.Intn(3)) - 1
					}
				}
				fast, slow := NewMaxPool2D("p", 2, 2), NewMaxPool2D("p", 2, 2)
				yf := fast.Forward(x, true).Clone()
				kernels.Enabled = false
				ys := slow.Forward(x, true)
				kernels.Enabled = true
				for i := range ys.Data {
					if yf.Data[i] != ys.Data[i] || fast.argmax[i] != slow.argmax[i] {
						t.Fatalf("output %d: kernel %v@%d, Go %v@%d", i, yf.Data[i], fast.argmax[i], ys.Data[i], slow.argmax[i])
					}
				}
				dy := randTensor(rng, ys.Shape...)
				df, ds := fast.Backward(dy), slow.Backward(dy)
				for i := range ds.Data {
					if df.Data[i] != ds.Data[i] {
						t.Fatalf("dx %d: %v vs %v", i, df.Data[i], ds.Data[i])
					}
				}
			})
		}
	}
}

// TestMaxPoolBackwardScatter checks the backward pass against the
// definition: each output's gradient lands on its window's first maximum.
func TestMaxPoolBackwardScatter(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	for _, c := range []struct{ h, w, ch, size, stride int }{{4, 4, 8, 2, 2}, {5, 7, 3, 2, 2}, {6, 6, 2, 3, 3}, {5, 5, 2, 3, 2}, {4, 5, 8, 2, 1}} {
		x := randTensor(rng, 2, c.h, c.w, c.ch)
		for i := range x.Data {
			x.Data[i] = float32(rng.Intn(4))
		}
		p := NewMaxPool2D("p", c.size, c.stride)
		y := p.Forward(x, true)
		dy := randTensor(rng, y.Shape...)
		dx := p.Backward(dy)
		want := make([]float32, x.Len())
		oh, ow := y.Shape[1], y.Shape[2]
		for b := 0; b < 2; b++ {
			for i := 0; i < oh; i++ {
				for j := 0; j < ow; j++ {
					for ch := 0; ch < c.ch; ch++ {
						best, at := float32(0), -1
						for ki := 0; ki < c.size; ki++ {
							for kj := 0; kj < c.size; kj++ {
								k := ((b*c.h+i*c.stride+ki)*c.w+j*c.stride+kj)*c.ch + ch
								if at < 0 || x.Data[k] > best {
									best, at = x.Data[k], k
								}
							}
						}
						o := ((b*oh+i)*ow+j)*c.ch + ch
						if y.Data[o] != best {
							t.Fatalf("%+v: y[%d] = %v, want %v", c, o, y.Data[o], best)
						}
						want[at] += dy.Data[o]
					}
				}
			}
		}
		for i := range want {
			if d := dx.Data[i] - want[i]; d > 1e-6 || d < -1e-6 {
				t.Fatalf("%+v: dx[%d] = %v, want %v", c, i, dx.Data[i], want[i])
			}
		}
	}
}
