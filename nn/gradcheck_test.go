package nn

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

func randTensor(rng *rand.Rand, shape ...int) *Tensor {
	t := NewTensor(shape...)
	for i := range t.Data {
		t.Data[i] = float32(rng.NormFloat64())
	}
	return t
}

// awayFromZero pushes values to |v| >= margin so that finite differences of
// ReLU never straddle the kink at 0.
func awayFromZero(t *Tensor, margin float32) {
	for i, v := range t.Data {
		if v >= 0 && v < margin {
			t.Data[i] = v + margin
		} else if v < 0 && v > -margin {
			t.Data[i] = v - margin
		}
	}
}

// close reports whether analytic a matches numeric n within atol + rtol*|n|.
func closeTo(a, n, atol, rtol float64) bool {
	return math.Abs(a-n) <= atol+rtol*math.Abs(n)
}

type gradTol struct{ eps, atol, rtol float64 }

// defaultTol suits float32 forward passes: for piecewise-linear layers the
// central difference is exact up to float32 round-off, which eps=1e-2
// keeps near 1e-5.
var defaultTol = gradTol{eps: 1e-2, atol: 2e-3, rtol: 1e-2}

// checkGrads compares Backward's dx and every parameter gradient with
// central finite differences of L = sum(Forward(x) ⊙ w) for a random w,
// whose gradient w.r.t. the output is exactly w. L is accumulated in
// float64 to keep the numeric side as exact as the float32 forward allows.
func checkGrads(t *testing.T, l Layer, x *Tensor, tol gradTol, rng *rand.Rand) {
	t.Helper()
	y := l.Forward(x, true)
	w := randTensor(rng, y.Shape...)
	for _, p := range l.Params() {
		clear(p.Grad.Data)
	}
	dx := l.Backward(w).Clone()
	if !sameShape(dx.Shape, x.Shape) {
		t.Fatalf("%s: dx shape %v, want %v", l.Name(), dx.Shape, x.Shape)
	}
	grads := make([]*Tensor, len(l.Params()))
	for i, p := range l.Params() {
		grads[i] = p.Grad.Clone()
	}
	loss := func() float64 {
		y := l.Forward(x, true)
		var s float64
		for i, v := range y.Data {
			s += float64(v) * float64(w.Data[i])
		}
		return s
	}
	check := func(what string, vals []float32, analytic []float32) {
		t.Helper()
		bad := 0
		for i := range vals {
			orig := vals[i]
			vals[i] = orig + float32(tol.eps)
			lp := loss()
			vals[i] = orig - float32(tol.eps)
			lm := loss()
			vals[i] = orig
			// Divide by the step actually taken after float32 rounding.
			h := float64(orig+float32(tol.eps)) - float64(orig-float32(tol.eps))
			num := (lp - lm) / h
			if !closeTo(float64(analytic[i]), num, tol.atol, tol.rtol) {
				if bad < 5 {
					t.Errorf("%s: %s[%d]: analytic %.6g, numeric %.6g", l.Name(), what, i, analytic[i], num)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %s: %d/%d mismatches", l.Name(), what, bad, len(vals))
		}
	}
	check("dx", x.Data, dx.Data)
	for i, p := range l.Params() {
		check(p.Name, p.Value.Data, grads[i].Data)
	}
}

func TestDenseGrad(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	checkGrads(t, NewDense("d", 5, 3, rng), randTensor(rng, 4, 5), defaultTol, rng)
}

func TestConv2DGrad(t *testing.T) {
	cases := []struct {
		h, w, inC, outC, kh, kw, stride int
		pad                             Padding
	}{
		{5, 5, 1, 1, 3, 3, 1, Valid},
		{5, 5, 2, 3, 3, 3, 1, Same},
		{6, 5, 2, 3, 3, 3, 2, Valid},
		{6, 7, 2, 2, 3, 3, 2, Same},
		{5, 6, 3, 2, 2, 3, 2, Same}, // non-square kernel, odd padding split
		{4, 4, 3, 2, 1, 1, 1, Valid},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%dx%dx%d_k%dx%d_o%d_s%d_%v", c.h, c.w, c.inC, c.kh, c.kw, c.outC, c.stride, c.pad)
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(2))
			conv := NewConv2D("conv", c.inC, c.outC, c.kh, c.kw, c.stride, c.pad, rng)
			// Non-zero bias so the bias path is exercised in the forward too.
			for i := range conv.Bias().Value.Data {
				conv.Bias().Value.Data[i] = float32(rng.NormFloat64())
			}
			checkGrads(t, conv, randTensor(rng, 2, c.h, c.w, c.inC), defaultTol, rng)
		})
	}
}

func TestMaxPoolGrad(t *testing.T) {
	// 4x6 input with 2x2/2 takes the tiling fast path; 5x6 the general one.
	for _, c := range []struct{ h, size, stride int }{{4, 2, 2}, {5, 2, 2}, {5, 3, 2}, {5, 2, 1}} {
		t.Run(fmt.Sprintf("h%d_size%d_stride%d", c.h, c.size, c.stride), func(t *testing.T) {
			rng := rand.New(rand.NewSource(3))
			x := NewTensor(2, c.h, 6, 3)
			// Distinct values spaced 0.1 apart (> 2*eps) so the winner of
			// every window is stable under the finite-difference step.
			perm := rng.Perm(x.Len())
			for i := range x.Data {
				x.Data[i] = float32(perm[i]) * 0.1
			}
			checkGrads(t, NewMaxPool2D("pool", c.size, c.stride), x, defaultTol, rng)
		})
	}
}

func TestReLUGrad(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	x := randTensor(rng, 3, 7)
	awayFromZero(x, 0.05)
	checkGrads(t, NewReLU("relu"), x, defaultTol, rng)
}

