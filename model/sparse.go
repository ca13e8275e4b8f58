package model

import (
	"fmt"
	"slices"
)

// EmbeddingSpec names the PS table behind one of a model's embeddings.
// Several models (and several embeddings) may share a table only if they
// agree on its Dim and Initializer.
type EmbeddingSpec struct {
	Table string
	Dim   int
	// Initializer of the table's rows on the PS (see client.EmbeddingTable):
	// "" means the PS default, uniform:-0.05,0.05.
	Initializer string
}

// SparseSpec makes a Spec a sparse (recommender) model: its network has
// embeddings, each reading all of a record's categorical fields
// (nn.CombinerNone, NumCategorical slots), whose rows live in
// parameter-server tables (initialized there, not by Build). The Spec's
// InputShape is then [DenseFeatures] (the dense features of a record), and
// the records must also carry NumCategorical ids (data.Batch.Categorical).
type SparseSpec struct {
	NumCategorical int
	// Embeddings describes, in order, the tables behind the Spec's
	// Build(...).Embeddings(): one entry per embedding, with its Dim.
	Embeddings []EmbeddingSpec
}

// IsSparse reports whether s is a sparse model.
func (s Spec) IsSparse() bool { return s.Sparse != nil }

// DenseFeatures is the number of dense features per record of a sparse
// model (the size of its InputShape).
func (s Spec) DenseFeatures() int { return s.InputSize() }

// Embeddings describes, in order, the tables behind the embeddings of the
// networks s builds: none for a dense model.
func (s Spec) Embeddings() []EmbeddingSpec {
	if s.Sparse == nil {
		return nil
	}
	return s.Sparse.Embeddings
}

// NumCategorical is the number of categorical ids per record, which every
// embedding reads: 0 for a dense model.
func (s Spec) NumCategorical() int {
	if s.Sparse == nil {
		return 0
	}
	return s.Sparse.NumCategorical
}

func (ss *SparseSpec) validate(name string) error {
	if ss.NumCategorical < 1 {
		return fmt.Errorf("model %q: Sparse.NumCategorical %d, want >= 1: %w", name, ss.NumCategorical, ErrInvalidSpec)
	}
	if len(ss.Embeddings) == 0 {
		return fmt.Errorf("model %q: no Sparse.Embeddings: %w", name, ErrInvalidSpec)
	}
	dims := map[string]EmbeddingSpec{}
	for i, e := range ss.Embeddings {
		if e.Table == "" || e.Dim < 1 {
			return fmt.Errorf("model %q: embedding %d: bad table %q or dim %d: %w", name, i, e.Table, e.Dim, ErrInvalidSpec)
		}
		if old, ok := dims[e.Table]; ok && old != e {
			return fmt.Errorf("model %q: table %q described twice differently: %w", name, e.Table, ErrInvalidSpec)
		}
		dims[e.Table] = e
	}
	return nil
}

// Tables returns the distinct tables of a sparse spec, in first-use order;
// none for a nil SparseSpec (a dense model).
func (ss *SparseSpec) Tables() []EmbeddingSpec {
	if ss == nil {
		return nil
	}
	var out []EmbeddingSpec
	for _, e := range ss.Embeddings {
		if !slices.ContainsFunc(out, func(o EmbeddingSpec) bool { return o.Table == e.Table }) {
			out = append(out, e)
		}
	}
	return out
}
