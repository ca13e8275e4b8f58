// Package optimizer holds the update rules a parameter server applies to
// pushed gradients: SGD (with optional momentum / Nesterov), Adam (with
// optional AMSGrad) and Adagrad, following the Keras/TensorFlow 2
// formulations and defaults so jobs ported from the original ElasticDL train
// the same way. Optimizer state ("slots") is kept per parameter name.
package optimizer

import (
	"fmt"
	"math"
	"sync"
)

// Optimizer updates parameters in place from gradients.
//
// Implementations are safe for concurrent use; calls for different
// parameter names proceed in parallel, calls for the same name serialize.
type Optimizer interface {
	// Name is the optimizer kind as written in a spec, e.g. "adam".
	Name() string
	// String is the full spec with every argument, defaults included, in a
	// form Parse accepts.
	String() string
	// Apply updates param in place from grad; slots (momentum, m/v,
	// accumulators) are kept per parameter name. lrScale multiplies the
	// learning rate (staleness modulation; 1 normally) and must be finite
	// and positive. On error (length mismatch, bad lrScale, slots of another
	// length under that name) nothing is changed.
	Apply(name string, param, grad []float32, lrScale float32) error
	// Slots returns a copy of the optimizer state of a parameter: slot
	// name -> values, and the number of updates applied. ok is false when
	// the parameter has never been updated.
	Slots(name string) (slots map[string][]float32, step int64, ok bool)
	// SetSlots replaces the state of a parameter (restoring a checkpoint).
	// slots must hold exactly the optimizer's slot names, all of one length.
	SetSlots(name string, slots map[string][]float32, step int64) error
}

// state is one parameter's slots. Its mutex, not the table's, serializes
// updates so different parameters update in parallel.
type state struct {
	mu    sync.Mutex
	step  int64
	slots [][]float32 // indexed like base.slotNames
}

// base is the slot bookkeeping shared by all optimizers.
type base struct {
	slotNames []string
	initial   float32 // initial slot value (Adagrad's accumulator)

	mu     sync.RWMutex
	states map[string]*state
}

func newBase(initial float32, slotNames ...string) base {
	return base{slotNames: slotNames, initial: initial, states: make(map[string]*state)}
}

// get returns the state of name, creating it for an n-element parameter.
func (b *base) get(name string, n int) (*state, error) {
	b.mu.RLock()
	st := b.states[name]
	b.mu.RUnlock()
	if st == nil {
		b.mu.Lock()
		if st = b.states[name]; st == nil {
			st = &state{slots: make([][]float32, len(b.slotNames))}
			for i := range st.slots {
				st.slots[i] = make([]float32, n)
				if b.initial != 0 {
					for j := range st.slots[i] {
						st.slots[i][j] = b.initial
					}
				}
			}
			b.states[name] = st
		}
		b.mu.Unlock()
	}
	if len(st.slots) > 0 && len(st.slots[0]) != n {
		return nil, fmt.Errorf("optimizer: parameter %q has %d elements but its slots have %d", name, n, len(st.slots[0]))
	}
	return st, nil
}

// apply validates, then runs update under the parameter's lock with the
// step count already incremented (Adam's bias correction needs t >= 1).
func (b *base) apply(name string, param, grad []float32, lrScale float32, update func(st *state, param, grad []float32, lrScale float64)) error {
	if len(param) != len(grad) {
		return fmt.Errorf("optimizer: parameter %q has %d elements, gradient has %d", name, len(param), len(grad))
	}
	if !(lrScale > 0) || math.IsInf(float64(lrScale), 1) {
		return fmt.Errorf("optimizer: parameter %q: learning rate scale %v must be finite and positive", name, lrScale)
	}
	st, err := b.get(name, len(param))
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.step++
	update(st, param, grad[:len(param)], float64(lrScale))
	return nil
}

func (b *base) Slots(name string) (map[string][]float32, int64, bool) {
	b.mu.RLock()
	st := b.states[name]
	b.mu.RUnlock()
	if st == nil {
		return nil, 0, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make(map[string][]float32, len(b.slotNames))
	for i, s := range b.slotNames {
		out[s] = append([]float32(nil), st.slots[i]...)
	}
	return out, st.step, true
}

func (b *base) SetSlots(name string, slots map[string][]float32, step int64) error {
	if step < 0 {
		return fmt.Errorf("optimizer: parameter %q: negative step %d", name, step)
	}
	if len(slots) != len(b.slotNames) {
		return fmt.Errorf("optimizer: parameter %q: got %d slots, want %v", name, len(slots), b.slotNames)
	}
	st := &state{step: step, slots: make([][]float32, len(b.slotNames))}
	for i, s := range b.slotNames {
		v, ok := slots[s]
		if !ok {
			return fmt.Errorf("optimizer: parameter %q: missing slot %q (want %v)", name, s, b.slotNames)
		}
		if i > 0 && len(v) != len(st.slots[0]) {
			return fmt.Errorf("optimizer: parameter %q: slot %q has %d elements, slot %q has %d", name, s, len(v), b.slotNames[0], len(st.slots[0]))
		}
		st.slots[i] = append([]float32(nil), v...)
	}
	b.mu.Lock()
	b.states[name] = st
	b.mu.Unlock()
	return nil
}

func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }
