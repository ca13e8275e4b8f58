package model

import (
	"errors"
	"math/rand"
	"strings"
	"testing"

	"elasticdl/nn"
)

func TestParseParams(t *testing.T) {
	p, err := ParseParams(" fields = 62 ;dense=23; ;")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.String(); got != "dense=23;fields=62" {
		t.Errorf("String() = %q", got)
	}
	if p, err := ParseParams(""); err != nil || len(p) != 0 {
		t.Errorf("empty: %v, %v", p, err)
	}
	for _, bad := range []string{"fields", "=3", "a=1;a=2"} {
		if _, err := ParseParams(bad); !errors.Is(err, ErrBadParams) {
			t.Errorf("ParseParams(%q) = %v, want ErrBadParams", bad, err)
		}
	}
}

// widthSpec is a dense model whose hidden width is a parameter.
func widthSpec(width int) Spec {
	s := tinySpec("w.model")
	s.Build = func(rng *rand.Rand) *nn.Model {
		return nn.MustModel(nil, nn.NewFlatten("flatten"), nn.NewDense("dense_1", 4, width, rng), nn.NewDense("dense_2", width, 3, rng))
	}
	s.Configure = func(p Params) (Spec, error) {
		r := p.Reader()
		w := r.Int("width", 8, 1, 64)
		if err := r.Err(); err != nil {
			return Spec{}, err
		}
		return widthSpec(w), nil
	}
	return s
}

func TestResolve(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(widthSpec(8)); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(tinySpec("plain.model")); err != nil {
		t.Fatal(err)
	}
	s, err := r.Resolve("w.model", "width=5")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Build(rand.New(rand.NewSource(1))).Params()[2].Value.Shape; got[0] != 5 {
		t.Errorf("dense_2 weights %v, want 5 rows", got)
	}
	if _, err := r.Resolve("w.model", ""); err != nil {
		t.Errorf("no params: %v", err)
	}
	for _, c := range []struct{ name, params, want string }{
		{"w.model", "width=0", "width=\"0\": want an integer in [1, 64]"},
		{"w.model", "width=x", "want an integer"},
		{"w.model", "widht=5", "unknown model parameter widht (known: width)"},
		{"plain.model", "width=5", "model plain.model takes no parameters"},
		{"w.model", "width", "want key=value"},
	} {
		_, err := r.Resolve(c.name, c.params)
		if !errors.Is(err, ErrBadParams) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Resolve(%s, %q) = %v, want %q", c.name, c.params, err, c.want)
		}
	}
	if _, err := r.Resolve("nope", "width=5"); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
}

// A Configure whose network does not fit its spec is caught by Resolve.
func TestResolveChecksTheBuild(t *testing.T) {
	s := widthSpec(8)
	s.Configure = func(p Params) (Spec, error) {
		c := widthSpec(4)
		c.NumClasses = 4 // the network still has 3 outputs
		return c, nil
	}
	r := NewRegistry()
	if err := r.Register(s); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve("w.model", "width=4"); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Resolve = %v, want ErrInvalidSpec", err)
	}
}
