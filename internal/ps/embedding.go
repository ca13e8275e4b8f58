package ps

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/ps/shard"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// Sparse embedding tables.
//
// Rows are sharded over the PS by id: row id lives on PS id mod numPS
// (ElasticDL's rule), so a worker can route a lookup without asking. Within
// a PS a table is split again into embLocks lock stripes (by a hash of the
// id) so pulls and pushes of different rows proceed in parallel.
//
// Storage is slab-allocated: each stripe keeps a map id -> row index (no
// pointers, so the GC does not scan it) and the rows in chunks of
// chunkRows rows, each row laid out as [value | slot_0 | slot_1 | ...]
// (dim float32 each) plus a per-row int64 update count. A table of R rows
// thus holds about R/chunkRows pointers, whatever R is.
//
// A row is created the first time it is pulled or pushed, from the table's
// initializer with a generator seeded by (table name, id) only, so every
// PS — and a PS relaunched without a checkpoint — creates the same initial
// row.

const (
	embLocks  = 64
	chunkRows = 4096
)

// DefaultEmbeddingInitializer is used when a table's initializer is empty
// (Keras' Embedding default).
const DefaultEmbeddingInitializer = "uniform:-0.05,0.05"

// EmbeddingShardOf is the PS shard holding row id of any table: id mod
// numPS. It panics when numPS < 1; ids must be non-negative.
func EmbeddingShardOf(id int64, numPS int) int {
	if numPS < 1 {
		panic("ps: numPS must be at least 1")
	}
	return int(id % int64(numPS))
}

// initializer creates deterministic initial rows.
type initializer struct {
	kind string // "uniform", "normal", "constant"
	a, b float64
	spec string
	seed uint64 // from the table name
}

// parseInitializer parses an EmbeddingTableInfo initializer spec.
func parseInitializer(spec, table string) (initializer, error) {
	if spec == "" {
		spec = DefaultEmbeddingInitializer
	}
	kind, args, _ := strings.Cut(spec, ":")
	var vals []float64
	if args != "" {
		for _, f := range strings.Split(args, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return initializer{}, fmt.Errorf("initializer %q: bad number %q", spec, f)
			}
			vals = append(vals, v)
		}
	}
	in := initializer{kind: kind, spec: spec, seed: uint64(shard.Hash(table))<<32 | uint64(shard.Hash(table+"#"))}
	switch kind {
	case "zeros":
		if len(vals) != 0 {
			return in, fmt.Errorf("initializer %q: zeros takes no arguments", spec)
		}
		in.kind = "constant"
	case "constant":
		if len(vals) != 1 {
			return in, fmt.Errorf("initializer %q: want constant:V", spec)
		}
		in.a = vals[0]
	case "uniform":
		if len(vals) != 2 || !(vals[0] <= vals[1]) {
			return in, fmt.Errorf("initializer %q: want uniform:LO,HI with LO <= HI", spec)
		}
		in.a, in.b = vals[0], vals[1]
	case "normal":
		if len(vals) != 2 || !(vals[1] >= 0) {
			return in, fmt.Errorf("initializer %q: want normal:MEAN,STDDEV with STDDEV >= 0", spec)
		}
		in.a, in.b = vals[0], vals[1]
	default:
		return in, fmt.Errorf("initializer %q: unknown kind %q (uniform, normal, zeros, constant)", spec, kind)
	}
	return in, nil
}

