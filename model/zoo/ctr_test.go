package zoo

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"elasticdl/model"
	"elasticdl/nn"
)

func TestCTRSpecsRegister(t *testing.T) {
	r := model.NewRegistry()
	if err := Register(r); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{CTRWideAndDeep, CTRDeepFM, CTRXDeepFM} {
		s, err := r.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CheckBuild(); err != nil {
			t.Fatal(err)
		}
		// Build carries the dense parameters: the tower's
		// 6, plus xDeepFM's 2 CIN kernels and its output layer's 2.
		want := 6
		if name == CTRXDeepFM {
			want = 10
		}
		if got := len(s.Build(rand.New(rand.NewSource(1))).Params()); got != want {
			t.Errorf("%s: Build has %d params, want %d", name, got, want)
		}
	}
}

// Finite differences of L = Σ logits ⊙ w against the dense parameters and
// the embedding rows, for the three models.
func TestCTRNetGrad(t *testing.T) {
	for _, kind := range []string{"wide_and_deep", "deepfm", "xdeepfm"} {
		fm := kind
		rng := rand.New(rand.NewSource(7))
		const n, dense, fields, dim = 3, 2, 4, 3
		var net *nn.Model
		if kind == "xdeepfm" {
			net = NewXDeepFMNet(dense, fields, dim, 5, 4, []int{3, 2}, rng)
		} else {
			net = NewCTRNet(dense, fields, dim, 5, 4, kind == "deepfm", rng)
		}
		ids := make([]int64, n*fields)
		for i := range ids {
			ids[i] = int64(rng.Intn(6))
		}
		for _, e := range net.Embeddings() {
			if _, err := e.SetBatch(ids, nil, fields); err != nil {
				t.Fatal(err)
			}
			for i := range e.Rows() {
				e.Rows()[i] = float32(rng.NormFloat64() * 0.5)
			}
		}
		x := nn.NewTensor(n, dense)
		for i := range x.Data {
			x.Data[i] = float32(rng.NormFloat64())
		}
		y := net.Forward(x, true)
		w := nn.NewTensor(y.Shape...)
		for i := range w.Data {
			w.Data[i] = float32(rng.NormFloat64())
		}
		net.ZeroGrads()
		net.Backward(w)
		loss := func() float64 {
			y := net.Forward(x, true)
			var s float64
			for i, v := range y.Data {
				s += float64(v) * float64(w.Data[i])
			}
			return s
		}
		check := func(what string, vals, analytic []float32) {
			analytic = append([]float32(nil), analytic...)
			for i := range vals {
				orig := vals[i]
				const eps = 1e-2
				vals[i] = orig + eps
				lp := loss()
				vals[i] = orig - eps
				lm := loss()
				vals[i] = orig
				num := (lp - lm) / (2 * eps)
				if math.Abs(num-float64(analytic[i])) > 3e-3+2e-2*math.Abs(num) {
					t.Errorf("%s %s[%d]: analytic %v numeric %v", fm, what, i, analytic[i], num)
				}
			}
		}
		for _, p := range net.Params() {
			check(p.Name, p.Value.Data, p.Grad.Data)
		}
		for _, e := range net.Embeddings() {
			_, g := e.Grad()
			check(e.Name(), e.Rows(), g)
		}
	}
}

// --model_params reshape the CTR models for another data set (ticdata:
// 23 dense features, 62 categorical fields).
func TestCTRModelParams(t *testing.T) {
	r := model.NewRegistry()
	if err := Register(r); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{CTRWideAndDeep, CTRDeepFM, CTRXDeepFM} {
		s, err := r.Resolve(name, "dense=23; fields=62; embedding_dim=4")
		if err != nil {
			t.Fatal(err)
		}
		if s.InputShape[0] != 23 || s.NumCategorical() != 62 || s.Embeddings()[1].Dim != 4 {
			t.Errorf("%s: input %v, %d fields, embedding %+v", name, s.InputShape, s.NumCategorical(), s.Embeddings()[1])
		}
		if !strings.Contains(s.Description, "23 dense features and 62 categorical fields (embedding dim 4") {
			t.Errorf("%s: description %q", name, s.Description)
		}
		if _, err := r.Resolve(name, "fields=62;dense=0"); err == nil || !strings.Contains(err.Error(), "dense") {
			t.Errorf("%s: dense=0 accepted: %v", name, err)
		}
	}
}
