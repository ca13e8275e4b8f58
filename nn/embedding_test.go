package nn

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
)

// fillRows writes row(id) into the embedding's pulled-rows buffer, as a
// worker does after pulling from the PS.
func fillRows(e *Embedding, unique []int64, row func(id int64) []float32) {
	rows, d := e.Rows(), e.Dim()
	if len(rows) != len(unique)*d {
		panic(fmt.Sprintf("Rows() has %d floats for %d unique ids of dim %d", len(rows), len(unique), d))
	}
	for i, id := range unique {
		copy(rows[i*d:(i+1)*d], row(id))
	}
}

// handRow is an easy-to-check row: [id, 100+id].
func handRow(id int64) []float32 { return []float32{float32(id), 100 + float32(id)} }

func mustSetBatch(t *testing.T, e *Embedding, ids []int64, offsets []int32, slots int) []int64 {
	t.Helper()
	u, err := e.SetBatch(ids, offsets, slots)
	if err != nil {
		t.Fatalf("SetBatch: %v", err)
	}
	return u
}

func assertIDs(t *testing.T, what string, got, want []int64) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func TestEmbeddingForwardNone(t *testing.T) {
	e := NewEmbedding("emb", 2, CombinerNone)
	// Two examples, three slots; 5 repeats within and across examples.
	u := mustSetBatch(t, e, []int64{5, 7, 5, 7, 9, 5}, nil, 3)
	assertIDs(t, "unique", u, []int64{5, 7, 9})
	for _, v := range e.Rows() {
		if v != 0 {
			t.Fatalf("Rows() not zeroed by SetBatch: %v", e.Rows())
		}
	}
	fillRows(e, u, handRow)
	assertData(t, "none", e.Forward(nil, true), []int{2, 3, 2},
		[]float32{5, 105, 7, 107, 5, 105, 7, 107, 9, 109, 5, 105}, 0)
	if got := e.OutputShape(); !sameShape(got, []int{2, 3, 2}) {
		t.Fatalf("OutputShape = %v", got)
	}
}

func TestEmbeddingForwardBags(t *testing.T) {
	// Bags: {3,3,1}, {}, {1}, {8}: duplicates within and across examples
	// and an empty bag.
	ids := []int64{3, 3, 1, 1, 8}
	offsets := []int32{0, 3, 3, 4, 5}
	cases := []struct {
		c    Combiner
		want []float32
	}{
		{CombinerSum, []float32{7, 307, 0, 0, 1, 101, 8, 108}},
		{CombinerMean, []float32{7.0 / 3, 307.0 / 3, 0, 0, 1, 101, 8, 108}},
	}
	for _, c := range cases {
		t.Run(c.c.String(), func(t *testing.T) {
			e := NewEmbedding("emb", 2, c.c)
			// A first batch of the same size leaves non-zero values in the
			// reused output buffer where the empty bag will be.
			u := mustSetBatch(t, e, []int64{1, 2, 3, 4}, []int32{0, 1, 2, 3, 4}, 0)
			fillRows(e, u, handRow)
			e.Forward(nil, true)

			u = mustSetBatch(t, e, ids, offsets, 0)
			assertIDs(t, "unique", u, []int64{3, 1, 8})
			fillRows(e, u, handRow)
			assertData(t, c.c.String(), e.Forward(nil, true), []int{4, 2}, c.want, 1e-5)
		})
	}
}

