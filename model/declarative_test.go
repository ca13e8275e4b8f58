package model_test

import (
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"elasticdl/model"
	"elasticdl/model/zoo"
)

// The example model files declare the zoo's models: the same parameters,
// by name and shape, so that the checkpoints of either load into the other.
func TestDeclarativeMatchesZoo(t *testing.T) {
	for file, spec := range map[string]model.Spec{
		"../examples/declarative/cnn.yaml": zoo.CNNSpec(),
		"../examples/declarative/mlp.yaml": zoo.MLPSpec(),
	} {
		reg := model.NewRegistry()
		got, err := reg.Resolve(file, "")
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if !slices.Equal(got.InputShape, spec.InputShape) || got.NumClasses != spec.NumClasses || got.Optimizer != spec.Optimizer {
			t.Errorf("%s: %v %d %q, want %v %d %q", file, got.InputShape, got.NumClasses, got.Optimizer, spec.InputShape, spec.NumClasses, spec.Optimizer)
		}
		a := got.Build(rand.New(rand.NewSource(1))).Params()
		b := spec.Build(rand.New(rand.NewSource(1))).Params()
		if len(a) != len(b) {
			t.Fatalf("%s: %d parameters, %s has %d", file, len(a), spec.Name, len(b))
		}
		for i := range a {
			if a[i].Name != b[i].Name || !slices.Equal(a[i].Value.Shape, b[i].Value.Shape) {
				t.Errorf("%s: parameter %d is %s %v, %s has %s %v", file, i, a[i].Name, a[i].Value.Shape, spec.Name, b[i].Name, b[i].Value.Shape)
			}
		}
	}
}

func TestDeclarativeErrors(t *testing.T) {
	const head = "input_shape: [28, 28, 1]\nnum_classes: 10\n"
	for _, c := range []struct{ name, file, want string }{
		{"no input shape", "num_classes: 10\nlayers: [{flatten: {}}, {dense: {units: 10}}]\n", "input_shape: required"},
		{"no layers", head, "layers: none given"},
		{"unknown kind", head + "layers: [{lstm: {units: 3}}]\n", "layers[0] lstm: unknown layer kind"},
		{"dense on images", head + "layers: [{dense: {units: 10}}]\n", "layers[0] dense: needs flat records, gets [28 28 1]: put a flatten layer before it"},
		{"wrong logits", head + "layers: [{flatten: {}}, {dense: {units: 9}}]\n", "the last layer gives [9] per record, want [10] logits"},
		{"unknown setting", head + "layers: [{flatten: {}}, {dense: {units: 10, activation: relu}}]\n", `layers[1] dense: unknown setting "activation" (it takes units, init)`},
		{"missing setting", head + "layers: [{conv2d: {kernel: 3}}]\n", "layers[0] conv2d: filters: required"},
		{"bad padding", head + "layers: [{conv2d: {filters: 4, kernel: 3, padding: full}}]\n", `padding: "full" is not same or valid`},
		{"kernel too big", head + "layers: [{conv2d: {filters: 4, kernel: 30, padding: valid}}]\n", "a 30x30 kernel does not fit [28 28 1] records"},
		{"fractional", head + "layers: [{flatten: {}}, {dense: {units: 2.5}}]\n", "units: want a positive integer, got 2.5"},
		{"two kinds", head + "layers: [{flatten: {}, relu: {}}]\n", "layers[0]: want one kind per entry"},
		{"unknown key", head + "layer: []\n", `unknown field "layer"`},
		{"conv on flat", "input_shape: [13]\nnum_classes: 2\nlayers: [{conv2d: {filters: 2, kernel: 3}}]\n", "needs [height, width, channels] records, gets [13]"},
	} {
		path := filepath.Join(t.TempDir(), "m.yaml")
		if err := os.WriteFile(path, []byte(c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := model.NewRegistry().Resolve(path, "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	if _, err := model.NewRegistry().Resolve("../examples/declarative/mlp.yaml", "units=3"); !errors.Is(err, model.ErrBadParams) {
		t.Errorf("a model file with --model_params: %v, want ErrBadParams", err)
	}
	if _, err := model.NewRegistry().Resolve("/nonexistent/m.yaml", ""); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing model file: %v", err)
	}
}
