package nn

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"
)

func assertData(t *testing.T, what string, got *Tensor, shape []int, want []float32, tol float64) {
	t.Helper()
	if !sameShape(got.Shape, shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, shape)
	}
	for i := range want {
		if math.Abs(float64(got.Data[i]-want[i])) > tol {
			t.Fatalf("%s: data %v, want %v", what, got.Data, want)
		}
	}
}

func TestConv2DForwardHand(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	x := &Tensor{Shape: []int{1, 3, 3, 1}, Data: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}}

	// 2x2 all-ones kernel, valid: sums of each 2x2 window, plus bias 0.5.
	c := NewConv2D("c", 1, 1, 2, 2, 1, Valid, rng)
	copy(c.Kernel().Value.Data, []float32{1, 1, 1, 1})
	c.Bias().Value.Data[0] = 0.5
	assertData(t, "valid 2x2", c.Forward(x, false), []int{1, 2, 2, 1}, []float32{12.5, 16.5, 24.5, 28.5}, 1e-6)

	// 3x3 kernel with a single 1 at the top-left tap, same padding: the
	// output at (i,j) reads x[i-1][j-1], i.e. x shifted down-right by one.
	c = NewConv2D("c", 1, 1, 3, 3, 1, Same, rng)
	k := make([]float32, 9)
	k[0] = 1
	copy(c.Kernel().Value.Data, k)
	assertData(t, "same shift", c.Forward(x, false), []int{1, 3, 3, 1},
		[]float32{0, 0, 0, 0, 1, 2, 0, 4, 5}, 1e-6)

	// 3x3 Laplacian-like kernel, same padding, stride 2 (out 2x2, padding 1
	// on each side): centres at (0,0),(0,2),(2,0),(2,2).
	c = NewConv2D("c", 1, 1, 3, 3, 2, Same, rng)
	copy(c.Kernel().Value.Data, []float32{0, 1, 0, 1, -4, 1, 0, 1, 0})
	// (0,0): 2+4-4*1=2; (0,2): 2+6-4*3=-4; (2,0): 4+8-4*7=-16; (2,2): 6+8-4*9=-22
	assertData(t, "same stride2", c.Forward(x, false), []int{1, 2, 2, 1}, []float32{2, -4, -16, -22}, 1e-6)

	// Two input channels, two output channels, 1x1: a per-pixel matrix product.
	x2 := &Tensor{Shape: []int{1, 1, 2, 2}, Data: []float32{1, 2, 3, 4}}
	c = NewConv2D("c", 2, 2, 1, 1, 1, Valid, rng)
	copy(c.Kernel().Value.Data, []float32{1, 10, 100, 1000}) // [inC=2,outC=2]
	assertData(t, "1x1 mix", c.Forward(x2, false), []int{1, 1, 2, 2}, []float32{201, 2010, 403, 4030}, 1e-4)
}

// naiveConv is a direct NHWC convolution used as an independent reference.
func naiveConv(x *Tensor, k *Tensor, bias []float32, stride int, pad Padding) *Tensor {
	n, h, w, ci := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	kh, kw, co := k.Shape[0], k.Shape[1], k.Shape[3]
	var oh, ow, pt, pl int
	if pad == Same {
		oh, ow = (h+stride-1)/stride, (w+stride-1)/stride
		pt = max((oh-1)*stride+kh-h, 0) / 2
		pl = max((ow-1)*stride+kw-w, 0) / 2
	} else {
		oh, ow = (h-kh)/stride+1, (w-kw)/stride+1
	}
	y := NewTensor(n, oh, ow, co)
	for b := 0; b < n; b++ {
		for i := 0; i < oh; i++ {
			for j := 0; j < ow; j++ {
				for o := 0; o < co; o++ {
					s := float64(bias[o])
					for a := 0; a < kh; a++ {
						for c := 0; c < kw; c++ {
							ih, iw := i*stride-pt+a, j*stride-pl+c
							if ih < 0 || ih >= h || iw < 0 || iw >= w {
								continue
							}
							for q := 0; q < ci; q++ {
								s += float64(x.Data[((b*h+ih)*w+iw)*ci+q]) * float64(k.Data[((a*kw+c)*ci+q)*co+o])
							}
						}
					}
					y.Data[((b*oh+i)*ow+j)*co+o] = float32(s)
				}
			}
		}
	}
	return y
}

