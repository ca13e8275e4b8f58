package model

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"elasticdl/nn"
)

// A declarative model is a YAML (or JSON) file that lists a dense model's
// layers: what --model_def=path/model.yaml trains, with no Go. Every
// worker reads the same file, so it must be at the same path on every
// instance (in the image, or on a volume on Kubernetes).
//
//	input_shape: [28, 28, 1]
//	num_classes: 10
//	optimizer: adam:learning_rate=0.002,decay=0.001
//	layers:
//	  - conv2d: {filters: 16, kernel: 3, padding: same}
//	  - relu: {}
//	  - maxpool2d: {size: 2}
//	  - flatten: {}
//	  - dense: {units: 128}
//	  - relu: {}
//	  - dense: {units: 10}
//
// Layers: standardize {mean, std}; conv2d {filters, kernel, stride (1),
// padding (same|valid, default same)}; maxpool2d {size, stride (size)};
// flatten; dense {units, init (he_uniform|glorot_uniform, default
// he_uniform)}; relu. Each layer's input size follows from the one before;
// the last must give num_classes logits. Layers are named like Keras's
// (conv2d_1, dense_2, ...), which is what the checkpoints call them.
type declarativeFile struct {
	Name        string           `json:"name"`
	Description string           `json:"description"`
	InputShape  []int            `json:"input_shape"`
	NumClasses  int              `json:"num_classes"`
	Optimizer   string           `json:"optimizer"`
	Layers      []map[string]any `json:"layers"`
}

// IsDeclarative reports whether a --model_def names a model file rather
// than a registered model.
func IsDeclarative(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// LoadDeclarative reads a declarative model file and returns its spec,
// checking that the layers fit together (it builds the model once).
func LoadDeclarative(path string) (Spec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Spec{}, fmt.Errorf("model file: %w", err)
	}
	var f declarativeFile
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		return Spec{}, fmt.Errorf("model file %s: %w", path, err)
	}
	spec, err := f.spec(path)
	if err != nil {
		return Spec{}, fmt.Errorf("model file %s: %w", path, err)
	}
	return spec, nil
}

