package nn

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"elasticdl/nn/internal/kernels"
)

// withoutKernels runs f with the assembly kernels off: the portable loops
// are the reference the kernels are compared with.
func withoutKernels(f func()) {
	was := kernels.Enabled
	kernels.Enabled = false
	defer func() { kernels.Enabled = was }()
	f()
}

// specials are the values whose ReLU handling is easy to get wrong.
var specials = []float32{0, float32(math.Copysign(0, -1)), -1e-38, 1e-38, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -float32(math.NaN())}

// TestVectorKernelsMatchGo compares AddTo, ReLU and ReLUGrad with their Go
// loops bit for bit, on lengths around the vector widths and special values.
func TestVectorKernelsMatchGo(t *testing.T) {
	if !kernels.Enabled {
		t.Skip("no vector kernels on this CPU/platform")
	}
	rng := rand.New(rand.NewSource(8))
	for _, n := range []int{1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 100, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			x := randTensor(rng, 1, n)
			for i := range x.Data {
				if rng.Intn(4) == 0 {
					x.Data[i] = specials[rng.Intn(len(specials))]
				}
			}
			g := randTensor(rng, 1, n)

			fast, slow := NewReLU("r"), NewReLU("r")
			yf := fast.Forward(x, true).Clone()
			dxf := fast.Backward(g).Clone()
			var ys, dxs *Tensor
			withoutKernels(func() {
				ys = slow.Forward(x, true)
				dxs = slow.Backward(g)
			})
			for i := range ys.Data {
				if math.Float32bits(yf.Data[i]) != math.Float32bits(ys.Data[i]) {
					t.Fatalf("relu(%v) = %v, Go %v", x.Data[i], yf.Data[i], ys.Data[i])
				}
				if math.Float32bits(dxf.Data[i]) != math.Float32bits(dxs.Data[i]) {
					t.Fatalf("relu grad at y=%v: %v, Go %v", ys.Data[i], dxf.Data[i], dxs.Data[i])
				}
			}

			a, b := x.Clone(), x.Clone()
			for i := range a.Data { // AddTo on finite values only: NaN != NaN
				if v := a.Data[i]; v != v || math.IsInf(float64(v), 0) {
					a.Data[i], b.Data[i] = 1, 1
				}
			}
			addTo(a.Data, g.Data)
			withoutKernels(func() { addTo(b.Data, g.Data) })
			for i := range a.Data {
				if a.Data[i] != b.Data[i] {
					t.Fatalf("addTo[%d] = %v, Go %v", i, a.Data[i], b.Data[i])
				}
			}
		})
	}
}

// TestIm2col1x3x3MatchesIm2col compares the one-channel 3x3 im2col with
// the general one, with both paddings and odd, tiny and non-square sizes.
func TestIm2col1x3x3MatchesIm2col(t *testing.T) {
	rng := rand.New(rand.NewSource(10))
	for _, s := range [][3]int{{1, 3, 3}, {2, 5, 7}, {3, 28, 28}, {1, 4, 9}, {2, 1, 6}, {1, 2, 2}} {
		for _, pad := range []Padding{Same, Valid} {
			x := randTensor(rng, s[0], s[1], s[2], 1)
			g := convGeom{n: s[0], h: s[1], w: s[2], c: 1, kh: 3, kw: 3, stride: 1}
			g.oh, g.padT = outSize(g.h, 3, 1, pad)
			g.ow, g.padL = outSize(g.w, 3, 1, pad)
			rows := g.n * g.oh * g.ow
			want, got := make([]float32, rows*9), make([]float32, rows*9)
			for i := range got {
				got[i] = 42 // every element must be written
			}
			im2col(want, x.Data, g)
			im2col1x3x3(got, x.Data, g, nil)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%v %v: cols[%d] = %v, want %v", s, pad, i, got[i], want[i])
				}
			}
		}
	}
}
