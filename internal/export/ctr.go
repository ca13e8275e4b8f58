package export

import (
	"fmt"

	"elasticdl/internal/onnx"
	"elasticdl/model"
	"elasticdl/nn"
)

// Names of a recommender's inputs.
const (
	InputDense = "dense"
	InputIDs   = "ids"
)

// maxDenseRows bounds the dense id→row table of a bounded id space (its
// rows beyond the checkpoint's are zeros): 2^20 rows is 32 MiB at dim 8.
const maxDenseRows = 1 << 20

// ctrHead is what model/zoo's CTR head says of itself (CTRParts).
type ctrHead interface {
	CTRParts() (fields, dim, dense int, tower []nn.Layer, fm *nn.FMInteraction, cin *nn.CIN, cinOut *nn.Dense)
}

// ctrONNX maps a recommender: its two embeddings (first-order weights, dim
// 1, and field embeddings) read from the checkpoint's tables, the deep
// tower over [dense, field embeddings], and the first-order sum (plus the
// FM term) added to logit 1, as model/zoo's ctrHead computes.
func ctrONNX(spec model.Spec, net *nn.Model, tables map[string]Table) (onnx.Model, error) {
	layers, embs := net.Layers(), net.Embeddings()
	head, ok := ctrHeadOf(layers)
	if !ok || len(embs) != 2 || len(spec.Sparse.Embeddings) != 2 {
		return onnx.Model{}, fmt.Errorf("model %s: embeddings with a tower other than the zoo's CTR head: %w", spec.Name, ErrUnsupported)
	}
	fields, dim, dense, tower, fm, cin, cinOut := head.CTRParts()
	for _, e := range embs {
		if e.Combiner() != nn.CombinerNone {
			return onnx.Model{}, fmt.Errorf("model %s: embedding %s with combiner %v: %w", spec.Name, e.Name(), e.Combiner(), ErrUnsupported)
		}
	}
	b := &graph{}
	b.g.Name = spec.Name
	b.g.Inputs = []onnx.Value{value(InputDense, []int{dense}), {Name: InputIDs, Type: onnx.Int64, Dims: []int64{-1, int64(fields)}, DimParam: batchDim}}
	lin, err := b.lookup(embs[0].Name(), tables[spec.Sparse.Embeddings[0].Table])
	if err != nil {
		return onnx.Model{}, fmt.Errorf("model %s: %w", spec.Name, err)
	}
	emb, err := b.lookup(embs[1].Name(), tables[spec.Sparse.Embeddings[1].Table])
	if err != nil {
		return onnx.Model{}, fmt.Errorf("model %s: %w", spec.Name, err)
	}
	b.node("ReduceSum", "first_order/sum", []string{lin, b.ints("first_order/axes", 1, 2)}, []string{"first_order/sum"}, onnx.IntAttr("keepdims", 0))
	wide := b.cur
	if fm != nil {
		b.fm(fm.Name(), emb)
		b.node("Add", "wide/add_fm", []string{wide, b.cur}, []string{"wide/sum"})
		wide = b.cur
	}
	if cin != nil {
		if err := b.cin(cin, cinOut, emb, fields, dim); err != nil {
			return onnx.Model{}, fmt.Errorf("model %s: layer %s: %w", spec.Name, cin.Name(), err)
		}
		b.node("Add", "wide/add_cin", []string{wide, b.cur}, []string{"wide/sum"})
		wide = b.cur
	}
	b.node("Flatten", "embedding/flatten", []string{emb}, []string{"embedding/flat"}, onnx.IntAttr("axis", 1))
	b.node("Concat", "concat", []string{InputDense, b.cur}, []string{"concat"}, onnx.IntAttr("axis", 1))
	b.shape = []int{dense + fields*dim}
	for _, l := range tower {
		if err := b.layer(l); err != nil {
			return onnx.Model{}, fmt.Errorf("model %s: layer %s: %w", spec.Name, l.Name(), err)
		}
	}
	deep := b.cur
	// logits = deep + wide·[0, 1]: the wide sum goes to logit 1 only.
	b.node("Unsqueeze", "wide/column", []string{wide, b.ints("wide/axes", 1)}, []string{"wide/column"})
	unit := b.init("wide/logit_1", []int{1, 2}, []float32{0, 1})
	b.node("Mul", "wide/to_logit_1", []string{b.cur, unit}, []string{"wide/logits"})
	b.node("Add", "ctr_head", []string{deep, b.cur}, []string{"ctr_head"})
	b.shape = []int{spec.NumClasses}
	m := b.outputs(spec)
	if b.ml {
		m.Imports = []onnx.OpsetImport{{Domain: onnx.MLDomain, Version: onnx.MLOpset}}
	}
	return m, nil
}

