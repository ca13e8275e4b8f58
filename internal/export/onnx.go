// Package export turns a trained model (a model.Spec and the parameters of
// a checkpoint) into a file another runtime serves: ONNX, opset 17.
//
// The graph takes the records as the data source gives them (images NHWC,
// float32 in [0,1]; see docs/design-export.md for the names and shapes) and
// gives "logits" and "probabilities" (softmax over the last axis), which
// is what `elasticdl predict` writes. Each layer maps to ONNX operators by
// its Go type; a layer without a mapping is refused by name.
package export

import (
	"errors"
	"fmt"

	"elasticdl/internal/onnx"
	"elasticdl/model"
	"elasticdl/nn"
)

// Names of the graph's inputs and outputs.
const (
	InputFeatures = "features"
	OutputLogits  = "logits"
	OutputProbs   = "probabilities"
	batchDim      = "batch"
)

// ErrUnsupported is wrapped when a model has a layer (or a part) with no
// ONNX mapping.
var ErrUnsupported = errors.New("no ONNX mapping")

// graph is the graph being built: the last value's name and per-record
// shape, and whether that value is NCHW (ONNX's convolution layout) rather
// than the data's NHWC.
type graph struct {
	g     onnx.Graph
	cur   string
	shape []int // per record, in the current layout
	nchw  bool
	ml    bool // a node of the ai.onnx.ml domain is in
}

// ONNX maps net, a network of spec holding the parameters to export, and
// its embedding tables (a recommender's; nil for others) to an ONNX model.
func ONNX(spec model.Spec, net *nn.Model, tables map[string]Table) (onnx.Model, error) {
	if len(net.Embeddings()) > 0 {
		if spec.Sparse == nil {
			return onnx.Model{}, fmt.Errorf("model %s: embeddings without a sparse spec: %w", spec.Name, ErrUnsupported)
		}
		return ctrONNX(spec, net, tables)
	}
	b := &graph{cur: InputFeatures, shape: append([]int(nil), spec.InputShape...)}
	b.g.Name = spec.Name
	b.g.Inputs = []onnx.Value{value(InputFeatures, spec.InputShape)}
	for _, l := range net.Layers() {
		if err := b.layer(l); err != nil {
			return onnx.Model{}, fmt.Errorf("model %s: layer %s: %w", spec.Name, l.Name(), err)
		}
	}
	if len(b.shape) != 1 || b.shape[0] != spec.NumClasses {
		return onnx.Model{}, fmt.Errorf("model %s: the layers give %v per record, want [%d]", spec.Name, b.shape, spec.NumClasses)
	}
	return b.outputs(spec), nil
}

// outputs names the current value logits, adds the softmax and returns
// the model.
func (b *graph) outputs(spec model.Spec) onnx.Model {
	b.node("Identity", "logits", []string{b.cur}, []string{OutputLogits})
	b.node("Softmax", "softmax", []string{OutputLogits}, []string{OutputProbs}, onnx.IntAttr("axis", -1))
	b.g.Outputs = []onnx.Value{value(OutputLogits, b.shape), value(OutputProbs, b.shape)}
	return onnx.Model{Producer: "elasticdl", Doc: spec.Description, Graph: b.g}
}

// value is a float32 value of shape [batch, record...].
func value(name string, record []int) onnx.Value {
	dims := []int64{-1}
	for _, d := range record {
		dims = append(dims, int64(d))
	}
	return onnx.Value{Name: name, Type: onnx.Float, Dims: dims, DimParam: batchDim}
}

// node appends a node whose single output becomes the current value.
func (b *graph) node(op, name string, in, out []string, attrs ...onnx.Attr) {
	b.g.Nodes = append(b.g.Nodes, onnx.Node{Op: op, Name: name, Inputs: in, Outputs: out, Attrs: attrs})
	b.cur = out[0]
}

// init adds a float32 initializer and returns its name.
func (b *graph) init(name string, dims []int, data []float32) string {
	d := make([]int64, len(dims))
	for i, v := range dims {
		d[i] = int64(v)
	}
	b.g.Initializers = append(b.g.Initializers, onnx.Tensor{Name: name, Dims: d, Floats: data})
	return name
}

// layer maps one tower layer.
func (b *graph) layer(l nn.Layer) error {
	name := l.Name()
	switch l := l.(type) {
	case *nn.ReLU:
		b.node("Relu", name, []string{b.cur}, []string{name})
	case *nn.Standardize:
		mean, inv := l.Affine()
		m := b.init(name+"/mean", nil, []float32{mean})
		s := b.init(name+"/inv_std", nil, []float32{inv})
		b.node("Sub", name+"/sub", []string{b.cur, m}, []string{name + "/centred"})
		b.node("Mul", name, []string{b.cur, s}, []string{name})
	case *nn.Flatten:
		b.toNHWC(name)
		n := 1
		for _, d := range b.shape {
			n *= d
		}
		b.node("Flatten", name, []string{b.cur}, []string{name}, onnx.IntAttr("axis", 1))
		b.shape = []int{n}
	case *nn.Dense:
		return b.dense(name, l)
	case *nn.Conv2D:
		return b.conv(name, l)
	case *nn.MaxPool2D:
		return b.pool(name, l)
	default:
		return fmt.Errorf("%T: %w", l, ErrUnsupported)
	}
	return nil
}

