package nn

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidID reports an embedding id the layer cannot look up (a
// negative one). Ids come from data, so this is an error, not a panic.
var ErrInvalidID = errors.New("nn: invalid embedding id")

// Combiner says how an Embedding turns ids into output rows.
type Combiner int

const (
	// CombinerNone looks up exactly one id per slot: ids [N*Slots] give
	// an output [N, Slots, Dim].
	CombinerNone Combiner = iota
	// CombinerSum adds the rows of each example's bag of ids: [N, Dim].
	CombinerSum
	// CombinerMean averages the rows of each example's bag: [N, Dim].
	CombinerMean
)

// String returns the combiner's name.
func (c Combiner) String() string {
	switch c {
	case CombinerNone:
		return "none"
	case CombinerSum:
		return "sum"
	case CombinerMean:
		return "mean"
	}
	return fmt.Sprintf("Combiner(%d)", int(c))
}

// Embedding maps int64 ids to dense rows of a table of dimension Dim. The
// table is NOT a dense Param: the worker fills the rows it needs (pulled
// from the PS) before Forward, and after Backward reads the per-unique-id
// gradient rows to push back. No dense gradient of the whole table exists
// anywhere.
//
// One training step of a parameter-server worker is:
//
//	unique, err := e.SetBatch(ids, offsets, slots) // validates, dedups ids
//	pull(unique, e.Rows())                         // row i of Rows() = table[unique[i]]
//	y := e.Forward(nil, true)                      // or Model.Forward
//	... loss, dy ...
//	e.Backward(dy)                                 // or Model.Backward
//	gids, grows := e.Grad()                        // push: grows[i*Dim:(i+1)*Dim] is dL/dtable[gids[i]]
//
// Batch layout. With CombinerNone, ids is [N*Slots] row-major (example i's
// slot s is ids[i*Slots+s]), offsets must be nil and the output is
// [N, Slots, Dim]. With CombinerSum or CombinerMean the batch is ragged:
// offsets has N+1 entries, starts at 0, never decreases and ends at
// len(ids), example i's bag is ids[offsets[i]:offsets[i+1]], slots must be
// 0, and the output is [N, Dim]; an empty bag gives a zero row (for Mean
// too, not NaN). Ids must be non-negative; they are never bounds-checked
// against a vocabulary, since the table lives elsewhere.
//
// Gradients. Backward returns nil (ids have no gradient) and ADDS into the
// per-unique-id gradient, like Param.Grad: an id used k times in the batch
// gets the sum of its k contributions, each scaled by 1/len(bag) under
// CombinerMean. SetBatch zeroes the gradient (its rows belong to a new id
// set); ZeroGrad clears it without changing the batch.
//
// Ownership. The slices returned by SetBatch, Rows and Grad are the
// layer's buffers: valid until the next SetBatch, not to be modified
// except by filling Rows. SetBatch zeroes Rows, so a row the caller fails
// to fill reads as zeros, never as another id's stale row.
//
// Memory per batch, with U unique ids among the batch's L ids (L = N*Slots
// for CombinerNone): O(U*Dim) for the pulled rows and their gradient plus
// O(L + N) int32 indices and a dedup hash table of at most max(16, 4L)
// (int64, int32) entries, i.e. O(U*Dim + N*Slots), independent of the
// vocabulary size. On top of that is the output itself (and the caller's
// dy of the same shape): N*Slots*Dim floats for CombinerNone, N*Dim for the
// bag combiners. All of these buffers are reused, so a warm layer given
// batches of the same size does not allocate.
//
// Sequential cannot drive an Embedding's backward pass: it skips layers in
// front of its first parameterized layer and never computes that layer's
// input gradient. Use Model (or call the layers' Backward yourself).
type Embedding struct {
	name     string
	dim      int
	combiner Combiner

	ready bool // a valid batch is set: Forward and Backward may run
	n     int  // examples in the batch
	slots int  // CombinerNone only

	idx    []int32 // per position in ids: index into unique
	offs   []int32 // bag combiners: copy of offsets
	unique []int64
	rows   []float32 // len(unique)*dim, filled by the caller
	grad   []float32 // len(unique)*dim
	set    idSet
	y      *Tensor
	scaled []float32 // Backward scratch: one dy row times 1/len(bag)
}

var _ Layer = (*Embedding)(nil)

// NewEmbedding returns an Embedding of dimension dim. It panics on a
// non-positive dim or an unknown combiner, which are programming errors.
func NewEmbedding(name string, dim int, combiner Combiner) *Embedding {
	if dim <= 0 {
		panic(fmt.Sprintf("nn: NewEmbedding(%q): bad dim %d", name, dim))
	}
	if combiner < CombinerNone || combiner > CombinerMean {
		panic(fmt.Sprintf("nn: NewEmbedding(%q): unknown %v", name, combiner))
	}
	return &Embedding{name: name, dim: dim, combiner: combiner}
}

// Name implements Layer.
func (e *Embedding) Name() string { return e.name }

// Dim returns the width of one table row.
func (e *Embedding) Dim() int { return e.dim }

// Combiner returns the layer's combiner.
func (e *Embedding) Combiner() Combiner { return e.combiner }

// Params implements Layer: nil, since the table is sparse and owned by the
// caller (the parameter servers).
func (e *Embedding) Params() []*Param { return nil }

// SetBatch validates and installs a batch (see Embedding for the layout)
// and returns its unique ids in first-seen order: the rows the caller must
// pull into Rows(). It zeroes Rows() and the gradient. On error the layer
// holds no batch and Forward/Backward panic until a successful SetBatch.
func (e *Embedding) SetBatch(ids []int64, offsets []int32, slots int) (unique []int64, err error) {
	e.ready = false
	n, err := e.checkLayout(ids, offsets, slots)
	if err != nil {
		return nil, err
	}
	e.set.reset(len(ids))
	e.idx = ensureInt32(e.idx, len(ids))
	e.unique = e.unique[:0]
	for i, id := range ids {
		if id < 0 {
			return nil, fmt.Errorf("embedding %s: ids[%d] = %d is negative: %w", e.name, i, id, ErrInvalidID)
		}
		u, added := e.set.index(id, int32(len(e.unique)))
		if added {
			e.unique = append(e.unique, id)
		}
		e.idx[i] = u
	}
	size := len(e.unique) * e.dim
	e.rows = ensureFloat32(e.rows, size)
	e.grad = ensureFloat32(e.grad, size)
	clear(e.rows)
	clear(e.grad)
	if e.combiner != CombinerNone {
		e.offs = append(e.offs[:0], offsets...)
	}
	e.n, e.slots = n, slots
	e.ready = true
	return e.unique, nil
}

// checkLayout validates everything about a batch except the id values and
// returns its number of examples.
func (e *Embedding) checkLayout(ids []int64, offsets []int32, slots int) (int, error) {
	// idx holds int32 positions into unique, and bag offsets are int32.
	if len(ids) > math.MaxInt32 {
		return 0, fmt.Errorf("embedding %s: %d ids exceed int32 indexing: %w", e.name, len(ids), ErrShape)
	}
	if e.combiner == CombinerNone {
		if offsets != nil {
			return 0, fmt.Errorf("embedding %s: offsets given with combiner none (use slots): %w", e.name, ErrShape)
		}
		if slots <= 0 {
			return 0, fmt.Errorf("embedding %s: slots = %d, want > 0: %w", e.name, slots, ErrShape)
		}
		if len(ids)%slots != 0 {
			return 0, fmt.Errorf("embedding %s: %d ids are not a multiple of %d slots: %w", e.name, len(ids), slots, ErrShape)
		}
		return len(ids) / slots, nil
	}
	if slots != 0 {
		return 0, fmt.Errorf("embedding %s: slots = %d with combiner %v, want 0 (bags come from offsets): %w",
			e.name, slots, e.combiner, ErrShape)
	}
	if len(offsets) == 0 {
		return 0, fmt.Errorf("embedding %s: combiner %v needs N+1 offsets, got none: %w", e.name, e.combiner, ErrShape)
	}
	if offsets[0] != 0 {
		return 0, fmt.Errorf("embedding %s: offsets[0] = %d, want 0: %w", e.name, offsets[0], ErrShape)
	}
	for i := 1; i < len(offsets); i++ {
		if offsets[i] < offsets[i-1] {
			return 0, fmt.Errorf("embedding %s: offsets[%d] = %d < offsets[%d] = %d: %w",
				e.name, i, offsets[i], i-1, offsets[i-1], ErrShape)
		}
	}
	if last := offsets[len(offsets)-1]; int(last) != len(ids) {
		return 0, fmt.Errorf("embedding %s: last offset %d, want len(ids) = %d: %w", e.name, last, len(ids), ErrShape)
	}
	return len(offsets) - 1, nil
}

// Rows returns the len(unique)*Dim buffer the caller fills with the pulled
// rows, row i holding the table row of unique[i].
func (e *Embedding) Rows() []float32 { return e.rows }

// Grad returns the batch's unique ids and their gradient rows (duplicates
// merged), len(ids)*Dim floats, accumulated over Backward calls since the
// last SetBatch or ZeroGrad.
func (e *Embedding) Grad() (ids []int64, rows []float32) { return e.unique, e.grad }

// ZeroGrad clears the sparse gradient, keeping the batch.
func (e *Embedding) ZeroGrad() { clear(e.grad) }

// OutputShape returns the shape Forward produces for the current batch.
func (e *Embedding) OutputShape() []int {
	if e.combiner == CombinerNone {
		return []int{e.n, e.slots, e.dim}
	}
	return []int{e.n, e.dim}
}

func (e *Embedding) mustReady(op string) {
	if !e.ready {
		panic(fmt.Sprintf("nn: %s: %s without a batch (call SetBatch first)", e.name, op))
	}
}

// Forward implements Layer. x is ignored (may be nil): the input is the
// batch set by SetBatch and the rows in Rows().
func (e *Embedding) Forward(x *Tensor, train bool) *Tensor {
	e.mustReady("Forward")
	d, rows := e.dim, e.rows
	if e.combiner == CombinerNone {
		e.y = ensure(e.y, e.n, e.slots, d)
		y := e.y.Data
		for p, u := range e.idx {
			copy(y[p*d:(p+1)*d], rows[int(u)*d:int(u+1)*d])
		}
		return e.y
	}
	e.y = ensure(e.y, e.n, d)
	y := e.y.Data
	for i := 0; i < e.n; i++ {
		out := y[i*d : (i+1)*d]
		clear(out) // ensure does not clear reused buffers; empty bags must read zero
		bag := e.idx[e.offs[i]:e.offs[i+1]]
		for _, u := range bag {
			addRow(out, rows[int(u)*d:int(u+1)*d])
		}
		if e.combiner == CombinerMean && len(bag) > 1 {
			s := 1 / float32(len(bag))
			for k := range out {
				out[k] *= s
			}
		}
	}
	return e.y
}

// Backward implements Layer: it adds dL/drow for every unique id into the
// gradient returned by Grad and returns nil, as ids have no gradient.
func (e *Embedding) Backward(dy *Tensor) *Tensor {
	e.mustReady("Backward")
	d, g := e.dim, e.grad
	if e.combiner == CombinerNone {
		if !sameShape(dy.Shape, []int{e.n, e.slots, d}) {
			panic(fmt.Sprintf("nn: %s: Backward dy shape %v, want %v", e.name, dy.Shape, e.OutputShape()))
		}
		for p, u := range e.idx {
			addRow(g[int(u)*d:int(u+1)*d], dy.Data[p*d:(p+1)*d])
		}
		return nil
	}
	if !sameShape(dy.Shape, []int{e.n, d}) {
		panic(fmt.Sprintf("nn: %s: Backward dy shape %v, want %v", e.name, dy.Shape, e.OutputShape()))
	}
	for i := 0; i < e.n; i++ {
		src := dy.Data[i*d : (i+1)*d]
		bag := e.idx[e.offs[i]:e.offs[i+1]]
		if e.combiner == CombinerMean && len(bag) > 1 {
			// Scale once per bag, then scatter with plain adds. Same factor
			// as Forward, so the gradient is exact for the function
			// actually computed.
			s := 1 / float32(len(bag))
			e.scaled = ensureFloat32(e.scaled, d)
			for k, v := range src {
				e.scaled[k] = s * v
			}
			src = e.scaled
		}
		for _, u := range bag {
			addRow(g[int(u)*d:int(u+1)*d], src)
		}
	}
	return nil
}

// addRow sets dst += src; len(src) must be len(dst). Unrolled by four:
// rows are short (Dim ~ 8-64), so loop overhead is a large share of the
// scatter-add that dominates Backward.
func addRow(dst, src []float32) {
	src = src[:len(dst)]
	for len(dst) >= 4 {
		d, s := dst[:4:4], src[:4:4]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		dst, src = dst[4:], src[4:]
	}
	for k, v := range src {
		dst[k] += v
	}
}

// ensureFloat32 returns a slice of length n, reusing b's storage when it
// is large enough. The contents are not cleared.
func ensureFloat32(b []float32, n int) []float32 {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]float32, n)
}