// TestEmbeddingGradFiniteDiff treats Rows() as the variable: it perturbs
// every pulled row element and compares the change of L = sum(y ⊙ w) with
// the merged gradient row of that id.
func TestEmbeddingGradFiniteDiff(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	type batch struct {
		ids     []int64
		offsets []int32
		slots   int
	}
	// A small vocabulary forces duplicates within and across examples.
	randIDs := func(n int) []int64 {
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = int64(rng.Intn(6)) * 1000003 // large, strided ids
		}
		return ids
	}
	bags := func() batch {
		sizes := []int{3, 0, 1, 4, 2}
		offsets := []int32{0}
		for _, s := range sizes {
			offsets = append(offsets, offsets[len(offsets)-1]+int32(s))
		}
		return batch{ids: randIDs(int(offsets[len(offsets)-1])), offsets: offsets}
	}
	cases := []struct {
		c Combiner
		b batch
	}{
		{CombinerNone, batch{ids: randIDs(4 * 3), slots: 3}},
		{CombinerSum, bags()},
		{CombinerMean, bags()},
	}
	for _, c := range cases {
		t.Run(c.c.String(), func(t *testing.T) {
			e := NewEmbedding("emb", 3, c.c)
			u := mustSetBatch(t, e, c.b.ids, c.b.offsets, c.b.slots)
			if len(u) >= len(c.b.ids) {
				t.Fatalf("batch has no duplicate ids: %v", c.b.ids)
			}
			rows := e.Rows()
			for i := range rows {
				rows[i] = float32(rng.NormFloat64())
			}
			w := randTensor(rng, e.Forward(nil, true).Shape...)
			if dx := e.Backward(w); dx != nil {
				t.Fatalf("Backward returned %v, want nil", dx)
			}
			gids, grad := e.Grad()
			assertIDs(t, "Grad ids", gids, u)
			grad = append([]float32(nil), grad...)

			loss := func() float64 {
				var s float64
				for i, v := range e.Forward(nil, true).Data {
					s += float64(v) * float64(w.Data[i])
				}
				return s
			}
			const eps = 1e-2
			for i := range rows {
				orig := rows[i]
				rows[i] = orig + eps
				lp := loss()
				rows[i] = orig - eps
				lm := loss()
				rows[i] = orig
				h := float64(orig+eps) - float64(orig-eps)
				num := (lp - lm) / h
				if !closeTo(float64(grad[i]), num, 1e-3, 1e-3) {
					t.Errorf("id %d, component %d: analytic %.6g, numeric %.6g",
						u[i/e.Dim()], i%e.Dim(), grad[i], num)
				}
			}
		})
	}
}

// TestEmbeddingDuplicatesMerged checks the merged gradient exactly: an id
// used three times gets the sum of its three contributions (scaled by
// 1/len(bag) under Mean).
func TestEmbeddingDuplicatesMerged(t *testing.T) {
	gradOf := func(e *Embedding, id int64) []float32 {
		ids, rows := e.Grad()
		for i, v := range ids {
			if v == id {
				return rows[i*e.Dim() : (i+1)*e.Dim()]
			}
		}
		t.Fatalf("id %d not in Grad ids %v", id, ids)
		return nil
	}
	near := func(what string, got []float32, want ...float32) {
		t.Helper()
		for i := range want {
			if !closeTo(float64(got[i]), float64(want[i]), 1e-6, 1e-6) {
				t.Fatalf("%s = %v, want %v", what, got, want)
			}
		}
	}

	// None: id 4 at positions 0, 2 and 3 of a [2 examples, 2 slots] batch.
	e := NewEmbedding("none", 2, CombinerNone)
	mustSetBatch(t, e, []int64{4, 2, 4, 4}, nil, 2)
	e.Backward(&Tensor{Shape: []int{2, 2, 2}, Data: []float32{1, 2, 10, 20, 100, 200, 1000, 2000}})
	near("none grad[4]", gradOf(e, 4), 1101, 2202)
	near("none grad[2]", gradOf(e, 2), 10, 20)

	// Bags {4,4,2}, {4}, {}: 4 is used three times across two examples.
	dy := &Tensor{Shape: []int{3, 2}, Data: []float32{3, 6, 10, 20, 7, 7}}
	offsets := []int32{0, 3, 4, 4}
	e = NewEmbedding("sum", 2, CombinerSum)
	mustSetBatch(t, e, []int64{4, 4, 2, 4}, offsets, 0)
	e.Backward(dy)
	near("sum grad[4]", gradOf(e, 4), 2*3+10, 2*6+20)
	near("sum grad[2]", gradOf(e, 2), 3, 6)

	e = NewEmbedding("mean", 2, CombinerMean)
	mustSetBatch(t, e, []int64{4, 4, 2, 4}, offsets, 0)
	e.Backward(dy)
	near("mean grad[4]", gradOf(e, 4), 2*3.0/3+10, 2*6.0/3+20)
	near("mean grad[2]", gradOf(e, 2), 3.0/3, 6.0/3)
}