// ctrHeadOf finds the CTR head, the tower's one layer.
func ctrHeadOf(layers []nn.Layer) (ctrHead, bool) {
	if len(layers) != 1 {
		return nil, false
	}
	h, ok := layers[0].(ctrHead)
	return h, ok
}

// lookup maps the ids input to rows of t: [N, fields, dim], unseen ids
// to a zeros row (see docs/design-export.md). Bounded ids index a dense
// table of B+1 rows, B one past the largest id held, whose rows of ids not
// held and row B (every id outside [0, B)) are zeros; other (hashed) ids
// go through ai.onnx.ml's LabelEncoder to their row, or the zeros row
// after the last.
func (b *graph) lookup(name string, t Table) (string, error) {
	var bound int64
	if len(t.IDs) > 0 {
		bound = t.IDs[len(t.IDs)-1] + 1
	}
	if len(t.IDs) > 0 && t.IDs[0] < 0 {
		return "", fmt.Errorf("embedding %s: negative id %d in the checkpoint", name, t.IDs[0])
	}
	if bound > max(4*int64(len(t.IDs)), maxDenseRows) {
		b.hashedIndex(name, t)
	} else {
		b.boundedIndex(name, t, bound)
	}
	idx := b.cur
	b.node("Gather", name, []string{name + "/table", idx}, []string{name}, onnx.IntAttr("axis", 0))
	return name, nil
}

// boundedIndex adds the dense table and the index of each id into it.
func (b *graph) boundedIndex(name string, t Table, bound int64) {
	dense := make([]float32, (bound+1)*int64(t.Dim))
	for i, id := range t.IDs {
		copy(dense[id*int64(t.Dim):], t.Rows[i*t.Dim:(i+1)*t.Dim])
	}
	b.init(name+"/table", []int{int(bound) + 1, t.Dim}, dense)
	lo, hi := b.ints(name+"/zero", 0), b.ints(name+"/bound", bound)
	b.node("GreaterOrEqual", name+"/ge", []string{InputIDs, lo}, []string{name + "/ge"})
	b.node("Less", name+"/lt", []string{InputIDs, hi}, []string{name + "/lt"})
	b.node("And", name+"/in_range", []string{name + "/ge", name + "/lt"}, []string{name + "/in_range"})
	b.node("Where", name+"/index", []string{name + "/in_range", InputIDs, hi}, []string{name + "/index"})
}

// hashedIndex adds the table's rows and a zeros row after them, and a
// LabelEncoder from each id held to its row (any other id: the zeros row).
func (b *graph) hashedIndex(name string, t Table) {
	n := int64(len(t.IDs))
	b.init(name+"/table", []int{int(n) + 1, t.Dim}, append(append([]float32(nil), t.Rows...), make([]float32, t.Dim)...))
	rows := make([]int64, n)
	for i := range rows {
		rows[i] = int64(i)
	}
	b.g.Nodes = append(b.g.Nodes, onnx.Node{Op: "LabelEncoder", Domain: onnx.MLDomain, Name: name + "/index",
		Inputs: []string{InputIDs}, Outputs: []string{name + "/index"},
		Attrs: []onnx.Attr{onnx.IntsAttr("keys_int64s", t.IDs...), onnx.IntsAttr("values_int64s", rows...), onnx.IntAttr("default_int64", n)}})
	b.cur = name + "/index"
	b.ml = true
}

