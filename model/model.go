// Package model defines the contract between a trainable network and the
// rest of the system (workers, parameter servers, evaluation): a Spec
// describes a model's input, output, embedding tables and default
// optimizer and builds fresh networks, each an *nn.Model (embeddings,
// possibly none, and a dense tower); a Registry maps names to Specs.
//
// There is deliberately no global registry: callers create one with
// NewRegistry and fill it (see package model/zoo for the built-in models),
// which keeps tests independent and avoids init-order side effects.
package model

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"sync"

	"elasticdl/nn"
)

// Spec describes a classification model.
type Spec struct {
	Name        string // unique key, e.g. "fashion_mnist.cnn"
	Description string
	InputShape  []int // per record, e.g. [28,28,1]; a batch is [N, InputShape...]
	NumClasses  int
	// Build returns a fresh, initialized network mapping [N, InputShape...]
	// to logits [N, NumClasses]. The same seed must give the same weights,
	// so that every worker can start from identical parameters. Its
	// embeddings are the ones Sparse describes, in order (their rows come
	// from the PS per batch); none when Sparse is nil.
	Build func(rng *rand.Rand) *nn.Model
	// Optimizer is the default optimizer spec string, e.g.
	// "adam:learning_rate=0.001"; it is parsed by the optimizer package.
	Optimizer string
	// Sparse, when set, makes this a recommender model with embeddings
	// (see SparseSpec): InputShape is then [dense features].
	Sparse *SparseSpec
	// Configure, when set, returns the spec built with parameters
	// (--model_params, see Params; never empty), e.g. a recommender's
	// field counts for another data set. It must reject keys it does not
	// know (ParamReader does). Nil: the model takes no parameters.
	Configure func(p Params) (Spec, error)
	// ParamsHelp says what Configure accepts, for `elasticdl zoo`.
	ParamsHelp string
}

// ErrInvalidSpec is wrapped by Register for malformed specs.
var ErrInvalidSpec = errors.New("invalid model spec")

// ErrUnknownModel is wrapped by Lookup for names that are not registered.
var ErrUnknownModel = errors.New("unknown model")

// ErrDuplicate is wrapped by Register when the name is taken.
var ErrDuplicate = errors.New("duplicate model name")

// Validate checks the static parts of a spec (it does not call Build).
func (s Spec) Validate() error {
	if strings.TrimSpace(s.Name) == "" {
		return fmt.Errorf("empty name: %w", ErrInvalidSpec)
	}
	if s.Build == nil {
		return fmt.Errorf("model %q: nil Build: %w", s.Name, ErrInvalidSpec)
	}
	if s.Sparse != nil {
		if err := s.Sparse.validate(s.Name); err != nil {
			return err
		}
		if len(s.InputShape) != 1 {
			return fmt.Errorf("model %q: sparse model InputShape %v, want [dense features]: %w", s.Name, s.InputShape, ErrInvalidSpec)
		}
	}
	if len(s.InputShape) == 0 {
		return fmt.Errorf("model %q: empty InputShape: %w", s.Name, ErrInvalidSpec)
	}
	for _, d := range s.InputShape {
		if d <= 0 {
			return fmt.Errorf("model %q: InputShape %v has a non-positive dimension: %w",
				s.Name, s.InputShape, ErrInvalidSpec)
		}
	}
	if s.NumClasses < 2 {
		return fmt.Errorf("model %q: NumClasses %d, want >= 2: %w", s.Name, s.NumClasses, ErrInvalidSpec)
	}
	return nil
}

// InputSize returns the number of float32 values per record.
func (s Spec) InputSize() int {
	n := 1
	for _, d := range s.InputShape {
		n *= d
	}
	return n
}

// BatchShape returns [n, InputShape...].
func (s Spec) BatchShape(n int) []int {
	return append([]int{n}, s.InputShape...)
}

