package optimizer

import (
	"math"
	"testing"
)

// TestApplyRowMatchesDense: a row updated with ApplyRow (slots and step
// kept by the caller) equals, bit for bit, the dense Apply of a parameter
// holding just that row, for every optimizer, with decay too.
func TestApplyRowMatchesDense(t *testing.T) {
	specs := []string{
		"sgd:learning_rate=0.1",
		"momentum:learning_rate=0.1,momentum=0.9",
		"momentum:learning_rate=0.1,momentum=0.9,nesterov=true",
		"adam:learning_rate=0.01",
		"adam:learning_rate=0.01,amsgrad=true",
		"adagrad:learning_rate=0.1",
		"adagrad:learning_rate=0.1,initial_accumulator_value=0.5",
		"sgd:learning_rate=0.1,decay=0.5",
		"adam:learning_rate=0.01,decay=0.1",
	}
	grads := [][]float32{{0.5, -1, 2, 0}, {-0.25, 3, 0, 1}, {1, 1, -1, -2}, {0, 0.5, 0.5, 4}}
	for _, spec := range specs {
		t.Run(spec, func(t *testing.T) {
			dense := mustParse(t, spec)
			sp := mustParse(t, spec)
			rule, err := AsRowOptimizer(sp)
			if err != nil {
				t.Fatal(err)
			}
			p := []float32{1, -2, 0.5, 3}
			row := append([]float32(nil), p...)
			slots := make([][]float32, len(rule.SlotNames()))
			for i := range slots {
				slots[i] = make([]float32, len(row))
				for j := range slots[i] {
					slots[i][j] = rule.InitialSlot()
				}
			}
			for step, g := range grads {
				if err := dense.Apply("row", p, g, 1); err != nil {
					t.Fatal(err)
				}
				rule.ApplyRow(row, g, slots, int64(step+1), 1)
				for i := range p {
					if math.Float32bits(p[i]) != math.Float32bits(row[i]) {
						t.Fatalf("step %d: row %v, dense %v", step+1, row, p)
					}
				}
			}
			want, n, ok := dense.Slots("row")
			if !ok || n != int64(len(grads)) {
				t.Fatalf("dense slots: %v %v", n, ok)
			}
			for i, name := range rule.SlotNames() {
				for j := range slots[i] {
					if math.Float32bits(slots[i][j]) != math.Float32bits(want[name][j]) {
						t.Fatalf("slot %s: %v, dense %v", name, slots[i], want[name])
					}
				}
			}
		})
	}
}

// TestLazyAdamHand checks one sparse Adam step by hand: t=1 bias
// correction, so the step is lr*g/(|g|+eps') ≈ lr*sign(g).
func TestLazyAdamHand(t *testing.T) {
	rule, _ := AsRowOptimizer(mustParse(t, "adam:learning_rate=0.1,epsilon=0"))
	row := []float32{1, 1}
	slots := [][]float32{make([]float32, 2), make([]float32, 2)}
	rule.ApplyRow(row, []float32{2, -0.5}, slots, 1, 1)
	near(t, 1, row, []float64{0.9, 1.1})
	near(t, 1, slots[0], []float64{0.2, -0.05})
	near(t, 1, slots[1], []float64{0.004, 0.00025})
}
