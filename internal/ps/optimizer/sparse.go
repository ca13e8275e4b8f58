package optimizer

import "fmt"

// RowOptimizer is the row-wise (sparse) form of an optimizer, used for
// embedding tables. Unlike Apply it keeps no state itself: the caller (the
// PS's embedding table) stores each row's slots and update count next to
// the row, so a table of millions of rows costs no per-row map entries or
// pointers here.
//
// ApplyRow updates one row exactly as Apply would update a dense parameter
// holding only that row, given the same slots and step (bit for bit). Rows
// absent from a push are not touched at all: for Adam that is the standard
// "lazy Adam" of sparse updates (TF's LazyAdam, ElasticDL's Go PS), where a
// dense Adam step would still decay m and v and move every row with m != 0;
// and each row's bias correction uses the row's own step count.
type RowOptimizer interface {
	// SlotNames are the names of the per-row slots, in the order ApplyRow
	// takes them (the names Slots/SetSlots use for dense parameters).
	SlotNames() []string
	// InitialSlot is the value new slots start at (Adagrad's initial
	// accumulator, 0 otherwise).
	InitialSlot() float32
	// ApplyRow updates param (one row) in place from grad, with slots[i]
	// the row's slot SlotNames()[i] (each len(param)) and step the row's
	// update count INCLUDING this update (>= 1). lrScale multiplies the
	// learning rate. The caller validates lengths and serializes calls for
	// one row.
	ApplyRow(param, grad []float32, slots [][]float32, step int64, lrScale float32)
}

// SlotNames implements RowOptimizer.
func (b *base) SlotNames() []string { return b.slotNames }

// InitialSlot implements RowOptimizer.
func (b *base) InitialSlot() float32 { return b.initial }

// AsRowOptimizer returns the row-wise form of o; every optimizer Parse
// returns has one.
func AsRowOptimizer(o Optimizer) (RowOptimizer, error) {
	r, ok := o.(RowOptimizer)
	if !ok {
		return nil, fmt.Errorf("optimizer %s has no sparse (row-wise) form", o.Name())
	}
	return r, nil
}

// ApplyRow implements RowOptimizer: update t (1-based) of a row uses
// lr / (1 + decay·(t-1)), the dense rule with the row's own count.
func (d *decayed) ApplyRow(param, grad []float32, slots [][]float32, step int64, lrScale float32) {
	scale := lrScale / float32(1+d.decay*float64(step-1))
	d.Optimizer.(RowOptimizer).ApplyRow(param, grad, slots, step, scale)
}

// SlotNames implements RowOptimizer.
func (d *decayed) SlotNames() []string { return d.Optimizer.(RowOptimizer).SlotNames() }

// InitialSlot implements RowOptimizer.
func (d *decayed) InitialSlot() float32 { return d.Optimizer.(RowOptimizer).InitialSlot() }