func TestEmbeddingGradAccumulatesAndResets(t *testing.T) {
	e := NewEmbedding("emb", 2, CombinerSum)
	offsets := []int32{0, 2, 3}
	mustSetBatch(t, e, []int64{1, 2, 1}, offsets, 0)
	dy := &Tensor{Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}}
	e.Backward(dy)
	_, g := e.Grad()
	once := append([]float32(nil), g...)
	e.Backward(dy)
	_, g = e.Grad()
	for i := range g {
		if g[i] != 2*once[i] {
			t.Fatalf("after two Backward calls grad = %v, want 2 × %v", g, once)
		}
	}
	e.ZeroGrad()
	for _, v := range g {
		if v != 0 {
			t.Fatalf("ZeroGrad left %v", g)
		}
	}
	e.Backward(dy)
	mustSetBatch(t, e, []int64{1, 2, 1}, offsets, 0)
	if _, g = e.Grad(); fmt.Sprint(g) != "[0 0 0 0]" {
		t.Fatalf("SetBatch did not zero the gradient: %v", g)
	}
}

func TestEmbeddingValidation(t *testing.T) {
	cases := []struct {
		name    string
		c       Combiner
		ids     []int64
		offsets []int32
		slots   int
		want    error
	}{
		{"none negative id", CombinerNone, []int64{1, -2}, nil, 1, ErrInvalidID},
		{"none offsets given", CombinerNone, []int64{1, 2}, []int32{0, 2}, 1, ErrShape},
		{"none zero slots", CombinerNone, []int64{1, 2}, nil, 0, ErrShape},
		{"none negative slots", CombinerNone, []int64{1, 2}, nil, -1, ErrShape},
		{"none ragged", CombinerNone, []int64{1, 2, 3}, nil, 2, ErrShape},
		{"bag negative id", CombinerMean, []int64{1, 2, -3}, []int32{0, 1, 3}, 0, ErrInvalidID},
		{"bag no offsets", CombinerSum, []int64{1}, nil, 0, ErrShape},
		{"bag slots given", CombinerSum, []int64{1}, []int32{0, 1}, 1, ErrShape},
		{"bag first offset", CombinerMean, []int64{1, 2}, []int32{1, 2}, 0, ErrShape},
		{"bag decreasing", CombinerMean, []int64{1, 2}, []int32{0, 2, 1, 2}, 0, ErrShape},
		{"bag short", CombinerSum, []int64{1, 2, 3}, []int32{0, 1, 2}, 0, ErrShape},
		{"bag long", CombinerSum, []int64{1, 2}, []int32{0, 1, 3}, 0, ErrShape},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := NewEmbedding("user_emb", 2, c.c)
			// A valid batch first: a failed SetBatch must not leave it usable.
			if c.c == CombinerNone {
				mustSetBatch(t, e, []int64{1}, nil, 1)
			} else {
				mustSetBatch(t, e, []int64{1}, []int32{0, 1}, 0)
			}
			u, err := e.SetBatch(c.ids, c.offsets, c.slots)
			if !errors.Is(err, c.want) {
				t.Fatalf("SetBatch error = %v, want %v", err, c.want)
			}
			if u != nil {
				t.Fatalf("unique = %v on error, want nil", u)
			}
			if !strings.Contains(err.Error(), "user_emb") {
				t.Fatalf("error %q does not name the layer", err)
			}
			mustPanic(t, "Forward after failed SetBatch", func() { e.Forward(nil, true) })
		})
	}

	// Empty batches are valid and give empty outputs.
	e := NewEmbedding("e", 2, CombinerMean)
	if u := mustSetBatch(t, e, nil, []int32{0}, 0); len(u) != 0 {
		t.Fatalf("unique of an empty batch = %v", u)
	}
	assertData(t, "empty batch", e.Forward(nil, false), []int{0, 2}, nil, 0)

	mustPanic(t, "Forward before SetBatch", func() { NewEmbedding("e", 2, CombinerNone).Forward(nil, true) })
	mustPanic(t, "dim 0", func() { NewEmbedding("e", 0, CombinerNone) })
	mustPanic(t, "bad combiner", func() { NewEmbedding("e", 2, Combiner(7)) })
	e = NewEmbedding("e", 2, CombinerNone)
	mustSetBatch(t, e, []int64{1, 2}, nil, 2)
	mustPanic(t, "Backward with wrong dy", func() { e.Backward(NewTensor(2, 2)) })
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	f()
}

