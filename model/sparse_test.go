package model

import (
	"errors"
	"math/rand"
	"testing"

	"elasticdl/nn"
)

// tinySparse is a SparseNet: one embedding, summed into logit 1.
type tinySparse struct {
	emb    *nn.Embedding
	d      *nn.Dense
	logits *nn.Tensor
}

func (t *tinySparse) Embeddings() []*nn.Embedding { return []*nn.Embedding{t.emb} }
func (t *tinySparse) Params() []*nn.Param         { return t.d.Params() }
func (t *tinySparse) ZeroGrads()                  {}
func (t *tinySparse) Backward(*nn.Tensor)         {}
func (t *tinySparse) Forward(x *nn.Tensor, train bool) *nn.Tensor {
	t.emb.Forward(nil, train)
	return t.d.Forward(x, train)
}

func sparseSpec() Spec {
	return Spec{
		Name: "tiny.sparse", InputShape: []int{3}, NumClasses: 2,
		Sparse: &SparseSpec{
			NumCategorical: 2,
			Embeddings:     []EmbeddingSpec{{Table: "t", Dim: 4}},
			Build: func(rng *rand.Rand) SparseNet {
				return &tinySparse{emb: nn.NewEmbedding("e", 4, nn.CombinerNone), d: nn.NewDense("d", 3, 2, rng)}
			},
		},
	}
}

func TestSparseSpecRegister(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(sparseSpec()); err != nil {
		t.Fatal(err)
	}
	s, err := r.Lookup("tiny.sparse")
	if err != nil {
		t.Fatal(err)
	}
	if !s.IsSparse() || s.Build == nil || s.DenseFeatures() != 3 {
		t.Fatalf("spec %+v", s)
	}
	if err := s.CheckBuild(); err != nil {
		t.Fatal(err)
	}
	if got := s.Build(rand.New(rand.NewSource(1))).Params(); len(got) != 2 || got[0].Name != "d/kernel" {
		t.Fatalf("Build params %v", got)
	}
	// Lookup returns a copy: changing it leaves the registry alone.
	s.Sparse.Embeddings[0].Dim = 9
	if s2, _ := r.Lookup("tiny.sparse"); s2.Sparse.Embeddings[0].Dim != 4 {
		t.Fatal("registry entry changed through a looked-up spec")
	}
}

func TestSparseSpecInvalid(t *testing.T) {
	for name, mut := range map[string]func(*Spec){
		"no build":       func(s *Spec) { s.Sparse.Build = nil },
		"no categorical": func(s *Spec) { s.Sparse.NumCategorical = 0 },
		"no embeddings":  func(s *Spec) { s.Sparse.Embeddings = nil },
		"bad dim":        func(s *Spec) { s.Sparse.Embeddings[0].Dim = 0 },
		"table twice":    func(s *Spec) { s.Sparse.Embeddings = append(s.Sparse.Embeddings, EmbeddingSpec{Table: "t", Dim: 5}) },
		"rank 2 input":   func(s *Spec) { s.InputShape = []int{3, 1} },
	} {
		s := sparseSpec()
		mut(&s)
		if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: Validate = %v, want ErrInvalidSpec", name, err)
		}
	}
	// A dim that does not match the net is caught by CheckBuild.
	s := sparseSpec()
	s.Sparse.Embeddings[0].Dim = 5
	if err := s.CheckBuild(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("CheckBuild with a wrong dim = %v", err)
	}
}