// dense is Gemm(x, kernel [in,out], bias): the kernel's layout is Gemm's B.
func (b *graph) dense(name string, d *nn.Dense) error {
	k, bias := d.Kernel().Value, d.Bias().Value
	if len(b.shape) != 1 || b.shape[0] != k.Shape[0] {
		return fmt.Errorf("dense of %v inputs on records of shape %v", k.Shape[0], b.shape)
	}
	w := b.init(d.Kernel().Name, k.Shape, k.Data)
	c := b.init(d.Bias().Name, bias.Shape, bias.Data)
	b.node("Gemm", name, []string{b.cur, w, c}, []string{name})
	b.shape = []int{k.Shape[1]}
	return nil
}

// conv is Conv with the kernel permuted from [kH,kW,in,out] to ONNX's
// [out,in,kH,kW] and TensorFlow's "same" split as explicit pads.
func (b *graph) conv(name string, c *nn.Conv2D) error {
	b.toNCHW(name)
	k := c.Kernel().Value
	kh, kw, inC, outC := k.Shape[0], k.Shape[1], k.Shape[2], k.Shape[3]
	if len(b.shape) != 3 || b.shape[0] != inC {
		return fmt.Errorf("conv of %d channels on records of shape %v (CHW)", inC, b.shape)
	}
	_, _, stride, _ := c.Geometry()
	t, bt, oh := c.Padding(b.shape[1], kh)
	l, r, ow := c.Padding(b.shape[2], kw)
	if oh < 1 || ow < 1 {
		return fmt.Errorf("a %dx%d kernel does not fit records of shape %v (CHW)", kh, kw, b.shape)
	}
	w := b.init(c.Kernel().Name, []int{outC, inC, kh, kw}, KernelOIHW(k.Data, kh, kw, inC, outC))
	bias := b.init(c.Bias().Name, c.Bias().Value.Shape, c.Bias().Value.Data)
	b.node("Conv", name, []string{b.cur, w, bias}, []string{name},
		onnx.IntsAttr("kernel_shape", int64(kh), int64(kw)),
		onnx.IntsAttr("strides", int64(stride), int64(stride)),
		onnx.IntsAttr("pads", int64(t), int64(l), int64(bt), int64(r)),
	)
	b.shape = []int{outC, oh, ow}
	return nil
}

// pool is MaxPool without padding (floor), as nn.MaxPool2D.
func (b *graph) pool(name string, p *nn.MaxPool2D) error {
	b.toNCHW(name)
	size, stride := p.Window()
	if len(b.shape) != 3 || b.shape[1] < size || b.shape[2] < size {
		return fmt.Errorf("a %dx%d window on records of shape %v (CHW)", size, size, b.shape)
	}
	b.node("MaxPool", name, []string{b.cur}, []string{name},
		onnx.IntsAttr("kernel_shape", int64(size), int64(size)),
		onnx.IntsAttr("strides", int64(stride), int64(stride)),
	)
	b.shape = []int{b.shape[0], (b.shape[1]-size)/stride + 1, (b.shape[2]-size)/stride + 1}
	return nil
}

// toNCHW transposes an NHWC image to NCHW, once, before the first
// convolution or pooling.
func (b *graph) toNCHW(name string) {
	if b.nchw || len(b.shape) != 3 {
		return
	}
	b.node("Transpose", name+"/to_nchw", []string{b.cur}, []string{name + "/nchw"}, onnx.IntsAttr("perm", 0, 3, 1, 2))
	b.shape = []int{b.shape[2], b.shape[0], b.shape[1]}
	b.nchw = true
}

// toNHWC transposes back before a flatten, so that the flat order is the
// one the Go model's dense kernel was trained on.
func (b *graph) toNHWC(name string) {
	if !b.nchw {
		return
	}
	b.node("Transpose", name+"/to_nhwc", []string{b.cur}, []string{name + "/nhwc"}, onnx.IntsAttr("perm", 0, 2, 3, 1))
	b.shape = []int{b.shape[1], b.shape[2], b.shape[0]}
	b.nchw = false
}

// KernelOIHW permutes a [kH,kW,in,out] kernel to [out,in,kH,kW].
func KernelOIHW(k []float32, kh, kw, in, out int) []float32 {
	w := make([]float32, len(k))
	for y := 0; y < kh; y++ {
		for x := 0; x < kw; x++ {
			for i := 0; i < in; i++ {
				for o := 0; o < out; o++ {
					w[((o*in+i)*kh+y)*kw+x] = k[((y*kw+x)*in+i)*out+o]
				}
			}
		}
	}
	return w
}
