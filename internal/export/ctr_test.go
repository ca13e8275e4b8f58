package export

import (
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"elasticdl/internal/export/onnxcheck"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/nn"
)

// ctrTables makes spec's tables holding the ids id(k) of every third k
// below vocab (the others, and every k from vocab on, are unseen).
func ctrTables(spec model.Spec, vocab int64, id func(int64) int64, rng *rand.Rand) map[string]Table {
	out := map[string]Table{}
	for _, e := range spec.Sparse.Tables() {
		t := Table{Dim: e.Dim}
		for k := int64(0); k < vocab; k += 3 {
			t.IDs = append(t.IDs, id(k))
			for k := 0; k < e.Dim; k++ {
				t.Rows = append(t.Rows, rng.Float32()-0.5)
			}
		}
		out[e.Table] = t
	}
	return out
}

// forwardCTR runs net on dense features and ids with the tables' rows,
// zeros for unseen ids: what predict gives.
func forwardCTR(t *testing.T, spec model.Spec, net *nn.Model, tables map[string]Table, x *nn.Tensor, ids []int64) []float32 {
	t.Helper()
	for i, e := range net.Embeddings() {
		tab := tables[spec.Sparse.Embeddings[i].Table]
		unique, err := e.SetBatch(ids, nil, spec.NumCategorical())
		if err != nil {
			t.Fatal(err)
		}
		rows := e.Rows()
		for u, id := range unique {
			for j, have := range tab.IDs {
				if have == id {
					copy(rows[u*tab.Dim:(u+1)*tab.Dim], tab.Rows[j*tab.Dim:(j+1)*tab.Dim])
				}
			}
		}
	}
	return Softmax(net.Forward(x, false).Data, spec.NumClasses)
}

// bounded ids are the source's, small integers; hashed ones are spread
// over 2^62 (the dense table would not fit), in increasing order.
func boundedID(k int64) int64 { return k }
func hashedID(k int64) int64  { return 1<<40 + k*(1<<21) }

// TestCTRRuntime exports wide & deep, DeepFM and xDeepFM with random
// weights and tables, checks the files and runs them in onnxruntime on
// records with seen, unseen and out-of-range ids, bounded and hashed:
// within 1e-5 of the Go forward pass with zeros for the unseen ids.
func TestCTRRuntime(t *testing.T) {
	tools := onnxcheck.Need(t, "../..")
	for _, spec := range []model.Spec{zoo.WideAndDeepSpec(), zoo.DeepFMSpec(), zoo.XDeepFMSpec()} {
		for _, ids := range []struct {
			name string
			id   func(int64) int64
			ml   bool
		}{{"bounded", boundedID, false}, {"hashed", hashedID, true}} {
			t.Run(spec.Name+"/"+ids.name, func(t *testing.T) {
				checkCTR(t, tools, spec, ids.id, ids.ml)
			})
		}
	}
}

// checkCTR is one case of TestCTRRuntime; ml says whether the lookup is
// ai.onnx.ml's LabelEncoder.
func checkCTR(t *testing.T, tools onnxcheck.Tools, spec model.Spec, id func(int64) int64, ml bool) {
	const n, vocab = 50, 300
	rng := rand.New(rand.NewSource(11))
	net := spec.Build(rng)
	tables := ctrTables(spec, vocab, id, rng)
	m, err := ONNX(spec, net, tables)
	if err != nil {
		t.Fatal(err)
	}
	if (len(m.Imports) > 0) != ml {
		t.Errorf("imports %v, want ai.onnx.ml: %v", m.Imports, ml)
	}
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := os.WriteFile(path, m.Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tools.Check(path); err != nil {
		t.Fatal(err)
	}
	x := nn.NewTensor(spec.BatchShape(n)...)
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	ids := make([]int64, n*spec.NumCategorical())
	for i := range ids {
		ids[i] = id(rng.Int63n(vocab + 20)) // some beyond the largest id held
	}
	got, err := tools.Run(path, OutputProbs, []onnxcheck.Input{
		{Name: InputDense, Dims: x.Shape, Floats: x.Data},
		{Name: InputIDs, Dims: []int{n, spec.NumCategorical()}, Int64s: ids},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := forwardCTR(t, spec, net, tables, x, ids)
	if d := MaxAbsDiff(got, want); !(d <= 1e-5) {
		t.Errorf("max |onnxruntime - Go| = %g over %d records, want <= 1e-5", d, n)
	} else {
		t.Logf("max |onnxruntime - Go| = %.3g over %d records", d, n)
	}
}