// CheckBuild builds the network and runs one record through it (zero
// features, and id 0 in every categorical field of a sparse spec),
// verifying that its embeddings are the ones the spec describes and that
// the logits have shape [1, NumClasses]. It catches wiring mistakes (e.g.
// a Dense width that does not match the flattened conv output) that
// Validate cannot see. A panic inside Build or Forward is reported as an
// error.
func (s Spec) CheckBuild() (err error) {
	if err := s.Validate(); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("model %q: building or running the network: %v: %w", s.Name, r, ErrInvalidSpec)
		}
	}()
	net := s.Build(rand.New(rand.NewSource(1)))
	if net == nil {
		return fmt.Errorf("model %q: Build returned nil: %w", s.Name, ErrInvalidSpec)
	}
	tables, slots := s.Embeddings(), s.NumCategorical()
	embs := net.Embeddings()
	if len(embs) != len(tables) {
		return fmt.Errorf("model %q: net has %d embeddings, spec describes %d: %w",
			s.Name, len(embs), len(tables), ErrInvalidSpec)
	}
	ids := make([]int64, slots)
	for i, e := range embs {
		if e.Dim() != tables[i].Dim {
			return fmt.Errorf("model %q: embedding %d has dim %d, spec says %d: %w",
				s.Name, i, e.Dim(), tables[i].Dim, ErrInvalidSpec)
		}
		if _, err := e.SetBatch(ids, nil, slots); err != nil {
			return fmt.Errorf("model %q: %v: %w", s.Name, err, ErrInvalidSpec)
		}
	}
	y := net.Forward(nn.NewTensor(s.BatchShape(1)...), false)
	if want := []int{1, s.NumClasses}; !slices.Equal(y.Shape, want) {
		return fmt.Errorf("model %q: output shape %v, want %v: %w", s.Name, y.Shape, want, ErrInvalidSpec)
	}
	return nil
}

// clone copies the slice field so registry entries cannot be mutated
// through a returned Spec.
func (s Spec) clone() Spec {
	s.InputShape = slices.Clone(s.InputShape)
	if s.Sparse != nil {
		ss := *s.Sparse
		ss.Embeddings = slices.Clone(ss.Embeddings)
		s.Sparse = &ss
	}
	return s
}

// Registry maps model names to Specs. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	specs map[string]Spec
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{specs: make(map[string]Spec)}
}

// Register adds s. It fails on an invalid spec or a name already taken.
func (r *Registry) Register(s Spec) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("register model: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.specs[s.Name]; ok {
		return fmt.Errorf("register model %q: %w", s.Name, ErrDuplicate)
	}
	r.specs[s.Name] = s.clone()
	return nil
}

// Lookup returns the spec registered under name; for an unknown name the
// error lists the known ones.
func (r *Registry) Lookup(name string) (Spec, error) {
	r.mu.RLock()
	s, ok := r.specs[name]
	r.mu.RUnlock()
	if !ok {
		return Spec{}, fmt.Errorf("model %q (known: %s; or a model file, path/model.yaml): %w", name, strings.Join(r.Names(), ", "), ErrUnknownModel)
	}
	return s.clone(), nil
}

// Resolve returns the spec registered under name built with params
// (--model_params; empty: the registered spec). The spec is validated
// and its network built once (CheckBuild), so that parameters that do
// not fit are an error here, in the master, before anything is launched.
//
// A name ending in .yaml, .yml or .json is a declarative model file (see
// LoadDeclarative), which takes no parameters.
func (r *Registry) Resolve(name, params string) (Spec, error) {
	p, err := ParseParams(params)
	if err != nil {
		return Spec{}, fmt.Errorf("model %s: %w", name, err)
	}
	if IsDeclarative(name) {
		if len(p) > 0 {
			return Spec{}, fmt.Errorf("model file %s takes no parameters (write them into the file), got %q: %w", name, p.String(), ErrBadParams)
		}
		return LoadDeclarative(name)
	}
	s, err := r.Lookup(name)
	if err != nil {
		return Spec{}, err
	}
	if len(p) == 0 {
		return s, nil
	}
	if s.Configure == nil {
		return Spec{}, fmt.Errorf("model %s takes no parameters, got %q: %w", name, p.String(), ErrBadParams)
	}
	c, err := s.Configure(p)
	if err != nil {
		return Spec{}, fmt.Errorf("model %s: %w", name, err)
	}
	if c.Name != s.Name {
		return Spec{}, fmt.Errorf("model %s: Configure renamed it %q: %w", name, c.Name, ErrInvalidSpec)
	}
	if err := c.CheckBuild(); err != nil {
		return Spec{}, fmt.Errorf("model %s with %q: %w", name, p.String(), err)
	}
	return c.clone(), nil
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.specs))
	for n := range r.specs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Specs returns all registered specs, sorted by name.
func (r *Registry) Specs() []Spec {
	names := r.Names()
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Spec, 0, len(names))
	for _, n := range names {
		if s, ok := r.specs[n]; ok {
			out = append(out, s.clone())
		}
	}
	return out
}