func splitmix64(x *uint64) uint64 {
	*x += 0x9E3779B97F4A7C15
	z := *x
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// unit returns a float64 in [0, 1) with 53 random bits.
func unit(x *uint64) float64 { return float64(splitmix64(x)>>11) / (1 << 53) }

// fill writes row id's initial values into dst.
func (in *initializer) fill(id int64, dst []float32) {
	if in.kind == "constant" {
		for i := range dst {
			dst[i] = float32(in.a)
		}
		return
	}
	st := in.seed ^ uint64(id)*0xD1B54A32D192ED03
	switch in.kind {
	case "uniform":
		for i := range dst {
			dst[i] = float32(in.a + (in.b-in.a)*unit(&st))
		}
	case "normal":
		for i := 0; i < len(dst); i += 2 {
			// Box-Muller: two normals from two uniforms.
			u1, u2 := 1-unit(&st), unit(&st)
			r := math.Sqrt(-2 * math.Log(u1))
			s, c := math.Sincos(2 * math.Pi * u2)
			dst[i] = float32(in.a + in.b*r*c)
			if i+1 < len(dst) {
				dst[i+1] = float32(in.a + in.b*r*s)
			}
		}
	}
}

// embTable is one embedding table's rows on this shard.
type embTable struct {
	info     *pserverpb.EmbeddingTableInfo
	dim      int
	init     initializer
	nslots   int
	slotInit float32
	stride   int // dim * (1 + nslots)
	stripes  [embLocks]embStripe
}

type embStripe struct {
	mu     sync.RWMutex
	index  map[int64]int32
	chunks [][]float32 // chunkRows*stride each
	ids    []int64     // row index -> id
	steps  []int64     // row index -> updates applied
}

func newEmbTable(info *pserverpb.EmbeddingTableInfo, rule optimizer.RowOptimizer) (*embTable, error) {
	if info.GetName() == "" {
		return nil, fmt.Errorf("embedding table with an empty name")
	}
	if info.GetDim() < 1 || info.GetDim() > 1<<20 {
		return nil, fmt.Errorf("embedding table %q: dim %d out of range", info.GetName(), info.GetDim())
	}
	in, err := parseInitializer(info.GetInitializer(), info.GetName())
	if err != nil {
		return nil, fmt.Errorf("embedding table %q: %w", info.GetName(), err)
	}
	e := &embTable{info: info, dim: int(info.GetDim()), init: in, nslots: len(rule.SlotNames()), slotInit: rule.InitialSlot()}
	e.stride = e.dim * (1 + e.nslots)
	for i := range e.stripes {
		e.stripes[i].index = map[int64]int32{}
	}
	return e, nil
}

func stripeOf(id int64) int { return int((uint64(id) * 0x9E3779B97F4A7C15) >> 58) } // top 6 bits: 64 stripes

// rowLocked returns the storage of row i (value then slots); st's lock held.
func (e *embTable) rowLocked(st *embStripe, i int32) []float32 {
	c := st.chunks[int(i)/chunkRows]
	off := (int(i) % chunkRows) * e.stride
	return c[off : off+e.stride : off+e.stride]
}

// createLocked appends row id, initialized, and returns its index; st's
// write lock held.
func (e *embTable) createLocked(st *embStripe, id int64) int32 {
	i := int32(len(st.ids))
	if int(i)%chunkRows == 0 {
		st.chunks = append(st.chunks, make([]float32, chunkRows*e.stride))
	}
	st.ids = append(st.ids, id)
	st.steps = append(st.steps, 0)
	st.index[id] = i
	r := e.rowLocked(st, i)
	e.init.fill(id, r[:e.dim])
	if e.slotInit != 0 {
		for j := e.dim; j < len(r); j++ {
			r[j] = e.slotInit
		}
	}
	return i
}

// lookup copies the rows of ids into dst (len(ids)*dim), creating missing
// ones.
func (e *embTable) lookup(ids []int64, dst []float32, create bool) {
	for k, id := range ids {
		st := &e.stripes[stripeOf(id)]
		out := dst[k*e.dim : (k+1)*e.dim]
		st.mu.RLock()
		i, ok := st.index[id]
		if ok {
			copy(out, e.rowLocked(st, i)[:e.dim])
			st.mu.RUnlock()
			continue
		}
		st.mu.RUnlock()
		if !create {
			clear(out)
			continue
		}
		st.mu.Lock()
		if i, ok = st.index[id]; !ok {
			i = e.createLocked(st, id)
		}
		copy(out, e.rowLocked(st, i)[:e.dim])
		st.mu.Unlock()
	}
}

// apply updates the rows of unique ids with grads (len(ids)*dim), creating
// missing ones first. Rows are visited stripe by stripe, one lock each.
func (e *embTable) apply(rule optimizer.RowOptimizer, ids []int64, grads []float32) {
	var start [embLocks + 1]int32
	for _, id := range ids {
		start[stripeOf(id)+1]++
	}
	for i := 1; i <= embLocks; i++ {
		start[i] += start[i-1]
	}
	order := make([]int32, len(ids))
	next := start
	for k, id := range ids {
		sp := stripeOf(id)
		order[next[sp]] = int32(k)
		next[sp]++
	}
	slots := make([][]float32, e.nslots)
	rowIdx := make([]int32, len(ids))
	for sp := range embLocks {
		if start[sp] == start[sp+1] {
			continue
		}
		st := &e.stripes[sp]
		ks := order[start[sp]:start[sp+1]]
		st.mu.Lock()
		// Resolve all rows first, then update them: the map probes are
		// independent cache misses the CPU can overlap.
		for j, k := range ks {
			id := ids[k]
			i, ok := st.index[id]
			if !ok {
				i = e.createLocked(st, id)
			}
			rowIdx[j] = i
		}
		for j, k := range ks {
			i := rowIdx[j]
			r := e.rowLocked(st, i)
			for s := range slots {
				slots[s] = r[(s+1)*e.dim : (s+2)*e.dim]
			}
			st.steps[i]++
			rule.ApplyRow(r[:e.dim], grads[int(k)*e.dim:(int(k)+1)*e.dim], slots, st.steps[i], 1)
		}
		st.mu.Unlock()
	}
}

// Len is the number of rows this shard holds.
func (e *embTable) Len() int {
	n := 0
	for i := range e.stripes {
		st := &e.stripes[i]
		st.mu.RLock()
		n += len(st.ids)
		st.mu.RUnlock()
	}
	return n
}

// sparseGrad is one validated IndexedSlices, duplicates merged.
type sparseGrad struct {
	t     *embTable
	ids   []int64
	grads []float32
}

// validateSparse checks every IndexedSlices of a push and merges duplicate
// ids (summing their rows). Any problem is InvalidArgument before anything
// is applied.
func (t *table) validateSparse(in []*pserverpb.IndexedSlices, index, numPS int) ([]sparseGrad, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]sparseGrad, 0, len(in))
	for _, s := range in {
		name := s.GetValues().GetName()
		e := t.emb[name]
		if e == nil {
			return nil, status.Errorf(codes.InvalidArgument, "embedding gradient %q: no such table", name)
		}
		for _, o := range out {
			if o.t == e {
				return nil, status.Errorf(codes.InvalidArgument, "embedding gradient %q given twice", name)
			}
		}
		ids := s.GetIds()
		if err := wire.CheckShape(s.GetValues(), []int{len(ids), e.dim}); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "embedding gradient %q (%d ids, dim %d): %v", name, len(ids), e.dim, err)
		}
		for _, id := range ids {
			if id < 0 {
				return nil, status.Errorf(codes.InvalidArgument, "embedding gradient %q: negative id %d", name, id)
			}
			if EmbeddingShardOf(id, numPS) != index {
				return nil, status.Errorf(codes.InvalidArgument, "embedding gradient %q: id %d belongs to shard %d of %d, this is shard %d", name, id, EmbeddingShardOf(id, numPS), numPS, index)
			}
		}
		_, vals, err := wire.DecodeTensor(s.GetValues())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "embedding gradient %q: %v", name, err)
		}
		uids, merged := mergeDuplicates(ids, vals, e.dim)
		out = append(out, sparseGrad{t: e, ids: uids, grads: merged})
	}
	return out, nil
}

