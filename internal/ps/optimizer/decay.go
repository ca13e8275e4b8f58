package optimizer

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// decayed is Keras's (legacy) inverse-time learning-rate decay around any
// optimizer: update t of a parameter uses lr / (1 + decay·t). Asynchronous
// SGD ends noisy at a constant rate; decaying it settles the final model.
type decayed struct {
	Optimizer
	decay float64

	mu    sync.Mutex
	steps map[string]int64
}

func withDecay(o Optimizer, decay float64) (Optimizer, error) {
	if decay < 0 {
		return nil, fmt.Errorf("decay must not be negative, got %v", decay)
	}
	if decay == 0 {
		return o, nil
	}
	return &decayed{Optimizer: o, decay: decay, steps: map[string]int64{}}, nil
}

// String implements Optimizer.
func (d *decayed) String() string {
	s := d.Optimizer.String()
	sep := ","
	if !strings.Contains(s, ":") {
		sep = ":"
	}
	return s + sep + "decay=" + strconv.FormatFloat(d.decay, 'g', -1, 64)
}

// Apply implements Optimizer.
func (d *decayed) Apply(name string, param, grad []float32, lrScale float32) error {
	d.mu.Lock()
	t := d.steps[name]
	d.mu.Unlock()
	scale := lrScale / float32(1+d.decay*float64(t))
	if err := d.Optimizer.Apply(name, param, grad, scale); err != nil {
		return err
	}
	d.mu.Lock()
	d.steps[name]++
	d.mu.Unlock()
	return nil
}

// SetSlots implements Optimizer; the decay resumes from the restored step.
func (d *decayed) SetSlots(name string, slots map[string][]float32, step int64) error {
	if err := d.Optimizer.SetSlots(name, slots, step); err != nil {
		return err
	}
	d.mu.Lock()
	d.steps[name] = step
	d.mu.Unlock()
	return nil
}
