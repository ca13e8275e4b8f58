package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ErrBadParams is wrapped by ParseParams and Registry.Resolve for model
// parameters that are malformed, unknown to the model, or out of range.
var ErrBadParams = errors.New("bad model parameters")

// Params are the parameters a model is built with (--model_params), as in
// ElasticDL: "key=value" items separated by semicolons, e.g.
// "fields=62; dense=23". They change the model's shape, so every role of a
// job (master, workers, evaluate and predict jobs on its checkpoints) must
// be given the same ones.
type Params map[string]string

// ParseParams parses "k1=v1; k2=v2" (spaces around keys and values are
// ignored; an empty string is no parameters). A key may appear once.
func ParseParams(s string) (Params, error) {
	p := Params{}
	for _, item := range strings.Split(s, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("model parameter %q: want key=value: %w", item, ErrBadParams)
		}
		if _, dup := p[k]; dup {
			return nil, fmt.Errorf("model parameter %q given twice: %w", k, ErrBadParams)
		}
		p[k] = v
	}
	return p, nil
}

// String renders p canonically: keys sorted, "k1=v1;k2=v2".
func (p Params) String() string {
	items := make([]string, 0, len(p))
	for _, k := range slices.Sorted(maps.Keys(p)) {
		items = append(items, k+"="+p[k])
	}
	return strings.Join(items, ";")
}

// ParamReader reads a Params for a model's Configure: each Int names its
// key; Err then reports the first bad value, or any key nobody read (a
// typo must not silently build the default model).
type ParamReader struct {
	params Params
	read   map[string]bool
	err    error
}

// Reader returns a ParamReader over p.
func (p Params) Reader() *ParamReader { return &ParamReader{params: p, read: map[string]bool{}} }

// Int returns the integer under key, def when absent; a value that is not
// an integer in [lo, hi] is an error (reported by Err).
func (r *ParamReader) Int(key string, def, lo, hi int) int {
	r.read[key] = true
	v, ok := r.params[key]
	if !ok || r.err != nil {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.err = fmt.Errorf("model parameter %s=%q: want an integer in [%d, %d]: %w", key, v, lo, hi, ErrBadParams)
		return def
	}
	return n
}

// Err returns the first bad value read, or names the keys no Int read
// along with the ones the model knows.
func (r *ParamReader) Err() error {
	if r.err != nil {
		return r.err
	}
	var unknown []string
	for k := range r.params {
		if !r.read[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("unknown model parameter %s (known: %s): %w",
			strings.Join(unknown, ", "), strings.Join(slices.Sorted(maps.Keys(r.read)), ", "), ErrBadParams)
	}
	return nil
}
