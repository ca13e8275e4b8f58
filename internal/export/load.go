package export

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"slices"

	"elasticdl/internal/atomicfile"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/wire"
	"elasticdl/model"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

// jobModelDir is where a training job writes its model under --output.
const jobModelDir = "model"

// Loaded is a network holding a checkpoint's parameters, and the
// checkpoint's embedding tables.
type Loaded struct {
	Net     *nn.Model
	Tables  map[string]Table
	Dir     string // the checkpoint directory read
	Version int64
}

// Table is an embedding table's rows from a checkpoint: the ids it holds
// (the ones seen in training), increasing, and their rows.
type Table struct {
	Dim  int
	IDs  []int64
	Rows []float32 // len(IDs)*Dim
}

// Load builds spec's network and fills it with the dense parameters of the
// newest complete checkpoint under dir (a checkpoint directory, or a
// training job's --output, whose model/ it then reads). Every parameter
// must be there with the model's shape, and nothing else: a checkpoint of
// another model is refused, naming the first parameter that differs.
func Load(spec model.Spec, dir string) (Loaded, error) {
	set, err := checkpoint.Load(dir, nil)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		if ms, merr := checkpoint.Load(checkpoint.Join(dir, jobModelDir), nil); merr == nil {
			set, err = ms, nil
		}
	}
	if err != nil {
		return Loaded{}, err
	}
	byName := map[string]*pserverpb.Tensor{}
	n := 0
	for _, c := range set.Shards {
		for _, t := range c.GetDenseParameters() {
			byName[t.GetName()] = t
			n++
		}
	}
	net := spec.Build(rand.New(rand.NewSource(0)))
	if err := fill(net.Params(), byName, n); err != nil {
		return Loaded{}, fmt.Errorf("%s does not fit model %s: %w", set.Dir, spec.Name, err)
	}
	tables, err := readTables(set, spec)
	if err != nil {
		return Loaded{}, fmt.Errorf("%s does not fit model %s: %w", set.Dir, spec.Name, err)
	}
	return Loaded{Net: net, Tables: tables, Dir: set.Dir, Version: set.Version}, nil
}

// readTables gathers the embedding tables of every shard, sorted by id;
// each must be one of the model's, with its dimension. A table of the
// model the checkpoint lacks is empty: every id is unseen.
func readTables(set *checkpoint.Set, spec model.Spec) (map[string]Table, error) {
	out := map[string]Table{}
	for _, e := range spec.Embeddings() {
		out[e.Table] = Table{Dim: e.Dim}
	}
	for _, c := range set.Shards {
		for _, et := range c.GetEmbeddingTables() {
			name := et.GetInfo().GetName()
			t, ok := out[name]
			if !ok {
				return nil, fmt.Errorf("embedding table %q is not one of the model's", name)
			}
			if int64(t.Dim) != et.GetInfo().GetDim() {
				return nil, fmt.Errorf("embedding table %q has dimension %d, the model %d", name, et.GetInfo().GetDim(), t.Dim)
			}
			if len(et.GetIds()) == 0 {
				continue
			}
			rows := make([]float32, len(et.GetIds())*t.Dim)
			if err := wire.DecodeInto(et.GetValues(), rows); err != nil {
				return nil, fmt.Errorf("embedding table %q: %w", name, err)
			}
			t.IDs = append(t.IDs, et.GetIds()...)
			t.Rows = append(t.Rows, rows...)
			out[name] = t
		}
	}
	for name, t := range out {
		out[name] = t.sorted()
	}
	return out, nil
}

// sorted orders the rows by id (shards interleave them).
func (t Table) sorted() Table {
	order := make([]int, len(t.IDs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(t.IDs[a], t.IDs[b]) })
	s := Table{Dim: t.Dim, IDs: make([]int64, len(t.IDs)), Rows: make([]float32, len(t.Rows))}
	for i, o := range order {
		s.IDs[i] = t.IDs[o]
		copy(s.Rows[i*t.Dim:(i+1)*t.Dim], t.Rows[o*t.Dim:(o+1)*t.Dim])
	}
	return s
}

// fill decodes each parameter from byName (n tensors in all), checking
// names and shapes.
func fill(params []*nn.Param, byName map[string]*pserverpb.Tensor, n int) error {
	for _, p := range params {
		t, ok := byName[p.Name]
		if !ok {
			return fmt.Errorf("no parameter %q", p.Name)
		}
		want := make([]int64, len(p.Value.Shape))
		for i, d := range p.Value.Shape {
			want[i] = int64(d)
		}
		if !slices.Equal(t.GetDims(), want) {
			return fmt.Errorf("parameter %q has shape %v, the model %v", p.Name, t.GetDims(), p.Value.Shape)
		}
		if err := wire.DecodeInto(t, p.Value.Data); err != nil {
			return fmt.Errorf("parameter %q: %w", p.Name, err)
		}
	}
	if n != len(params) || len(byName) != len(params) {
		return fmt.Errorf("%d parameters, the model has %d", n, len(params))
	}
	return nil
}

// WriteFile writes an exported model atomically (no half file under its
// name), readable by all like any file a server is to load.
func WriteFile(path string, data []byte) error {
	if err := atomicfile.Write(path, data); err != nil {
		return err
	}
	return os.Chmod(path, 0o644)
}