// fm is the factorization machine's pairwise term over emb [N, F, D]:
// ½ Σ_d ((Σ_f v)² − Σ_f v²), [N].
func (b *graph) fm(name, emb string) {
	fields := b.ints(name+"/fields_axis", 1)
	b.node("ReduceSum", name+"/sum", []string{emb, fields}, []string{name + "/sum"}, onnx.IntAttr("keepdims", 0))
	b.node("Mul", name+"/sum_sq", []string{name + "/sum", name + "/sum"}, []string{name + "/sum_sq"})
	b.node("Mul", name+"/sq", []string{emb, emb}, []string{name + "/sq"})
	b.node("ReduceSum", name+"/sq_sum", []string{name + "/sq", fields}, []string{name + "/sq_sum"}, onnx.IntAttr("keepdims", 0))
	b.node("Sub", name+"/diff", []string{name + "/sum_sq", name + "/sq_sum"}, []string{name + "/diff"})
	b.node("ReduceSum", name+"/dims", []string{name + "/diff", fields}, []string{name + "/dims"}, onnx.IntAttr("keepdims", 0))
	half := b.init(name+"/half", nil, []float32{0.5})
	b.node("Mul", name, []string{name + "/dims", half}, []string{name})
}

// cin is xDeepFM's compressed interaction network over x0 = emb
// [N, F, D] and its output layer, [N]: per layer k, Z = X^{k-1} ⊗ X⁰
// ([N, P, F, D] by broadcasting, reshaped to [N, P·F, D]), X^k = W^k Z
// (MatMul broadcasts the [H, P·F] kernel over the batch), pooled over D;
// the pools concatenated go through cinOut.
func (b *graph) cin(c *nn.CIN, out *nn.Dense, emb string, fields, dim int) error {
	name := c.Name()
	x0 := name + "/x0"
	b.node("Unsqueeze", x0, []string{emb, b.ints(name+"/axis_1", 1)}, []string{x0})
	prev, xprev, width := fields, emb, 0
	var pools []string
	for k, p := range c.Params() {
		h := p.Value.Shape[0]
		if p.Value.Shape[1] != prev*fields {
			return fmt.Errorf("kernel %s of shape %v after %d maps of %d fields", p.Name, p.Value.Shape, prev, fields)
		}
		at := fmt.Sprintf("%s/layer_%d", name, k)
		b.node("Unsqueeze", at+"/xprev", []string{xprev, b.ints(at+"/axis_2", 2)}, []string{at + "/xprev"})
		b.node("Mul", at+"/outer", []string{at + "/xprev", x0}, []string{at + "/outer"})
		b.node("Reshape", at+"/z", []string{at + "/outer", b.ints(at+"/z_shape", 0, int64(prev*fields), int64(dim))}, []string{at + "/z"})
		w := b.init(p.Name, p.Value.Shape, p.Value.Data)
		b.node("MatMul", at, []string{w, at + "/z"}, []string{at})
		b.node("ReduceSum", at+"/pool", []string{at, b.ints(at+"/axis_d", 2)}, []string{at + "/pool"}, onnx.IntAttr("keepdims", 0))
		pools = append(pools, at+"/pool")
		prev, xprev, width = h, at, width+h
	}
	b.node("Concat", name+"/pools", pools, []string{name + "/pools"}, onnx.IntAttr("axis", 1))
	b.shape = []int{width}
	if err := b.dense(out.Name(), out); err != nil {
		return fmt.Errorf("%s: %w", out.Name(), err)
	}
	b.node("Squeeze", out.Name()+"/squeeze", []string{b.cur, b.ints(name+"/axis_out", 1)}, []string{out.Name() + "/squeezed"})
	return nil
}

// ints adds a 1-D int64 initializer (axes; a bound broadcasts as [1])
// and returns its name.
func (b *graph) ints(name string, v ...int64) string {
	b.g.Initializers = append(b.g.Initializers, onnx.Tensor{Name: name, Type: onnx.Int64, Dims: []int64{int64(len(v))}, Int64s: v})
	return name
}