// idSet maps ids to dense indices for one batch. It is an open-addressing
// table instead of a Go map because it is rebuilt every batch: resetting
// it is one linear fill, and probing a flat slice of (id, index) pairs
// dedups a 512×26-id batch about twice as fast as a reused, cleared map
// (BenchmarkIDDedup).
type idSet struct {
	slots []idSlot
	mask  int
}

// idSlot is one table entry; id < 0 marks it empty, which is free because
// valid ids are non-negative.
type idSlot struct {
	id int64
	u  int32
}

// reset empties the table and sizes it for up to n ids at load <= 1/2.
func (s *idSet) reset(n int) {
	size := 16
	for size/2 < n {
		size <<= 1
	}
	if cap(s.slots) < size {
		s.slots = make([]idSlot, size)
	}
	s.slots = s.slots[:size]
	for i := range s.slots {
		s.slots[i] = idSlot{id: -1}
	}
	s.mask = size - 1
}

// index returns id's index, inserting it with index next if it is new.
// id must be non-negative.
func (s *idSet) index(id int64, next int32) (u int32, added bool) {
	i := int(mix64(uint64(id))) & s.mask
	for {
		sl := &s.slots[i]
		if sl.id == id {
			return sl.u, false
		}
		if sl.id < 0 {
			*sl = idSlot{id: id, u: next}
			return next, true
		}
		i = (i + 1) & s.mask
	}
}

// mix64 is the murmur3 64-bit finalizer: feature ids are often hashed or
// strided (e.g. field<<k | value), and linear probing needs their low bits
// well mixed.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
