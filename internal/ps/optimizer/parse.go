package optimizer

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

type kindSpec struct {
	defaults map[string]string
	build    func(a args) (Optimizer, error)
}

// specs is built per call rather than held in a package variable so that
// nothing global can be mutated.
//
// Defaults follow Keras (tf.keras.optimizers, TF2). "momentum" has no Keras
// counterpart of its own; it is SGD whose momentum defaults to the
// conventional 0.9 instead of 0.
func specs() map[string]kindSpec {
	return map[string]kindSpec{
		"sgd": {
			defaults: map[string]string{"learning_rate": "0.01", "momentum": "0", "nesterov": "false", "decay": "0"},
			build: func(a args) (Optimizer, error) {
				return NewSGD("sgd", a.float("learning_rate"), a.float("momentum"), a.bool("nesterov"))
			},
		},
		"momentum": {
			defaults: map[string]string{"learning_rate": "0.01", "momentum": "0.9", "nesterov": "false", "decay": "0"},
			build: func(a args) (Optimizer, error) {
				return NewSGD("momentum", a.float("learning_rate"), a.float("momentum"), a.bool("nesterov"))
			},
		},
		"adam": {
			defaults: map[string]string{"learning_rate": "0.001", "beta1": "0.9", "beta2": "0.999", "epsilon": "1e-7", "amsgrad": "false", "decay": "0"},
			build: func(a args) (Optimizer, error) {
				return NewAdam(a.float("learning_rate"), a.float("beta1"), a.float("beta2"), a.float("epsilon"), a.bool("amsgrad"))
			},
		},
		"adagrad": {
			defaults: map[string]string{"learning_rate": "0.001", "initial_accumulator_value": "0.1", "epsilon": "1e-7", "decay": "0"},
			build: func(a args) (Optimizer, error) {
				return NewAdagrad(a.float("learning_rate"), a.float("initial_accumulator_value"), a.float("epsilon"))
			},
		},
	}
}

// alias maps Keras' own spellings of argument names to ours.
func alias(k string) string {
	switch k {
	case "lr":
		return "learning_rate"
	case "beta_1":
		return "beta1"
	case "beta_2":
		return "beta2"
	}
	return k
}

// Parse builds an optimizer from a spec "kind[:arg=value,...]", e.g.
// "sgd:learning_rate=0.1" or "adam:learning_rate=0.001,amsgrad=true".
// Kinds: sgd, momentum, adam, adagrad; omitted arguments take the Keras
// defaults. Every kind takes decay (default 0): update t of a parameter
// uses learning_rate / (1 + decay·t), Keras's legacy inverse-time decay. Unknown kinds or arguments, repeated arguments, malformed or
// non-finite values and out-of-range hyper-parameters are errors naming
// the culprit.
func Parse(spec string) (Optimizer, error) {
	kind, rest, hasArgs := strings.Cut(strings.TrimSpace(spec), ":")
	kind = strings.ToLower(strings.TrimSpace(kind))
	all := specs()
	sp, ok := all[kind]
	if !ok {
		return nil, fmt.Errorf("optimizer spec %q: unknown optimizer %q (known: %s)", spec, kind, strings.Join(sortedKeys(all), ", "))
	}
	a := args{kind: kind, vals: make(map[string]string, len(sp.defaults))}
	for k, v := range sp.defaults {
		a.vals[k] = v
	}
	if hasArgs && strings.TrimSpace(rest) != "" {
		seen := map[string]bool{}
		for _, kv := range strings.Split(rest, ",") {
			k, v, ok := strings.Cut(kv, "=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if !ok || k == "" || v == "" {
				return nil, fmt.Errorf("optimizer spec %q: argument %q is not name=value", spec, strings.TrimSpace(kv))
			}
			k = alias(k)
			if _, ok := sp.defaults[k]; !ok {
				return nil, fmt.Errorf("optimizer spec %q: unknown argument %q for %s (known: %s)", spec, k, kind, strings.Join(sortedKeys(sp.defaults), ", "))
			}
			if seen[k] {
				return nil, fmt.Errorf("optimizer spec %q: argument %q given twice", spec, k)
			}
			seen[k] = true
			a.vals[k] = v
		}
	}
	// Type-check every argument before building, so the error names the
	// argument rather than a derived failure.
	for _, k := range sortedKeys(a.vals) {
		if err := a.check(k, sp.defaults[k]); err != nil {
			return nil, fmt.Errorf("optimizer spec %q: %w", spec, err)
		}
	}
	o, err := sp.build(a)
	if err == nil {
		o, err = withDecay(o, a.float("decay"))
	}
	if err != nil {
		return nil, fmt.Errorf("optimizer spec %q: %w", spec, err)
	}
	return o, nil
}

// args holds a spec's argument strings; check has validated them, so the
// accessors cannot fail.
type args struct {
	kind string
	vals map[string]string
}

func (a args) check(k, def string) error {
	v := a.vals[k]
	if def == "true" || def == "false" {
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("argument %s=%q is not a boolean", k, v)
		}
		return nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("argument %s=%q is not a finite number", k, v)
	}
	return nil
}

func (a args) float(k string) float64 {
	f, _ := strconv.ParseFloat(a.vals[k], 64)
	return f
}

func (a args) bool(k string) bool {
	b, _ := strconv.ParseBool(a.vals[k])
	return b
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