// TestEmbeddingIDSetCollisions drives the dedup table through heavy
// probing: ids that share low bits, a long batch and ids near MaxInt64.
func TestEmbeddingIDSetCollisions(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	var ids []int64
	for i := 0; i < 5000; i++ {
		switch i % 3 {
		case 0:
			ids = append(ids, int64(rng.Intn(700))<<32)
		case 1:
			ids = append(ids, math.MaxInt64-int64(rng.Intn(700)))
		default:
			ids = append(ids, int64(rng.Intn(700)))
		}
	}
	e := NewEmbedding("e", 1, CombinerNone)
	u := mustSetBatch(t, e, ids, nil, 1)
	var want []int64
	seen := map[int64]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			want = append(want, id)
		}
	}
	assertIDs(t, "unique", u, want)
	// Each output element must read the row of its own id.
	rows := e.Rows()
	for i := range rows {
		rows[i] = float32(i)
	}
	pos := map[int64]int{}
	for i, id := range want {
		pos[id] = i
	}
	y := e.Forward(nil, true)
	for p, id := range ids {
		if y.Data[p] != float32(pos[id]) {
			t.Fatalf("position %d (id %d) reads row %v, want %d", p, id, y.Data[p], pos[id])
		}
	}
	// A smaller batch reuses the big table at a smaller size: nothing of
	// the previous batch may leak into it.
	assertIDs(t, "unique after shrink", mustSetBatch(t, e, []int64{ids[0], 9, ids[0], 3}, nil, 2), []int64{ids[0], 9, 3})
}

func TestEmbeddingAllocFree(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	for _, c := range []Combiner{CombinerNone, CombinerMean} {
		e := NewEmbedding("e", 4, c)
		ids := make([]int64, 64)
		for i := range ids {
			ids[i] = int64(rng.Intn(40))
		}
		var offsets []int32
		slots := 8
		if c != CombinerNone {
			offsets, slots = []int32{0, 10, 10, 30, 64}, 0
		}
		var dy *Tensor
		step := func() {
			if _, err := e.SetBatch(ids, offsets, slots); err != nil {
				t.Fatal(err)
			}
			y := e.Forward(nil, true)
			dy = ensure(dy, y.Shape...)
			e.Backward(dy)
			e.Grad()
		}
		step()
		if n := testing.AllocsPerRun(10, step); n != 0 {
			t.Errorf("%v: warm step allocates %v times, want 0", c, n)
		}
	}
}

func TestConcat(t *testing.T) {
	c := NewConcat("cat")
	a := &Tensor{Shape: []int{2, 2, 2}, Data: []float32{1, 2, 3, 4, 5, 6, 7, 8}}
	b := &Tensor{Shape: []int{2, 1}, Data: []float32{9, 10}}
	assertData(t, "concat", c.Forward(a, b), []int{2, 5}, []float32{1, 2, 3, 4, 9, 5, 6, 7, 8, 10}, 0)
	dy := &Tensor{Shape: []int{2, 5}, Data: []float32{-1, -2, -3, -4, -9, -5, -6, -7, -8, -10}}
	dxs := c.Backward(dy)
	if len(dxs) != 2 {
		t.Fatalf("%d gradients for 2 inputs", len(dxs))
	}
	assertData(t, "da", dxs[0], []int{2, 2, 2}, []float32{-1, -2, -3, -4, -5, -6, -7, -8}, 0)
	assertData(t, "db", dxs[1], []int{2, 1}, []float32{-9, -10}, 0)
	mustPanic(t, "row mismatch", func() { c.Forward(a, NewTensor(3, 1)) })
	mustPanic(t, "dy mismatch", func() { c.Backward(NewTensor(2, 4)) })
}