func TestStandardizeGrad(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	x := randTensor(rng, 3, 5)
	checkGrads(t, NewStandardize("std", 0.3, 0.4), x, defaultTol, rng)
	y := NewStandardize("std", 0.5, 0.25).Forward(&Tensor{Shape: []int{1, 2}, Data: []float32{1, 0}}, false)
	if y.Data[0] != 2 || y.Data[1] != -2 {
		t.Fatalf("Standardize(1, 0) = %v, want [2 -2]", y.Data)
	}
}

func TestFlattenGrad(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	f := NewFlatten("flat")
	x := randTensor(rng, 2, 3, 2, 2)
	if y := f.Forward(x, false); !sameShape(y.Shape, []int{2, 12}) {
		t.Fatalf("flatten shape %v, want [2 12]", y.Shape)
	}
	checkGrads(t, f, x, defaultTol, rng)
}

func TestSoftmaxCrossEntropyGrad(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	logits := randTensor(rng, 4, 5)
	labels := []int32{0, 4, 2, 2}
	_, d, err := SoftmaxCrossEntropy(logits, labels)
	if err != nil {
		t.Fatal(err)
	}
	// The loss is smooth, so use a smaller step; evaluate it in float64 via
	// the float32 result, which is accurate to ~1e-7 relative.
	const eps = 1e-2
	for i := range logits.Data {
		orig := logits.Data[i]
		logits.Data[i] = orig + eps
		lp, _, _ := SoftmaxCrossEntropy(logits, labels)
		logits.Data[i] = orig - eps
		lm, _, _ := SoftmaxCrossEntropy(logits, labels)
		logits.Data[i] = orig
		num := (float64(lp) - float64(lm)) / (2 * eps)
		if !closeTo(float64(d.Data[i]), num, 2e-4, 1e-2) {
			t.Errorf("dlogits[%d]: analytic %.6g, numeric %.6g", i, d.Data[i], num)
		}
	}
}

// TestSequentialGrad checks a whole small CNN end to end through the loss,
// including Sequential's skipping of the first layer's dx.
func TestSequentialGrad(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	net := MustSequential(
		NewConv2D("c1", 2, 3, 3, 3, 1, Same, rng),
		NewReLU("r1"),
		NewMaxPool2D("p1", 2, 2),
		NewConv2D("c2", 3, 4, 3, 3, 2, Valid, rng),
		NewFlatten("f"),
		NewDense("d1", 4, 3, rng),
	)
	x := randTensor(rng, 3, 6, 6, 2)
	labels := []int32{0, 2, 1}
	loss := func() float64 {
		l, _, err := SoftmaxCrossEntropy(net.Forward(x, true), labels)
		if err != nil {
			t.Fatal(err)
		}
		return float64(l)
	}
	net.ZeroGrads()
	_, d, err := SoftmaxCrossEntropy(net.Forward(x, true), labels)
	if err != nil {
		t.Fatal(err)
	}
	net.Backward(d)
	const eps = 1e-3
	for _, p := range net.Params() {
		g := p.Grad.Clone()
		for i := range p.Value.Data {
			orig := p.Value.Data[i]
			p.Value.Data[i] = orig + eps
			lp := loss()
			p.Value.Data[i] = orig - eps
			lm := loss()
			p.Value.Data[i] = orig
			num := (lp - lm) / (2 * eps)
			// Looser: float32 loss differences over a 1e-3 step, and a
			// ReLU/max kink may occasionally be crossed.
			if !closeTo(float64(g.Data[i]), num, 1e-3, 5e-2) {
				t.Errorf("%s[%d]: analytic %.6g, numeric %.6g", p.Name, i, g.Data[i], num)
			}
		}
	}
}

func TestBackwardAccumulates(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	for _, l := range []Layer{
		NewDense("d", 3, 2, rng),
		NewConv2D("c", 2, 2, 3, 3, 1, Same, rng),
	} {
		var x *Tensor
		if _, ok := l.(*Dense); ok {
			x = randTensor(rng, 2, 3)
		} else {
			x = randTensor(rng, 2, 4, 4, 2)
		}
		y := l.Forward(x, true)
		dy := randTensor(rng, y.Shape...)
		l.Backward(dy)
		once := make([]*Tensor, 0, 2)
		for _, p := range l.Params() {
			once = append(once, p.Grad.Clone())
		}
		l.Backward(dy)
		for i, p := range l.Params() {
			for j, v := range p.Grad.Data {
				if want := 2 * once[i].Data[j]; !closeTo(float64(v), float64(want), 1e-5, 1e-5) {
					t.Fatalf("%s: grad[%d]=%g after two backward passes, want %g", p.Name, j, v, want)
				}
			}
		}
	}
}

func TestBackwardParamsMatchesBackward(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	a := NewConv2D("c", 2, 3, 3, 3, 2, Same, rng)
	b := NewConv2D("c", 2, 3, 3, 3, 2, Same, rng)
	copy(b.Kernel().Value.Data, a.Kernel().Value.Data)
	x := randTensor(rng, 2, 5, 5, 2)
	dy := randTensor(rng, a.Forward(x, true).Shape...)
	b.Forward(x, true)
	a.Backward(dy)
	b.BackwardParams(dy)
	for i, p := range a.Params() {
		q := b.Params()[i]
		for j := range p.Grad.Data {
			if p.Grad.Data[j] != q.Grad.Data[j] {
				t.Fatalf("%s[%d]: Backward %g vs BackwardParams %g", p.Name, j, p.Grad.Data[j], q.Grad.Data[j])
			}
		}
	}
}
