package nn

import "fmt"

// Model is the one network type of this system: embedding lookups (none
// for a plain dense model) and a tower of layers. With embeddings, their
// outputs and the dense input are concatenated, in that order, and fed to
// the tower:
//
//	out = Tower(Concat(emb_1, ..., emb_k, x))
//
// Without embeddings the tower reads x as it is (an image stays NHWC):
//
//	out = Tower(x)
//
// The caller owns the embeddings' batches: call each embedding's SetBatch
// and fill its Rows before Forward, and read each embedding's Grad after
// Backward (the tables live on the parameter servers).
type Model struct {
	embeddings []*Embedding
	tower      *Sequential
	params     []*Param

	concat *Concat
	inputs []*Tensor
}

// NewModel checks that the embeddings and tower layers are non-nil with
// non-empty, unique names (so parameter names are unique) and builds the
// model. Layers are numbered in errors embeddings first.
func NewModel(embeddings []*Embedding, tower ...Layer) (*Model, error) {
	layers := make([]Layer, 0, len(embeddings)+len(tower))
	for i, e := range embeddings {
		if e == nil {
			return nil, fmt.Errorf("nn: model: embedding %d is nil", i)
		}
		layers = append(layers, e)
	}
	if err := checkNames(append(layers, tower...)); err != nil {
		return nil, fmt.Errorf("nn: model: %w", err)
	}
	t := &Sequential{Layers: tower}
	return &Model{embeddings: embeddings, tower: t, params: t.Params(), concat: NewConcat("concat")}, nil
}

// MustModel is NewModel for statically known architectures; it panics on
// invalid names.
func MustModel(embeddings []*Embedding, tower ...Layer) *Model {
	m, err := NewModel(embeddings, tower...)
	if err != nil {
		panic(err)
	}
	return m
}

// Embeddings returns the model's embeddings, in concatenation order; the
// slice is shared.
func (m *Model) Embeddings() []*Embedding { return m.embeddings }

// Forward runs the model on the dense input x ([N, ...]; with embeddings
// it may be nil, then only they are concatenated). The result is owned by
// the last tower layer.
func (m *Model) Forward(x *Tensor, train bool) *Tensor {
	if len(m.embeddings) > 0 {
		m.inputs = m.inputs[:0]
		for _, e := range m.embeddings {
			m.inputs = append(m.inputs, e.Forward(nil, train))
		}
		if x != nil {
			m.inputs = append(m.inputs, x)
		}
		x = m.concat.Forward(m.inputs...)
	}
	return m.tower.Forward(x, train)
}

// Backward back-propagates dy, accumulating the tower's parameter
// gradients and every embedding's sparse gradient. Without embeddings the
// tower's input gradient is not needed, and Sequential skips it.
func (m *Model) Backward(dy *Tensor) {
	if len(m.embeddings) == 0 {
		m.tower.Backward(dy)
		return
	}
	dxs := m.concat.Backward(m.tower.backwardInput(dy))
	for i, e := range m.embeddings {
		e.Backward(dxs[i])
	}
}

// Params returns the tower's dense parameters in layer order (kernel
// before bias); the embedding tables are not among them. The slice is
// shared.
func (m *Model) Params() []*Param { return m.params }

// ZeroGrads clears the parameter gradients and the embeddings' sparse
// gradients.
func (m *Model) ZeroGrads() {
	for _, p := range m.params {
		clear(p.Grad.Data)
	}
	for _, e := range m.embeddings {
		e.ZeroGrad()
	}
}

// NumParams returns the total number of scalar dense parameters.
func (m *Model) NumParams() int { return numParams(m.params) }

// Layers returns the tower's layers in order (what an exporter walks);
// the slice is shared.
func (m *Model) Layers() []Layer { return m.tower.Layers }