func TestConv2DMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, c := range []struct {
		h, w, ci, co, kh, kw, s int
		p                       Padding
	}{
		{7, 7, 3, 4, 3, 3, 1, Same}, {7, 6, 3, 4, 3, 3, 2, Same}, {8, 8, 2, 5, 3, 3, 2, Valid},
		{9, 5, 1, 2, 5, 3, 3, Same}, {6, 6, 4, 3, 2, 2, 2, Valid}, {5, 5, 2, 2, 4, 4, 1, Same},
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			conv := NewConv2D("c", c.ci, c.co, c.kh, c.kw, c.s, c.p, rng)
			for i := range conv.Bias().Value.Data {
				conv.Bias().Value.Data[i] = float32(rng.NormFloat64())
			}
			x := randTensor(rng, 3, c.h, c.w, c.ci)
			want := naiveConv(x, conv.Kernel().Value, conv.Bias().Value.Data, c.s, c.p)
			got := conv.Forward(x, false)
			if !sameShape(got.Shape, conv.OutputShape(x.Shape)) {
				t.Fatalf("OutputShape %v disagrees with Forward %v", conv.OutputShape(x.Shape), got.Shape)
			}
			assertData(t, "conv", got, want.Shape, want.Data, 1e-4)
			// Run again with a different batch size and then the original one:
			// buffer reuse must not leak stale data between calls.
			conv.Forward(randTensor(rng, 1, c.h, c.w, c.ci), false)
			assertData(t, "conv reuse", conv.Forward(x, false), want.Shape, want.Data, 1e-4)
		})
	}
}

func TestDenseForwardHand(t *testing.T) {
	d := NewDense("d", 2, 3, rand.New(rand.NewSource(1)))
	copy(d.Kernel().Value.Data, []float32{1, 2, 3, 4, 5, 6}) // [2,3]
	copy(d.Bias().Value.Data, []float32{0.5, -1, 0})
	x := &Tensor{Shape: []int{2, 2}, Data: []float32{1, 1, 2, -1}}
	assertData(t, "dense", d.Forward(x, false), []int{2, 3}, []float32{5.5, 6, 9, -1.5, -2, 0}, 1e-6)
}

func TestMaxPoolForwardHand(t *testing.T) {
	// 1x4x4x1 input, 2x2 stride 2.
	x := &Tensor{Shape: []int{1, 4, 4, 1}, Data: []float32{
		1, 5, 2, 0,
		3, 4, 8, 7,
		-1, -2, -3, -4,
		-5, -6, -7, -0.5,
	}}
	p := NewMaxPool2D("p", 2, 2)
	assertData(t, "pool", p.Forward(x, false), []int{1, 2, 2, 1}, []float32{5, 8, -1, -0.5}, 0)
	dx := p.Backward(&Tensor{Shape: []int{1, 2, 2, 1}, Data: []float32{10, 20, 30, 40}})
	want := make([]float32, 16)
	want[1], want[6], want[8], want[15] = 10, 20, 30, 40
	assertData(t, "pool dx", dx, []int{1, 4, 4, 1}, want, 0)

	// Two channels pool independently; odd size drops the last row/col.
	x = &Tensor{Shape: []int{1, 3, 3, 2}, Data: []float32{
		1, -1, 2, -2, 9, 9,
		3, -3, 0, 0, 9, 9,
		9, 9, 9, 9, 9, 9,
	}}
	assertData(t, "pool 2ch", p.Forward(x, false), []int{1, 1, 1, 2}, []float32{3, 0}, 0)
}

