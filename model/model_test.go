package model

import (
	"errors"
	"math/rand"
	"strings"
	"testing"

	"elasticdl/nn"
)

func tinySpec(name string) Spec {
	return Spec{
		Name:       name,
		InputShape: []int{2, 2, 1},
		NumClasses: 3,
		Build: func(rng *rand.Rand) *nn.Model {
			return nn.MustModel(nil, nn.NewFlatten("flatten"), nn.NewDense("dense_1", 4, 3, rng))
		},
		Optimizer: "sgd:learning_rate=0.1",
	}
}

func TestRegisterLookup(t *testing.T) {
	r := NewRegistry()
	for _, n := range []string{"b.model", "a.model"} {
		if err := r.Register(tinySpec(n)); err != nil {
			t.Fatalf("Register(%q): %v", n, err)
		}
	}
	if got := strings.Join(r.Names(), ","); got != "a.model,b.model" {
		t.Errorf("Names() = %s", got)
	}
	specs := r.Specs()
	if len(specs) != 2 || specs[0].Name != "a.model" || specs[1].Name != "b.model" {
		t.Errorf("Specs() not sorted: %v, %v", specs[0].Name, specs[1].Name)
	}
	s, err := r.Lookup("b.model")
	if err != nil || s.Name != "b.model" || s.Optimizer != "sgd:learning_rate=0.1" {
		t.Fatalf("Lookup = %+v, %v", s, err)
	}
	// Mutating a returned spec must not change the registry.
	s.InputShape[0] = 99
	if s2, _ := r.Lookup("b.model"); s2.InputShape[0] != 2 {
		t.Error("registry entry aliased by Lookup result")
	}
}

func TestLookupUnknownListsNames(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(tinySpec("fashion_mnist.mlp")); err != nil {
		t.Fatal(err)
	}
	_, err := r.Lookup("nope")
	if !errors.Is(err, ErrUnknownModel) || !strings.Contains(err.Error(), "fashion_mnist.mlp") {
		t.Fatalf("Lookup(nope) error = %v", err)
	}
}

func TestRegisterRejects(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(tinySpec("m")); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*Spec){
		"duplicate":    func(s *Spec) {},
		"empty name":   func(s *Spec) { s.Name = " " },
		"nil build":    func(s *Spec) { s.Name, s.Build = "x", nil },
		"no shape":     func(s *Spec) { s.Name, s.InputShape = "x", nil },
		"zero dim":     func(s *Spec) { s.Name, s.InputShape = "x", []int{28, 0, 1} },
		"one class":    func(s *Spec) { s.Name, s.NumClasses = "x", 1 },
		"negative dim": func(s *Spec) { s.Name, s.InputShape = "x", []int{-1} },
	}
	for name, mutate := range cases {
		s := tinySpec("m")
		mutate(&s)
		err := r.Register(s)
		want := ErrInvalidSpec
		if name == "duplicate" {
			want = ErrDuplicate
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: Register error = %v, want %v", name, err, want)
		}
	}
	if got := len(r.Names()); got != 1 {
		t.Errorf("%d models registered after rejects, want 1", got)
	}
}

func TestCheckBuild(t *testing.T) {
	if err := tinySpec("ok").CheckBuild(); err != nil {
		t.Fatalf("CheckBuild(valid) = %v", err)
	}
	s := tinySpec("wrong classes")
	s.NumClasses = 5
	if err := s.CheckBuild(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("output width mismatch: %v", err)
	}
	s = tinySpec("miswired")
	s.InputShape = []int{3, 3, 1} // Dense expects 4 inputs: panics inside Forward
	if err := s.CheckBuild(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("miswired network: %v", err)
	}
}

// TestConcurrentUse is meaningful under -race: registration and lookups
// from several goroutines must not race.
func TestConcurrentUse(t *testing.T) {
	r := NewRegistry()
	done := make(chan error)
	for i := range 8 {
		go func() {
			name := string(rune('a' + i))
			err := r.Register(tinySpec(name))
			if err == nil {
				_, err = r.Lookup(name)
			}
			_ = r.Specs()
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if n := len(r.Names()); n != 8 {
		t.Errorf("%d names after 8 registrations", n)
	}
}
