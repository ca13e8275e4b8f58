package model

import (
	"fmt"
	"math/rand"
	"slices"

	"elasticdl/nn"
)

// SparseNet is a network with embedding lookups, trained against
// parameter-server embedding tables. Each embedding reads all the record's
// categorical fields (CombinerNone, slots = SparseSpec.NumCategorical); the
// caller sets each embedding's batch, fills its Rows from the PS, and then
// runs Forward on the dense features [N, DenseFeatures] to get the logits
// [N, NumClasses]. After Backward the tower's gradients are in Params and
// each embedding's sparse gradient in its Grad.
type SparseNet interface {
	Embeddings() []*nn.Embedding
	Params() []*nn.Param // dense parameters only
	ZeroGrads()          // dense and sparse gradients
	Forward(dense *nn.Tensor, train bool) *nn.Tensor
	Backward(dlogits *nn.Tensor)
}

// EmbeddingSpec names the PS table behind one of a SparseNet's
// embeddings. Several nets (and several embeddings) may share a table only
// if they agree on its Dim and Initializer.
type EmbeddingSpec struct {
	Table string
	Dim   int
	// Initializer of the table's rows on the PS (see client.EmbeddingTable):
	// "" means the PS default, uniform:-0.05,0.05.
	Initializer string
}

// SparseSpec makes a Spec a sparse (recommender) model. The Spec's
// InputShape is then [DenseFeatures] (the dense features of a record), and
// the records must also carry NumCategorical ids (data.Batch.Categorical).
type SparseSpec struct {
	NumCategorical int
	// Embeddings describes, in order, the tables behind Build's
	// Embeddings(): one entry per embedding, with the embedding's Dim.
	Embeddings []EmbeddingSpec
	// Build returns a fresh network; the same seed gives the same dense
	// weights (the tables' rows are initialized by the PS).
	Build func(rng *rand.Rand) SparseNet
}

// IsSparse reports whether s is a sparse model.
func (s Spec) IsSparse() bool { return s.Sparse != nil }

// DenseFeatures is the number of dense features per record of a sparse
// model (the size of its InputShape).
func (s Spec) DenseFeatures() int { return s.InputSize() }

func (ss *SparseSpec) validate(name string) error {
	if ss.Build == nil {
		return fmt.Errorf("model %q: nil Sparse.Build: %w", name, ErrInvalidSpec)
	}
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

// Tables returns the distinct tables of a sparse spec, in first-use order.
func (ss *SparseSpec) Tables() []EmbeddingSpec {
	var out []EmbeddingSpec
	for _, e := range ss.Embeddings {
		if !slices.ContainsFunc(out, func(o EmbeddingSpec) bool { return o.Table == e.Table }) {
			out = append(out, e)
		}
	}
	return out
}

// checkSparseBuild builds the sparse net and runs one record of zero
// features and id 0 through it.
func (s Spec) checkSparseBuild() error {
	net := s.Sparse.Build(rand.New(rand.NewSource(1)))
	if net == nil {
		return fmt.Errorf("model %q: Sparse.Build returned nil: %w", s.Name, ErrInvalidSpec)
	}
	embs := net.Embeddings()
	if len(embs) != len(s.Sparse.Embeddings) {
		return fmt.Errorf("model %q: net has %d embeddings, spec describes %d: %w",
			s.Name, len(embs), len(s.Sparse.Embeddings), ErrInvalidSpec)
	}
	ids := make([]int64, s.Sparse.NumCategorical)
	for i, e := range embs {
		if e.Dim() != s.Sparse.Embeddings[i].Dim {
			return fmt.Errorf("model %q: embedding %d has dim %d, spec says %d: %w",
				s.Name, i, e.Dim(), s.Sparse.Embeddings[i].Dim, ErrInvalidSpec)
		}
		if _, err := e.SetBatch(ids, nil, len(ids)); err != nil {
			return fmt.Errorf("model %q: %v: %w", s.Name, err, ErrInvalidSpec)
		}
	}
	y := net.Forward(nn.NewTensor(s.BatchShape(1)...), false)
	if want := []int{1, s.NumClasses}; !slices.Equal(y.Shape, want) {
		return fmt.Errorf("model %q: output shape %v, want %v: %w", s.Name, y.Shape, want, ErrInvalidSpec)
	}
	return nil
}

// paramsLayer is a Layer that only carries parameters: the Sequential that
// a sparse spec's Build returns, for callers that need only the names and
// shapes of the dense parameters (checkpoints, the master's final save).
type paramsLayer struct {
	name   string
	params []*nn.Param
}

func (l *paramsLayer) Name() string        { return l.name }
func (l *paramsLayer) Params() []*nn.Param { return l.params }
func (l *paramsLayer) Backward(*nn.Tensor) *nn.Tensor {
	panic("model: the Build of a sparse spec gives parameters only; use Sparse.Build")
}
func (l *paramsLayer) Forward(*nn.Tensor, bool) *nn.Tensor {
	panic("model: the Build of a sparse spec gives parameters only; use Sparse.Build")
}

// denseBuild is the Build of a sparse spec that has none.
func denseBuild(ss *SparseSpec) func(rng *rand.Rand) *nn.Sequential {
	return func(rng *rand.Rand) *nn.Sequential {
		return nn.MustSequential(&paramsLayer{name: "sparse_net_params", params: ss.Build(rng).Params()})
	}
}