// mergeDuplicates returns ids without repeats (first-seen order) and the
// sum of each id's rows. Without duplicates it returns its inputs.
func mergeDuplicates(ids []int64, vals []float32, dim int) ([]int64, []float32) {
	pos := make(map[int64]int, len(ids))
	dup := false
	for _, id := range ids {
		if _, ok := pos[id]; ok {
			dup = true
			break
		}
		pos[id] = 0
	}
	if !dup {
		return ids, vals
	}
	clear(pos)
	uids := make([]int64, 0, len(ids))
	merged := make([]float32, 0, len(vals))
	for k, id := range ids {
		row := vals[k*dim : (k+1)*dim]
		j, ok := pos[id]
		if !ok {
			pos[id] = len(uids)
			uids = append(uids, id)
			merged = append(merged, row...)
			continue
		}
		dst := merged[j*dim : (j+1)*dim]
		for d, v := range row {
			dst[d] += v
		}
	}
	return uids, merged
}

// newEmbTables builds the tables of a PushModel or checkpoint.
func (s *Server) newEmbTables(infos []*pserverpb.EmbeddingTableInfo) (map[string]*embTable, error) {
	if len(infos) == 0 {
		return nil, nil
	}
	if s.rule == nil {
		return nil, status.Errorf(codes.InvalidArgument, "embedding tables: optimizer %s has no sparse form", s.opt.Name())
	}
	m := make(map[string]*embTable, len(infos))
	for _, info := range infos {
		if _, dup := m[info.GetName()]; dup {
			return nil, status.Errorf(codes.InvalidArgument, "embedding table %q given twice", info.GetName())
		}
		e, err := newEmbTable(info, s.rule)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "push model: %v", err)
		}
		m[info.GetName()] = e
	}
	return m, nil
}