// TestModelGrad checks Model end to end through the softmax loss: the
// pulled rows of both embeddings and every tower parameter.
func TestModelGrad(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	slot := NewEmbedding("slot", 3, CombinerNone)
	bag := NewEmbedding("bag", 2, CombinerMean)
	const n, slots, denseW, classes = 3, 2, 2, 4
	m, err := NewModel([]*Embedding{slot, bag},
		NewDense("d1", slots*3+2+denseW, 5, rng), NewDense("d2", 5, classes, rng))
	if err != nil {
		t.Fatal(err)
	}
	mustSetBatch(t, slot, []int64{1, 2, 2, 3, 1, 1}, nil, slots)
	mustSetBatch(t, bag, []int64{7, 8, 7, 9}, []int32{0, 3, 3, 4}, 0)
	for _, e := range m.Embeddings() {
		for i := range e.Rows() {
			e.Rows()[i] = float32(rng.NormFloat64())
		}
	}
	dense := randTensor(rng, n, denseW)
	labels := []int32{0, 3, 1}
	loss := func() float64 {
		l, _, err := SoftmaxCrossEntropy(m.Forward(dense, true), labels)
		if err != nil {
			t.Fatal(err)
		}
		return float64(l)
	}
	m.ZeroGrads()
	_, d, err := SoftmaxCrossEntropy(m.Forward(dense, true), labels)
	if err != nil {
		t.Fatal(err)
	}
	m.Backward(d)

	check := func(what string, vals, grad []float32) {
		t.Helper()
		grad = append([]float32(nil), grad...)
		const eps = 1e-2
		for i := range vals {
			orig := vals[i]
			vals[i] = orig + eps
			lp := loss()
			vals[i] = orig - eps
			lm := loss()
			vals[i] = orig
			num := (lp - lm) / (float64(orig+eps) - float64(orig-eps))
			if !closeTo(float64(grad[i]), num, 5e-4, 2e-2) {
				t.Errorf("%s[%d]: analytic %.6g, numeric %.6g", what, i, grad[i], num)
			}
		}
	}
	for _, e := range m.Embeddings() {
		_, g := e.Grad()
		check(e.Name()+" rows", e.Rows(), g)
	}
	for _, p := range m.Params() {
		check(p.Name, p.Value.Data, p.Grad.Data)
	}
}

func TestModelErrors(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	e := NewEmbedding("e", 2, CombinerNone)
	if _, err := NewModel([]*Embedding{e}, NewDense("e", 2, 2, rng)); err == nil {
		t.Error("duplicate names accepted")
	}
	if _, err := NewModel([]*Embedding{e, nil}); err == nil {
		t.Error("nil embedding accepted")
	}
	if _, err := NewModel([]*Embedding{e}, nil); err == nil {
		t.Error("nil tower layer accepted")
	}
	if _, err := NewModel(nil, NewReLU("a"), NewReLU("a")); err == nil {
		t.Error("duplicate tower names accepted")
	}
}

// TestModelWithoutEmbeddings: a model with no embeddings is its tower,
// fed the input unflattened, with the same outputs and gradients as the
// equivalent Sequential (which skips the first layer's dx).
func TestModelWithoutEmbeddings(t *testing.T) {
	build := func() []Layer {
		rng := rand.New(rand.NewSource(8))
		return []Layer{NewConv2D("c", 1, 2, 3, 3, 1, Same, rng), NewFlatten("f"), NewDense("d", 4*4*2, 3, rng)}
	}
	m, err := NewModel(nil, build()...)
	if err != nil {
		t.Fatal(err)
	}
	s := MustSequential(build()...)
	if len(m.Embeddings()) != 0 || m.NumParams() != s.NumParams() {
		t.Fatalf("model: %d embeddings, %d params; sequential %d params", len(m.Embeddings()), m.NumParams(), s.NumParams())
	}
	x := randTensor(rand.New(rand.NewSource(9)), 2, 4, 4, 1)
	labels := []int32{2, 0}
	for _, net := range []interface {
		ZeroGrads()
		Forward(*Tensor, bool) *Tensor
		Backward(*Tensor)
	}{m, s} {
		net.ZeroGrads()
		_, d, err := SoftmaxCrossEntropy(net.Forward(x, true), labels)
		if err != nil {
			t.Fatal(err)
		}
		net.Backward(d)
	}
	sp := s.Params()
	for i, p := range m.Params() {
		if p.Name != sp[i].Name {
			t.Fatalf("param %d: %s vs %s", i, p.Name, sp[i].Name)
		}
		assertData(t, p.Name+" grad", p.Grad, sp[i].Grad.Shape, sp[i].Grad.Data, 0)
	}
	if err := CopyParams(s, m); err != nil {
		t.Fatal(err)
	}
}

