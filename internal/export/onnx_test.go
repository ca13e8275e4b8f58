package export

import (
	"errors"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"elasticdl/internal/export/onnxcheck"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/nn"
)

// imageSpecs are the dense/image models: the zoo's and the YAML examples.
func imageSpecs(t *testing.T) []model.Spec {
	t.Helper()
	specs := []model.Spec{zoo.MLPSpec(), zoo.CNNSpec(), zoo.CNNWideSpec()}
	paths, err := filepath.Glob("../../examples/declarative/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no YAML models: %v", err)
	}
	for _, p := range paths {
		s, err := model.LoadDeclarative(p)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	return specs
}

func ops(g []string) string { return strings.Join(g, " ") }

func TestONNXOps(t *testing.T) {
	cnn := "Transpose Conv Relu MaxPool Conv Relu MaxPool Transpose Flatten Gemm Relu Gemm Identity Softmax"
	mlp := "Sub Mul Flatten Gemm Relu Gemm Identity Softmax"
	want := map[string]string{
		zoo.FashionMNISTMLP: mlp, zoo.FashionMNISTCNN: cnn, zoo.FashionMNISTCNNWide: cnn,
		"mlp_from_yaml": mlp, "cnn_from_yaml": cnn,
	}
	for _, spec := range imageSpecs(t) {
		m, err := ONNX(spec, spec.Build(rand.New(rand.NewSource(1))), nil)
		if err != nil {
			t.Fatalf("%s: %v", spec.Name, err)
		}
		var got []string
		for _, n := range m.Graph.Nodes {
			got = append(got, n.Op)
		}
		if ops(got) != want[spec.Name] {
			t.Errorf("%s: ops %q, want %q", spec.Name, ops(got), want[spec.Name])
		}
		if n := len(spec.Build(rand.New(rand.NewSource(1))).Params()); len(m.Graph.Initializers) < n {
			t.Errorf("%s: %d initializers, want at least its %d parameters", spec.Name, len(m.Graph.Initializers), n)
		}
	}
}

func TestKernelOIHW(t *testing.T) {
	// [kH=1,kW=2,in=2,out=3]: value = 100*y + 10*x... encoded as (x,i,o).
	k := make([]float32, 12)
	for x := 0; x < 2; x++ {
		for i := 0; i < 2; i++ {
			for o := 0; o < 3; o++ {
				k[(x*2+i)*3+o] = float32(100*o + 10*i + x)
			}
		}
	}
	w := KernelOIHW(k, 1, 2, 2, 3)
	want := []float32{0, 1, 10, 11, 100, 101, 110, 111, 200, 201, 210, 211}
	if !slices.Equal(w, want) {
		t.Errorf("OIHW %v, want %v", w, want)
	}
}

// oddLayer is a layer with no ONNX mapping.
type oddLayer struct{ *nn.ReLU }

func (oddLayer) Name() string { return "odd_1" }

func TestRefusesUnmappedLayer(t *testing.T) {
	spec := model.Spec{Name: "odd", InputShape: []int{4}, NumClasses: 4}
	net := nn.MustModel(nil, oddLayer{nn.NewReLU("x")})
	_, err := ONNX(spec, net, nil)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "odd_1") || !strings.Contains(err.Error(), "oddLayer") {
		t.Errorf("error %v, want one naming the layer and its type, wrapping ErrUnsupported", err)
	}
}

// TestONNXRuntime exports every image model with random weights, checks
// the file with python3-onnx's checker and runs it in onnxruntime:
// probabilities within 1e-5 of the Go forward pass's softmax.
func TestONNXRuntime(t *testing.T) {
	tools := onnxcheck.Need(t, "../..")
	const n = 64
	for _, spec := range imageSpecs(t) {
		t.Run(spec.Name, func(t *testing.T) {
			net := spec.Build(rand.New(rand.NewSource(7)))
			m, err := ONNX(spec, net, nil)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "model.onnx")
			if err := os.WriteFile(path, m.Marshal(), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := tools.Check(path); err != nil {
				t.Fatal(err)
			}
			x := nn.NewTensor(spec.BatchShape(n)...)
			rng := rand.New(rand.NewSource(3))
			for i := range x.Data {
				x.Data[i] = rng.Float32()
			}
			got, err := tools.Run(path, OutputProbs, []onnxcheck.Input{{Name: InputFeatures, Dims: x.Shape, Floats: x.Data}})
			if err != nil {
				t.Fatal(err)
			}
			want := Softmax(net.Forward(x, false).Data, spec.NumClasses)
			if d := MaxAbsDiff(got, want); !(d <= 1e-5) {
				t.Errorf("max |onnxruntime - Go| = %g over %d records, want <= 1e-5", d, n)
			} else {
				t.Logf("max |onnxruntime - Go| = %.3g over %d records", d, n)
			}
		})
	}
}

// Softmax is the row-wise softmax of [N,k] logits, as predict computes it.
func Softmax(logits []float32, k int) []float32 {
	out := make([]float32, 0, len(logits))
	for r := 0; r+k <= len(logits); r += k {
		out = nn.AppendSoftmax(out, logits[r:r+k])
	}
	return out
}

// MaxAbsDiff is max |a-b|, +Inf when the lengths differ.
func MaxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}