// PullEmbeddingVectors returns the rows of ids, in order, creating the
// missing ones. Every id must belong to this shard.
func (s *Server) PullEmbeddingVectors(_ context.Context, req *pserverpb.PullEmbeddingVectorsRequest) (*pserverpb.PullEmbeddingVectorsResponse, error) {
	t := s.table.Load()
	if t == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "ps shard %d is not initialized: push the model first", s.index)
	}
	e := t.emb[req.GetName()]
	if e == nil {
		return nil, status.Errorf(codes.InvalidArgument, "pull embedding vectors: no table %q", req.GetName())
	}
	ids := req.GetIds()
	for _, id := range ids {
		if id < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "pull embedding vectors %q: negative id %d", req.GetName(), id)
		}
		if EmbeddingShardOf(id, s.numShards()) != s.index {
			return nil, status.Errorf(codes.InvalidArgument, "pull embedding vectors %q: id %d belongs to shard %d of %d, this is shard %d", req.GetName(), id, EmbeddingShardOf(id, s.numShards()), s.numShards(), s.index)
		}
	}
	rows := make([]float32, len(ids)*e.dim)
	e.lookup(ids, rows, !s.frozenTables)
	return &pserverpb.PullEmbeddingVectorsResponse{Rows: wire.EncodeTensor(req.GetName(), []int{len(ids), e.dim}, rows)}, nil
}

// EmbeddingRows returns a copy of a table's rows on this shard by id
// (tests), or nil when there is no such table.
func (s *Server) EmbeddingRows(name string) map[int64][]float32 {
	t := s.table.Load()
	if t == nil || t.emb[name] == nil {
		return nil
	}
	e := t.emb[name]
	out := map[int64][]float32{}
	for i := range e.stripes {
		st := &e.stripes[i]
		st.mu.RLock()
		for j, id := range st.ids {
			out[id] = slices.Clone(e.rowLocked(st, int32(j))[:e.dim])
		}
		st.mu.RUnlock()
	}
	return out
}

