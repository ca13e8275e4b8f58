package zoo

import (
	"fmt"
	"math/rand"

	"elasticdl/model"
	"elasticdl/nn"
)

// Recommender models for click-through-rate data shaped like
// data.DefaultCTRConfig (synthetic-ctr://): 13 dense features and 26
// categorical fields whose ids share one id space. Both models read every
// field through two PS tables: ctr_linear (dim 1, the first-order weight of
// each id, starting at zero) and ctr_embed (dim ctrEmbedDim). The output is
// two logits (softmax[1] is the click probability); the wide and FM terms
// are added to logit 1, which makes the softmax a sigmoid of their sum
// plus the deep tower's logit difference.
//
// ctr.wide_and_deep: logit_1 += Σ_f w(id_f); deep tower
// Dense(13+26·8 → 64) → ReLU → Dense(64 → 32) → ReLU → Dense(32 → 2) over
// [dense, embeddings of all fields].
//
// ctr.deepfm: wide_and_deep plus the factorization machine's pairwise term
// Σ_{i<j} <v_i, v_j> over the field embeddings (nn.FMInteraction), which
// shares its embeddings with the deep tower.
//
// ctr.xdeepfm: wide_and_deep plus a compressed interaction network
// (nn.CIN, layers of ctrCIN feature maps) over the same field embeddings,
// whose sum-pooled maps go through Dense(ΣH → 1) into logit 1.
const (
	CTRWideAndDeep = "ctr.wide_and_deep"
	CTRDeepFM      = "ctr.deepfm"
	CTRXDeepFM     = "ctr.xdeepfm"
)

const (
	ctrDense       = 13
	ctrCategorical = 26
	ctrEmbedDim    = 8
	ctrHidden1     = 64
	ctrHidden2     = 32
	ctrOpt         = "adagrad:learning_rate=0.1,initial_accumulator_value=0.001"
)

// ctrCIN are the feature maps of ctr.xdeepfm's CIN layers: small, so that
// it trains at a few thousand records/s per worker on one core.
var ctrCIN = []int{8, 8}

// WideAndDeepSpec returns the spec of ctr.wide_and_deep.
func WideAndDeepSpec() model.Spec { return ctrSpec(CTRWideAndDeep, false) }

// DeepFMSpec returns the spec of ctr.deepfm.
func DeepFMSpec() model.Spec { return ctrSpec(CTRDeepFM, true) }

// XDeepFMSpec returns the spec of ctr.xdeepfm.
func XDeepFMSpec() model.Spec {
	s := ctrSpec(CTRXDeepFM, false)
	s.Description = fmt.Sprintf("CTR xDeepFM: first-order id weights + CIN %v + MLP over %d dense features and %d categorical fields (embedding dim %d; tower %d-%d-2)",
		ctrCIN, ctrDense, ctrCategorical, ctrEmbedDim, ctrHidden1, ctrHidden2)
	s.Sparse.Build = func(rng *rand.Rand) model.SparseNet {
		return NewXDeepFMNet(ctrDense, ctrCategorical, ctrEmbedDim, ctrHidden1, ctrHidden2, ctrCIN, rng)
	}
	return s
}

func ctrSpec(name string, fm bool) model.Spec {
	kind := "Wide&Deep: first-order id weights + MLP"
	if fm {
		kind = "DeepFM: first-order id weights + FM pairwise term + MLP"
	}
	return model.Spec{
		Name: name,
		Description: fmt.Sprintf("CTR %s over %d dense features and %d categorical fields (embedding dim %d; tower %d-%d-2)",
			kind, ctrDense, ctrCategorical, ctrEmbedDim, ctrHidden1, ctrHidden2),
		InputShape: []int{ctrDense},
		NumClasses: 2,
		Optimizer:  ctrOpt,
		Sparse: &model.SparseSpec{
			NumCategorical: ctrCategorical,
			Embeddings: []model.EmbeddingSpec{
				{Table: "ctr_linear", Dim: 1, Initializer: "zeros"},
				{Table: "ctr_embed", Dim: ctrEmbedDim, Initializer: "uniform:-0.05,0.05"},
			},
			Build: func(rng *rand.Rand) model.SparseNet {
				return NewCTRNet(ctrDense, ctrCategorical, ctrEmbedDim, ctrHidden1, ctrHidden2, fm, rng)
			},
		},
	}
}

// CTRNet is the network of ctr.wide_and_deep (fm false), ctr.deepfm and
// ctr.xdeepfm (cin set).
type CTRNet struct {
	dense, fields, dim int
	first, emb         *nn.Embedding
	fm                 *nn.FMInteraction
	cin                *nn.CIN
	cinOut             *nn.Dense
	concat             *nn.Concat
	tower              []nn.Layer
	params             []*nn.Param

	e2     *nn.Tensor // embeddings of the last Forward, [N, F, D]
	logits *nn.Tensor
	dfm    *nn.Tensor
	de1    *nn.Tensor
}

var _ model.SparseNet = (*CTRNet)(nil)

