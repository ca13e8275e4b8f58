package model

import (
	"errors"
	"math/rand"
	"testing"

	"elasticdl/nn"
)

func sparseSpec() Spec {
	return Spec{
		Name: "tiny.sparse", InputShape: []int{3}, NumClasses: 2,
		// One embedding of the 2 fields, concatenated with the 3 features.
		Build: func(rng *rand.Rand) *nn.Model {
			return nn.MustModel([]*nn.Embedding{nn.NewEmbedding("e", 4, nn.CombinerNone)}, nn.NewDense("d", 2*4+3, 2, rng))
		},
		Sparse: &SparseSpec{
			NumCategorical: 2,
			Embeddings:     []EmbeddingSpec{{Table: "t", Dim: 4}},
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
		"no build":       func(s *Spec) { s.Build = nil },
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
	// So are embeddings the spec does not describe, or describes and the
	// net lacks.
	s = sparseSpec()
	s.Sparse = nil
	if err := s.CheckBuild(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("CheckBuild of a dense spec whose net has embeddings = %v", err)
	}
	s = sparseSpec()
	s.Sparse.Embeddings = append(s.Sparse.Embeddings, EmbeddingSpec{Table: "u", Dim: 4})
	if err := s.CheckBuild(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("CheckBuild with an embedding the net lacks = %v", err)
	}
}