func (f declarativeFile) spec(path string) (Spec, error) {
	if f.Name == "" {
		f.Name = path
	}
	if f.Optimizer == "" {
		f.Optimizer = "adam:learning_rate=0.001"
	}
	if len(f.Layers) == 0 {
		return Spec{}, errors.New("layers: none given")
	}
	s := Spec{Name: f.Name, Description: f.Description, InputShape: f.InputShape, NumClasses: f.NumClasses, Optimizer: f.Optimizer}
	if s.Description == "" {
		s.Description = fmt.Sprintf("declarative model of %d layers (%s)", len(f.Layers), path)
	}
	// Check the layers once, with their shapes, so that a bad file fails
	// at the master, naming the layer; Build then cannot fail.
	if _, err := f.build(rand.New(rand.NewSource(0))); err != nil {
		return Spec{}, err
	}
	s.Build = func(rng *rand.Rand) *nn.Model {
		m, err := f.build(rng)
		if err != nil {
			panic(err) // checked above
		}
		return m
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// build makes the layers, following the per-record shape through them.
func (f declarativeFile) build(rng *rand.Rand) (*nn.Model, error) {
	if len(f.InputShape) == 0 {
		return nil, errors.New("input_shape: required, e.g. [28, 28, 1] (height, width, channels) or [13] (features)")
	}
	shape := append([]int(nil), f.InputShape...)
	counts := map[string]int{}
	var layers []nn.Layer
	for i, entry := range f.Layers {
		if len(entry) != 1 {
			return nil, fmt.Errorf("layers[%d]: want one kind per entry, e.g. {dense: {units: 10}}, got %d keys", i, len(entry))
		}
		for kind, v := range entry {
			args, ok := v.(map[string]any)
			if v != nil && !ok {
				return nil, fmt.Errorf("layers[%d] %s: want a map of its settings ({} for none), got %v", i, kind, v)
			}
			counts[kind]++
			name := fmt.Sprintf("%s_%d", kind, counts[kind])
			l, out, err := declaredLayer(kind, name, layerArgs{args: args}, shape, rng)
			if err != nil {
				return nil, fmt.Errorf("layers[%d] %s: %w", i, kind, err)
			}
			layers, shape = append(layers, l), out
		}
	}
	if len(shape) != 1 || shape[0] != f.NumClasses {
		return nil, fmt.Errorf("the last layer gives %v per record, want [%d] logits (num_classes)", shape, f.NumClasses)
	}
	return nn.NewModel(nil, layers...)
}

// layerArgs reads one layer's settings, remembering what it read so that
// unknown keys are refused.
type layerArgs struct {
	args map[string]any
	used []string
	err  error
}

func (a *layerArgs) num(key string, def float64, required bool) float64 {
	a.used = append(a.used, key)
	v, ok := a.args[key]
	if !ok {
		if required && a.err == nil {
			a.err = fmt.Errorf("%s: required", key)
		}
		return def
	}
	f, ok := v.(float64)
	if !ok && a.err == nil {
		a.err = fmt.Errorf("%s: want a number, got %v", key, v)
	}
	return f
}

func (a *layerArgs) count(key string, def int, required bool) int {
	f := a.num(key, float64(def), required)
	if (f != float64(int(f)) || f < 1) && a.err == nil {
		a.err = fmt.Errorf("%s: want a positive integer, got %v", key, f)
	}
	return int(f)
}

func (a *layerArgs) str(key, def string) string {
	a.used = append(a.used, key)
	v, ok := a.args[key]
	if !ok {
		return def
	}
	s, ok := v.(string)
	if !ok && a.err == nil {
		a.err = fmt.Errorf("%s: want a string, got %v", key, v)
	}
	return s
}

// done is the first error, or one naming a key the layer does not take.
func (a *layerArgs) done() error {
	if a.err != nil {
		return a.err
	}
	for k := range a.args {
		known := false
		for _, u := range a.used {
			known = known || u == k
		}
		if !known {
			takes := strings.Join(a.used, ", ")
			if takes == "" {
				takes = "none"
			}
			return fmt.Errorf("unknown setting %q (it takes %s)", k, takes)
		}
	}
	return nil
}

// declaredLayer makes one layer for records of shape in, and says the
// shape it gives.
func declaredLayer(kind, name string, a layerArgs, in []int, rng *rand.Rand) (nn.Layer, []int, error) {
	switch kind {
	case "relu":
		return nn.NewReLU(name), in, a.done()
	case "flatten":
		n := 1
		for _, d := range in {
			n *= d
		}
		return nn.NewFlatten(name), []int{n}, a.done()
	case "standardize":
		return declaredStandardize(name, &a, in)
	case "dense":
		return declaredDense(name, &a, in, rng)
	case "conv2d":
		return declaredConv2D(name, &a, in, rng)
	case "maxpool2d":
		return declaredMaxPool2D(name, &a, in)
	}
	return nil, nil, fmt.Errorf("unknown layer kind (want standardize, conv2d, maxpool2d, flatten, dense or relu)")
}

// needImage checks that records of shape in are images.
func needImage(in []int) error {
	if len(in) != 3 {
		return fmt.Errorf("needs [height, width, channels] records, gets %v", in)
	}
	return nil
}

// declaredStandardize is a standardize layer: mean and std, both required.
func declaredStandardize(name string, a *layerArgs, in []int) (nn.Layer, []int, error) {
	mean, std := a.num("mean", 0, true), a.num("std", 1, true)
	if err := a.done(); err != nil {
		return nil, nil, err
	}
	if !(std > 0) {
		return nil, nil, fmt.Errorf("std: want a positive number, got %v", std)
	}
	return nn.NewStandardize(name, float32(mean), float32(std)), in, nil
}

// declaredDense is a dense layer on flat records: units, and init
// (he_uniform, the default, or glorot_uniform).
func declaredDense(name string, a *layerArgs, in []int, rng *rand.Rand) (nn.Layer, []int, error) {
	units := a.count("units", 0, true)
	init := a.str("init", "he_uniform")
	if err := a.done(); err != nil {
		return nil, nil, err
	}
	if len(in) != 1 {
		return nil, nil, fmt.Errorf("needs flat records, gets %v: put a flatten layer before it", in)
	}
	d := nn.NewDense(name, in[0], units, rng)
	switch init {
	case "he_uniform":
	case "glorot_uniform":
		d.Initialize(nn.GlorotUniform, rng)
	default:
		return nil, nil, fmt.Errorf("init: %q is not he_uniform or glorot_uniform", init)
	}
	return d, []int{units}, nil
}

// declaredConv2D is a square-kernel convolution on images: filters and
// kernel, stride (1) and padding (same or valid).
func declaredConv2D(name string, a *layerArgs, in []int, rng *rand.Rand) (nn.Layer, []int, error) {
	filters, kernel := a.count("filters", 0, true), a.count("kernel", 0, true)
	stride := a.count("stride", 1, false)
	padding := a.str("padding", "same")
	if err := a.done(); err != nil {
		return nil, nil, err
	}
	if err := needImage(in); err != nil {
		return nil, nil, err
	}
	var p nn.Padding
	var h, w int
	switch padding {
	case "same":
		p, h, w = nn.Same, (in[0]+stride-1)/stride, (in[1]+stride-1)/stride
	case "valid":
		p, h, w = nn.Valid, (in[0]-kernel)/stride+1, (in[1]-kernel)/stride+1
	default:
		return nil, nil, fmt.Errorf("padding: %q is not same or valid", padding)
	}
	if h < 1 || w < 1 {
		return nil, nil, fmt.Errorf("a %dx%d kernel does not fit %v records", kernel, kernel, in)
	}
	return nn.NewConv2D(name, in[2], filters, kernel, kernel, stride, p, rng), []int{h, w, filters}, nil
}

// declaredMaxPool2D is a square max-pooling on images: size, and stride
// (size).
func declaredMaxPool2D(name string, a *layerArgs, in []int) (nn.Layer, []int, error) {
	size := a.count("size", 0, true)
	stride := a.count("stride", size, false)
	if err := a.done(); err != nil {
		return nil, nil, err
	}
	if err := needImage(in); err != nil {
		return nil, nil, err
	}
	h, w := (in[0]-size)/stride+1, (in[1]-size)/stride+1
	if in[0] < size || in[1] < size {
		return nil, nil, fmt.Errorf("a %dx%d window does not fit %v records", size, size, in)
	}
	return nn.NewMaxPool2D(name, size, stride), []int{h, w, in[2]}, nil
}