// NewCTRNet builds a CTRNet for records of dense features and fields
// categorical ids, embeddings of width dim and a two-hidden-layer tower.
func NewCTRNet(dense, fields, dim, h1, h2 int, fm bool, rng *rand.Rand) *CTRNet {
	n := &CTRNet{
		dense: dense, fields: fields, dim: dim,
		first:  nn.NewEmbedding("first_order", 1, nn.CombinerNone),
		emb:    nn.NewEmbedding("embedding", dim, nn.CombinerNone),
		concat: nn.NewConcat("concat"),
	}
	if fm {
		n.fm = nn.NewFMInteraction("fm")
	}
	d1 := nn.NewDense("dense_1", dense+fields*dim, h1, rng)
	d2 := nn.NewDense("dense_2", h1, h2, rng)
	d3 := nn.NewDense("dense_3", h2, 2, rng)
	d1.Initialize(nn.GlorotUniform, rng)
	d2.Initialize(nn.GlorotUniform, rng)
	d3.Initialize(nn.GlorotUniform, rng)
	n.tower = []nn.Layer{d1, nn.NewReLU("relu_1"), d2, nn.NewReLU("relu_2"), d3}
	for _, l := range n.tower {
		n.params = append(n.params, l.Params()...)
	}
	return n
}

// NewXDeepFMNet builds the CTRNet of ctr.xdeepfm: NewCTRNet without FM,
// plus a CIN of layers cin over the field embeddings and Dense(ΣH → 1)
// into logit 1.
func NewXDeepFMNet(dense, fields, dim, h1, h2 int, cin []int, rng *rand.Rand) *CTRNet {
	n := NewCTRNet(dense, fields, dim, h1, h2, false, rng)
	n.cin = nn.NewCIN("cin", fields, dim, cin, rng)
	n.cinOut = nn.NewDense("cin_out", n.cin.OutputSize(), 1, rng)
	n.cinOut.Initialize(nn.GlorotUniform, rng)
	n.params = append(n.params, n.cin.Params()...)
	n.params = append(n.params, n.cinOut.Params()...)
	return n
}

// Embeddings implements model.SparseNet: first-order (dim 1), then the
// field embeddings.
func (n *CTRNet) Embeddings() []*nn.Embedding { return []*nn.Embedding{n.first, n.emb} }

// Params implements model.SparseNet.
func (n *CTRNet) Params() []*nn.Param { return n.params }

// ZeroGrads implements model.SparseNet.
func (n *CTRNet) ZeroGrads() {
	for _, p := range n.params {
		clear(p.Grad.Data)
	}
	n.first.ZeroGrad()
	n.emb.ZeroGrad()
}

func fit(t *nn.Tensor, shape ...int) *nn.Tensor {
	size := 1
	for _, d := range shape {
		size *= d
	}
	if t == nil || cap(t.Data) < size {
		return nn.NewTensor(shape...)
	}
	t.Shape = append(t.Shape[:0], shape...)
	t.Data = t.Data[:size]
	return t
}

// Forward implements model.SparseNet: dense is [N, dense features].
func (n *CTRNet) Forward(dense *nn.Tensor, train bool) *nn.Tensor {
	e1 := n.first.Forward(nil, train) // [N, F, 1]
	n.e2 = n.emb.Forward(nil, train)  // [N, F, D]
	rows := n.e2.Shape[0]
	var x *nn.Tensor
	if n.dense > 0 {
		x = n.concat.Forward(dense, n.e2)
	} else {
		x = n.concat.Forward(n.e2)
	}
	for _, l := range n.tower {
		x = l.Forward(x, train)
	}
	n.logits = fit(n.logits, rows, 2)
	copy(n.logits.Data, x.Data)
	var fmy *nn.Tensor
	if n.fm != nil {
		fmy = n.fm.Forward(n.e2, train)
	}
	if n.cin != nil {
		fmy = n.cinOut.Forward(n.cin.Forward(n.e2, train), train) // [N, 1]
	}
	for r := 0; r < rows; r++ {
		var s float32
		for _, v := range e1.Data[r*n.fields : (r+1)*n.fields] {
			s += v
		}
		if fmy != nil {
			s += fmy.Data[r]
		}
		n.logits.Data[2*r+1] += s
	}
	return n.logits
}

// Backward implements model.SparseNet.
func (n *CTRNet) Backward(dlogits *nn.Tensor) {
	rows := n.e2.Shape[0]
	dy := dlogits
	for i := len(n.tower) - 1; i >= 0; i-- {
		dy = n.tower[i].Backward(dy)
	}
	dxs := n.concat.Backward(dy)
	de2 := dxs[len(dxs)-1]
	n.de1 = fit(n.de1, rows, n.fields, 1)
	n.dfm = fit(n.dfm, rows, 1)
	for r := 0; r < rows; r++ {
		g := dlogits.Data[2*r+1]
		n.dfm.Data[r] = g
		for f := 0; f < n.fields; f++ {
			n.de1.Data[r*n.fields+f] = g
		}
	}
	if n.fm != nil {
		dv := n.fm.Backward(n.dfm)
		for i, v := range dv.Data {
			de2.Data[i] += v
		}
	}
	if n.cin != nil {
		dv := n.cin.Backward(n.cinOut.Backward(n.dfm))
		for i, v := range dv.Data {
			de2.Data[i] += v
		}
	}
	n.emb.Backward(de2)
	n.first.Backward(n.de1)
}