func TestReLUForward(t *testing.T) {
	r := NewReLU("r")
	x := &Tensor{Shape: []int{1, 4}, Data: []float32{-1, 0, 2, -0.5}}
	assertData(t, "relu", r.Forward(x, false), []int{1, 4}, []float32{0, 0, 2, 0}, 0)
}

func TestSoftmaxCrossEntropyValues(t *testing.T) {
	logits := &Tensor{Shape: []int{2, 2}, Data: []float32{0, 0, 1000, 0}}
	loss, d, err := SoftmaxCrossEntropy(logits, []int32{0, 0})
	if err != nil {
		t.Fatal(err)
	}
	// Row 0: ln 2; row 1: ~0 (and no overflow despite exp(1000)). Mean.
	if want := math.Ln2 / 2; math.Abs(float64(loss)-want) > 1e-6 {
		t.Errorf("loss %v, want %v", loss, want)
	}
	assertData(t, "dlogits", d, []int{2, 2}, []float32{-0.25, 0.25, 0, 0}, 1e-7)

	loss, _, err = SoftmaxCrossEntropy(logits, []int32{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := (math.Ln2 + 1000) / 2; math.Abs(float64(loss)-want) > 1e-3 || math.IsInf(float64(loss), 0) {
		t.Errorf("loss %v, want %v", loss, want)
	}
}

func TestSoftmaxCrossEntropyErrors(t *testing.T) {
	logits := NewTensor(2, 3)
	if _, _, err := SoftmaxCrossEntropy(logits, []int32{0, 3}); !errors.Is(err, ErrLabel) {
		t.Errorf("label 3 of 3 classes: err %v, want ErrLabel", err)
	}
	if _, _, err := SoftmaxCrossEntropy(logits, []int32{-1, 0}); !errors.Is(err, ErrLabel) {
		t.Errorf("label -1: err %v, want ErrLabel", err)
	}
	if _, _, err := SoftmaxCrossEntropy(logits, []int32{0}); !errors.Is(err, ErrShape) {
		t.Errorf("1 label for 2 rows: err %v, want ErrShape", err)
	}
}

func TestCountCorrect(t *testing.T) {
	logits := &Tensor{Shape: []int{3, 3}, Data: []float32{
		0, 1, 0,
		5, 1, 2,
		0, 0, 1,
	}}
	if got := CountCorrect(logits, []int32{1, 0, 0}); got != 2 {
		t.Errorf("CountCorrect = %d, want 2", got)
	}
	if got := Predict(logits); fmt.Sprint(got) != "[1 0 2]" {
		t.Errorf("Predict = %v, want [1 0 2]", got)
	}
}

func TestSequentialParamsAndNames(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	s := MustSequential(NewConv2D("conv2d_1", 1, 2, 3, 3, 1, Same, rng), NewFlatten("flatten"),
		NewDense("dense_1", 8, 2, rng))
	var names []string
	for _, p := range s.Params() {
		names = append(names, p.Name)
	}
	if got := fmt.Sprint(names); got != "[conv2d_1/kernel conv2d_1/bias dense_1/kernel dense_1/bias]" {
		t.Errorf("param names %s", got)
	}
	if _, err := NewSequential(NewReLU("a"), NewReLU("a")); err == nil {
		t.Error("duplicate layer names accepted")
	}
	if s.NumParams() != 3*3*2+2+8*2+2 {
		t.Errorf("NumParams = %d", s.NumParams())
	}
}

func TestSameSeedSameWeights(t *testing.T) {
	a := NewDense("d", 4, 3, rand.New(rand.NewSource(42)))
	b := NewDense("d", 4, 3, rand.New(rand.NewSource(42)))
	c := NewDense("d", 4, 3, rand.New(rand.NewSource(43)))
	if fmt.Sprint(a.Kernel().Value.Data) != fmt.Sprint(b.Kernel().Value.Data) {
		t.Error("same seed gave different weights")
	}
	if fmt.Sprint(a.Kernel().Value.Data) == fmt.Sprint(c.Kernel().Value.Data) {
		t.Error("different seeds gave identical weights")
	}
	// He-uniform by default: U(-sqrt(6/fanIn), +); the sample max should
	// come close to the limit, and never exceed it.
	checkLimit := func(what string, w []float32, limit float64) {
		t.Helper()
		maxAbs := 0.0
		for _, v := range w {
			maxAbs = math.Max(maxAbs, math.Abs(float64(v)))
		}
		if maxAbs > limit || maxAbs < 0.8*limit {
			t.Errorf("%s: max |w| = %v, want in [0.8, 1]*%v", what, maxAbs, limit)
		}
	}
	big := NewDense("d", 50, 40, rand.New(rand.NewSource(1)))
	checkLimit("he dense", big.Kernel().Value.Data, math.Sqrt(6.0/50))
	big.Initialize(GlorotUniform, rand.New(rand.NewSource(1)))
	checkLimit("glorot dense", big.Kernel().Value.Data, math.Sqrt(6.0/90))
	conv := NewConv2D("c", 4, 8, 3, 3, 1, Same, rand.New(rand.NewSource(1)))
	checkLimit("he conv", conv.Kernel().Value.Data, math.Sqrt(6.0/36))
}

func TestBLASBackend(t *testing.T) {
	if b := BLASBackend(); b != "gonum" && b != "openblas" {
		t.Fatalf("BLASBackend() = %q", b)
	}
	// gemm with transposes against a hand-computed product.
	a := []float32{1, 2, 3, 4, 5, 6} // 2x3
	b := []float32{1, 0, 0, 1, 1, 1} // 3x2
	c := []float32{1, 1, 1, 1}
	gemm(false, false, 2, 2, 3, 2, a, 3, b, 2, 1, c, 2)
	// a·b = [[4,5],[10,11]] → 2*ab + 1
	if fmt.Sprint(c) != "[9 11 21 23]" {
		t.Errorf("gemm NN = %v", c)
	}
	// aᵀ (3x2 view of a as 2x3 transposed) times a (2x3) = 3x3
	c = make([]float32, 9)
	gemm(true, false, 3, 3, 2, 1, a, 3, a, 3, 0, c, 3)
	if fmt.Sprint(c) != "[17 22 27 22 29 36 27 36 45]" {
		t.Errorf("gemm TN = %v", c)
	}
	c = make([]float32, 4)
	gemm(false, true, 2, 2, 3, 1, a, 3, a, 3, 0, c, 2)
	if fmt.Sprint(c) != "[14 32 32 77]" {
		t.Errorf("gemm NT = %v", c)
	}
}

// TestTrainStepAllocFree guards the buffer reuse: once warm, a training
// step on a same-sized batch must not allocate.
func TestTrainStepAllocFree(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	net := MustSequential(
		NewConv2D("c1", 1, 4, 3, 3, 1, Same, rng), NewReLU("r1"), NewMaxPool2D("p1", 2, 2),
		NewConv2D("c2", 4, 4, 3, 3, 2, Valid, rng), NewReLU("r2"), NewFlatten("f"),
		NewDense("d1", 4, 3, rng),
	)
	x := randTensor(rng, 2, 8, 8, 1)
	labels := []int32{1, 2}
	var d *Tensor
	step := func() {
		net.ZeroGrads()
		var err error
		if _, d, err = SoftmaxCrossEntropyInto(d, net.Forward(x, true), labels); err != nil {
			t.Fatal(err)
		}
		net.Backward(d)
	}
	step()
	if n := testing.AllocsPerRun(10, step); n != 0 {
		t.Errorf("training step allocates %v times, want 0", n)
	}
}
