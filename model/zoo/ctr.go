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
//
// --model_params set the counts for other data (ctrShape): "dense=23;
// fields=62" for ticdata.
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

// ctrShape is what a CTR model's parameters (--model_params) set: the
// records' dense features and categorical fields, and the embedding width.
// The defaults fit data.DefaultCTRConfig; a real data set such as ticdata
// (hack/ticdata.sh) names its own counts.
type ctrShape struct {
	dense, fields, dim int
}

var defaultCTRShape = ctrShape{dense: ctrDense, fields: ctrCategorical, dim: ctrEmbedDim}

const ctrParamsHelp = "dense=N (dense features, default 13); fields=N (categorical fields, default 26); embedding_dim=N (default 8)"

// ctrKind is one of the three CTR networks.
type ctrKind int

const (
	ctrWide ctrKind = iota
	ctrFM
	ctrCINKind
)

// WideAndDeepSpec returns the spec of ctr.wide_and_deep.
func WideAndDeepSpec() model.Spec { return ctrSpec(CTRWideAndDeep, ctrWide, defaultCTRShape) }

// DeepFMSpec returns the spec of ctr.deepfm.
func DeepFMSpec() model.Spec { return ctrSpec(CTRDeepFM, ctrFM, defaultCTRShape) }

// XDeepFMSpec returns the spec of ctr.xdeepfm.
func XDeepFMSpec() model.Spec { return ctrSpec(CTRXDeepFM, ctrCINKind, defaultCTRShape) }

func ctrSpec(name string, kind ctrKind, sh ctrShape) model.Spec {
	what := map[ctrKind]string{
		ctrWide:    "Wide&Deep: first-order id weights + MLP",
		ctrFM:      "DeepFM: first-order id weights + FM pairwise term + MLP",
		ctrCINKind: fmt.Sprintf("xDeepFM: first-order id weights + CIN %v + MLP", ctrCIN),
	}[kind]
	return model.Spec{
		Name: name,
		Description: fmt.Sprintf("CTR %s over %d dense features and %d categorical fields (embedding dim %d; tower %d-%d-2)",
			what, sh.dense, sh.fields, sh.dim, ctrHidden1, ctrHidden2),
		InputShape: []int{sh.dense},
		NumClasses: 2,
		Optimizer:  ctrOpt,
		Build: func(rng *rand.Rand) *nn.Model {
			if kind == ctrCINKind {
				return NewXDeepFMNet(sh.dense, sh.fields, sh.dim, ctrHidden1, ctrHidden2, ctrCIN, rng)
			}
			return NewCTRNet(sh.dense, sh.fields, sh.dim, ctrHidden1, ctrHidden2, kind == ctrFM, rng)
		},
		Sparse: &model.SparseSpec{
			NumCategorical: sh.fields,
			Embeddings: []model.EmbeddingSpec{
				{Table: "ctr_linear", Dim: 1, Initializer: "zeros"},
				{Table: "ctr_embed", Dim: sh.dim, Initializer: "uniform:-0.05,0.05"},
			},
		},
		Configure: func(p model.Params) (model.Spec, error) {
			r := p.Reader()
			c := ctrShape{
				dense:  r.Int("dense", ctrDense, 1, 1<<16),
				fields: r.Int("fields", ctrCategorical, 1, 1<<12),
				dim:    r.Int("embedding_dim", ctrEmbedDim, 1, 1<<10),
			}
			if err := r.Err(); err != nil {
				return model.Spec{}, err
			}
			return ctrSpec(name, kind, c), nil
		},
		ParamsHelp: ctrParamsHelp,
	}
}

// NewCTRNet builds the network of ctr.wide_and_deep (fm false) or
// ctr.deepfm (fm true) for records of dense features and fields
// categorical ids, embeddings of width dim and a two-hidden-layer tower:
// embeddings first_order (dim 1) and embedding (dim dim), then the
// ctrHead.
func NewCTRNet(dense, fields, dim, h1, h2 int, fm bool, rng *rand.Rand) *nn.Model {
	h := newCTRHead(dense, fields, dim, h1, h2, rng)
	if fm {
		h.fm = nn.NewFMInteraction("fm")
	}
	return h.model()
}

// NewXDeepFMNet builds the network of ctr.xdeepfm: NewCTRNet without FM,
// plus a CIN of layers cin over the field embeddings and Dense(ΣH → 1)
// into logit 1.
func NewXDeepFMNet(dense, fields, dim, h1, h2 int, cin []int, rng *rand.Rand) *nn.Model {
	h := newCTRHead(dense, fields, dim, h1, h2, rng)
	h.cin = nn.NewCIN("cin", fields, dim, cin, rng)
	h.cinOut = nn.NewDense("cin_out", h.cin.OutputSize(), 1, rng)
	h.cinOut.Initialize(nn.GlorotUniform, rng)
	h.params = append(h.params, h.cin.Params()...)
	h.params = append(h.params, h.cinOut.Params()...)
	return h.model()
}

// ctrHead is everything of a CTR network above its two embeddings, as the
// one tower layer of an nn.Model. Its input is the Model's concatenation,
// per record [first-order weights (F) | field embeddings (F·D) | dense
// features]; it runs the deep tower on [dense features, field
// embeddings], adds the first-order weights and the FM or CIN term to
// logit 1, and its Backward hands the Model the gradient of that input.
type ctrHead struct {
	dense, fields, dim int
	fm                 *nn.FMInteraction
	cin                *nn.CIN
	cinOut             *nn.Dense
	concat             *nn.Concat
	tower              []nn.Layer
	params             []*nn.Param

	// Of the last Forward: its input, the field embeddings [N, F, D] and
	// the dense features [N, dense].
	x, e2, xd *nn.Tensor
	logits    *nn.Tensor
	dfm, dx   *nn.Tensor
}