// snapshotEmb copies a table's rows, steps and slots, sorted by id. Each
// row is consistent; the table as a whole is as consistent as a pull.
func (s *Server) snapshotEmb(e *embTable) *pserverpb.EmbeddingTableCheckpoint {
	// Copy each stripe's rows flat under its read lock (a few large
	// allocations, not one per row), then sort a permutation by id.
	var ids, steps []int64
	var flat []float32
	for i := range e.stripes {
		st := &e.stripes[i]
		st.mu.RLock()
		ids = append(ids, st.ids...)
		steps = append(steps, st.steps...)
		for c, chunk := range st.chunks {
			rows := min(chunkRows, len(st.ids)-c*chunkRows)
			flat = append(flat, chunk[:rows*e.stride]...)
		}
		st.mu.RUnlock()
	}
	n := len(ids)
	perm := make([]int32, n)
	for i := range perm {
		perm[i] = int32(i)
	}
	slices.SortFunc(perm, func(a, b int32) int { return cmp.Compare(ids[a], ids[b]) })
	c := &pserverpb.EmbeddingTableCheckpoint{Info: e.info, Ids: make([]int64, n)}
	vals := make([]float32, n*e.dim)
	slotVals := make([][]float32, e.nslots)
	for k := range slotVals {
		slotVals[k] = make([]float32, n*e.dim)
	}
	if e.nslots > 0 {
		c.Steps = make([]int64, n)
	}
	for k, p := range perm {
		row := flat[int(p)*e.stride : (int(p)+1)*e.stride]
		c.Ids[k] = ids[p]
		copy(vals[k*e.dim:(k+1)*e.dim], row[:e.dim])
		for sl := range slotVals {
			copy(slotVals[sl][k*e.dim:(k+1)*e.dim], row[(sl+1)*e.dim:(sl+2)*e.dim])
		}
		if c.Steps != nil {
			c.Steps[k] = steps[p]
		}
	}
	c.Values = wire.EncodeTensor(e.info.GetName(), []int{n, e.dim}, vals)
	for sl, name := range s.rule.SlotNames() {
		c.Slots = append(c.Slots, wire.EncodeTensor(name, []int{n, e.dim}, slotVals[sl]))
	}
	return c
}

// restoreEmb loads a checkpointed table's rows into e. Slots that do not
// fit this optimizer (other names) are dropped (rows keep their values,
// slots and steps restart); it reports whether slots were restored.
func (s *Server) restoreEmb(e *embTable, c *pserverpb.EmbeddingTableCheckpoint, numShards int) (bool, error) {
	ids := c.GetIds()
	_, vals, err := wire.DecodeTensor(c.GetValues())
	if err != nil || len(vals) != len(ids)*e.dim {
		return false, fmt.Errorf("embedding table %q: values do not hold %d rows of dim %d (%v)", e.info.GetName(), len(ids), e.dim, err)
	}
	names := s.rule.SlotNames()
	var slotVals [][]float32
	fit := len(c.GetSlots()) == len(names) && len(c.GetSteps()) == len(ids) && len(names) > 0
	if fit {
		byName := map[string][]float32{}
		for _, t := range c.GetSlots() {
			_, v, err := wire.DecodeTensor(t)
			if err != nil || len(v) != len(vals) {
				return false, fmt.Errorf("embedding table %q: slot %q does not hold %d rows (%v)", e.info.GetName(), t.GetName(), len(ids), err)
			}
			byName[t.GetName()] = v
		}
		for _, n := range names {
			v, ok := byName[n]
			if !ok {
				fit = false
				break
			}
			slotVals = append(slotVals, v)
		}
	}
	for k, id := range ids {
		if id < 0 || EmbeddingShardOf(id, numShards) != s.index {
			return false, fmt.Errorf("embedding table %q: id %d does not belong to shard %d of %d", e.info.GetName(), id, s.index, numShards)
		}
		st := &e.stripes[stripeOf(id)]
		if _, dup := st.index[id]; dup {
			return false, fmt.Errorf("embedding table %q: id %d given twice", e.info.GetName(), id)
		}
		i := e.createLocked(st, id) // not shared yet: no lock needed
		r := e.rowLocked(st, i)
		copy(r[:e.dim], vals[k*e.dim:(k+1)*e.dim])
		if fit {
			for sl := range slotVals {
				copy(r[(sl+1)*e.dim:(sl+2)*e.dim], slotVals[sl][k*e.dim:(k+1)*e.dim])
			}
			st.steps[i] = c.GetSteps()[k]
		}
	}
	return fit, nil
}