// TestModelLearns trains Embedding(Mean) → Dense → softmax CE with
// plain SGD, the table living in a map the way a PS holds it: rows are
// created on first pull, pulled per batch and updated from Grad only.
func TestModelLearns(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	const (
		vocab, classes, dim = 200, 4, 8
		lr                  = 1.0
		batchSize, epochs   = 32, 15
	)
	// Every id belongs to one class (id % classes); an example of class c
	// is a bag of 2-6 ids, each from class c with probability 0.8 and
	// uniform otherwise. Bags are short and noisy, so the model must learn
	// every id's row, not just a few.
	gen := func(n int) (ids []int64, offsets []int32, labels []int32) {
		offsets = []int32{0}
		for i := 0; i < n; i++ {
			c := rng.Intn(classes)
			for k := 2 + rng.Intn(5); k > 0; k-- {
				id := int64(rng.Intn(vocab))
				if rng.Float64() < 0.8 {
					id = int64(rng.Intn(vocab/classes)*classes + c)
				}
				ids = append(ids, id)
			}
			offsets = append(offsets, int32(len(ids)))
			labels = append(labels, int32(c))
		}
		return ids, offsets, labels
	}
	trainIDs, trainOff, trainLabels := gen(2000)
	testIDs, testOff, testLabels := gen(500)

	table := map[int64][]float32{}
	pull := func(unique []int64, rows []float32) {
		for i, id := range unique {
			r, ok := table[id]
			if !ok {
				r = make([]float32, dim)
				for k := range r {
					r[k] = float32(rng.NormFloat64()) * 0.1
				}
				table[id] = r
			}
			copy(rows[i*dim:(i+1)*dim], r)
		}
	}
	emb := NewEmbedding("emb", dim, CombinerMean)
	m, err := NewModel([]*Embedding{emb}, NewDense("out", dim, classes, rng))
	if err != nil {
		t.Fatal(err)
	}
	// slice cuts examples [lo, hi) out of a ragged batch, rebasing offsets.
	slice := func(ids []int64, off []int32, lo, hi int) ([]int64, []int32) {
		o := make([]int32, hi-lo+1)
		for i := range o {
			o[i] = off[lo+i] - off[lo]
		}
		return ids[off[lo]:off[hi]], o
	}
	evaluate := func(ids []int64, off []int32, labels []int32) (float32, float64) {
		u, err := emb.SetBatch(ids, off, 0)
		if err != nil {
			t.Fatal(err)
		}
		pull(u, emb.Rows())
		logits := m.Forward(nil, false)
		l, _, err := SoftmaxCrossEntropy(logits, labels)
		if err != nil {
			t.Fatal(err)
		}
		return l, float64(CountCorrect(logits, labels)) / float64(len(labels))
	}
	loss0, _ := evaluate(testIDs, testOff, testLabels)
	// Reference: the accuracy of a majority vote over the ids' true
	// classes (ties to the lowest class), roughly the best achievable.
	vote := 0
	for i, c := range testLabels {
		var count [classes]int
		for _, id := range testIDs[testOff[i]:testOff[i+1]] {
			count[id%classes]++
		}
		best := 0
		for k := range count {
			if count[k] > count[best] {
				best = k
			}
		}
		if int32(best) == c {
			vote++
		}
	}
	voteAcc := float64(vote) / float64(len(testLabels))

	var d *Tensor
	for ep := 0; ep < epochs; ep++ {
		for lo := 0; lo < len(trainLabels); lo += batchSize {
			hi := min(lo+batchSize, len(trainLabels))
			ids, off := slice(trainIDs, trainOff, lo, hi)
			u, err := emb.SetBatch(ids, off, 0)
			if err != nil {
				t.Fatal(err)
			}
			pull(u, emb.Rows())
			m.ZeroGrads()
			if _, d, err = SoftmaxCrossEntropyInto(d, m.Forward(nil, true), trainLabels[lo:hi]); err != nil {
				t.Fatal(err)
			}
			m.Backward(d)
			for _, p := range m.Params() {
				for k, g := range p.Grad.Data {
					p.Value.Data[k] -= lr * g
				}
			}
			// Push: apply the merged gradient rows to the table.
			gids, grows := emb.Grad()
			for i, id := range gids {
				r := table[id]
				for k := range r {
					r[k] -= lr * grows[i*dim+k]
				}
			}
		}
	}
	loss1, acc := evaluate(testIDs, testOff, testLabels)
	t.Logf("held-out loss %.3f -> %.3f, accuracy %.3f (majority vote of true id classes %.3f), table rows %d",
		loss0, loss1, acc, voteAcc, len(table))
	if loss1 > loss0/3 {
		t.Errorf("held-out loss only fell from %.3f to %.3f", loss0, loss1)
	}
	if want := max(0.85, voteAcc-0.05); acc < want {
		t.Errorf("held-out accuracy %.3f, want >= %.3f", acc, want)
	}
	if len(table) > vocab {
		t.Errorf("table holds %d rows for a vocabulary of %d", len(table), vocab)
	}
}