var _ nn.Layer = (*ctrHead)(nil)

func newCTRHead(dense, fields, dim, h1, h2 int, rng *rand.Rand) *ctrHead {
	h := &ctrHead{dense: dense, fields: fields, dim: dim, concat: nn.NewConcat("concat")}
	d1 := nn.NewDense("dense_1", dense+fields*dim, h1, rng)
	d2 := nn.NewDense("dense_2", h1, h2, rng)
	d3 := nn.NewDense("dense_3", h2, 2, rng)
	d1.Initialize(nn.GlorotUniform, rng)
	d2.Initialize(nn.GlorotUniform, rng)
	d3.Initialize(nn.GlorotUniform, rng)
	h.tower = []nn.Layer{d1, nn.NewReLU("relu_1"), d2, nn.NewReLU("relu_2"), d3}
	for _, l := range h.tower {
		h.params = append(h.params, l.Params()...)
	}
	return h
}

// model puts h above its embeddings, in the order of the spec's tables.
func (h *ctrHead) model() *nn.Model {
	return nn.MustModel([]*nn.Embedding{
		nn.NewEmbedding("first_order", 1, nn.CombinerNone),
		nn.NewEmbedding("embedding", h.dim, nn.CombinerNone),
	}, h)
}

// Name implements nn.Layer.
func (h *ctrHead) Name() string { return "ctr_head" }

// Params implements nn.Layer: the deep tower's, then the CIN's.
func (h *ctrHead) Params() []*nn.Param { return h.params }

func (h *ctrHead) width() int { return h.fields + h.fields*h.dim + h.dense }

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

// Forward implements nn.Layer; x is [N, F + F·D + dense].
func (h *ctrHead) Forward(x *nn.Tensor, train bool) *nn.Tensor {
	w, fd := h.width(), h.fields*h.dim
	if len(x.Shape) != 2 || x.Shape[1] != w || len(x.Data) != x.Shape[0]*w {
		panic(fmt.Sprintf("zoo: %s: input shape %v, want [N %d]", h.Name(), x.Shape, w))
	}
	rows := x.Shape[0]
	h.x = x
	h.e2 = fit(h.e2, rows, h.fields, h.dim)
	h.xd = fit(h.xd, rows, h.dense)
	for r := 0; r < rows; r++ {
		in := x.Data[r*w : (r+1)*w]
		copy(h.e2.Data[r*fd:(r+1)*fd], in[h.fields:h.fields+fd])
		copy(h.xd.Data[r*h.dense:(r+1)*h.dense], in[h.fields+fd:])
	}
	y := h.concat.Forward(h.xd, h.e2)
	for _, l := range h.tower {
		y = l.Forward(y, train)
	}
	h.logits = fit(h.logits, rows, 2)
	copy(h.logits.Data, y.Data)
	var fmy *nn.Tensor
	if h.fm != nil {
		fmy = h.fm.Forward(h.e2, train)
	}
	if h.cin != nil {
		fmy = h.cinOut.Forward(h.cin.Forward(h.e2, train), train) // [N, 1]
	}
	for r := 0; r < rows; r++ {
		var s float32
		for _, v := range x.Data[r*w : r*w+h.fields] {
			s += v
		}
		if fmy != nil {
			s += fmy.Data[r]
		}
		h.logits.Data[2*r+1] += s
	}
	return h.logits
}

// Backward implements nn.Layer: it accumulates the parameters' gradients
// and returns the gradient of the last Forward's input.
func (h *ctrHead) Backward(dlogits *nn.Tensor) *nn.Tensor {
	rows := h.e2.Shape[0]
	dy := dlogits
	for i := len(h.tower) - 1; i >= 0; i-- {
		dy = h.tower[i].Backward(dy)
	}
	dxs := h.concat.Backward(dy)
	dxd, de2 := dxs[0], dxs[1]
	// Logit 1's gradient is that of every first-order weight and of the
	// FM or CIN output.
	h.dfm = fit(h.dfm, rows, 1)
	for r := 0; r < rows; r++ {
		h.dfm.Data[r] = dlogits.Data[2*r+1]
	}
	if h.fm != nil {
		dv := h.fm.Backward(h.dfm)
		for i, v := range dv.Data {
			de2.Data[i] += v
		}
	}
	if h.cin != nil {
		dv := h.cin.Backward(h.cinOut.Backward(h.dfm))
		for i, v := range dv.Data {
			de2.Data[i] += v
		}
	}
	w, fd := h.width(), h.fields*h.dim
	h.dx = fit(h.dx, h.x.Shape...)
	for r := 0; r < rows; r++ {
		out := h.dx.Data[r*w : (r+1)*w]
		for f := 0; f < h.fields; f++ {
			out[f] = h.dfm.Data[r]
		}
		copy(out[h.fields:h.fields+fd], de2.Data[r*fd:(r+1)*fd])
		copy(out[h.fields+fd:], dxd.Data[r*h.dense:(r+1)*h.dense])
	}
	return h.dx
}

// CTRParts tells an exporter (internal/export) what the head is made of:
// its sizes, the deep tower's layers, and the FM or the CIN and its output
// layer (nil when absent). The returned layers are the head's own.
func (h *ctrHead) CTRParts() (fields, dim, dense int, tower []nn.Layer, fm *nn.FMInteraction, cin *nn.CIN, cinOut *nn.Dense) {
	return h.fields, h.dim, h.dense, h.tower, h.fm, h.cin, h.cinOut
}
