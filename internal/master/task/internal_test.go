package task

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestDeque(t *testing.T) {
	type op struct {
		front bool // push front instead of back
		pop   bool
		v     int64
	}
	tests := []struct {
		name string
		ops  []op
		want []int64
	}{
		{"empty", nil, []int64{}},
		{"fifo", []op{{v: 1}, {v: 2}, {v: 3}}, []int64{1, 2, 3}},
		{"front", []op{{v: 1}, {front: true, v: 0}, {front: true, v: -1}}, []int64{-1, 0, 1}},
		{"pop", []op{{v: 1}, {v: 2}, {pop: true}, {v: 3}}, []int64{2, 3}},
		{"pop empty", []op{{pop: true}, {v: 1}}, []int64{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var q deque
			for _, o := range tc.ops {
				switch {
				case o.pop:
					q.popFront()
				case o.front:
					q.pushFront(o.v)
				default:
					q.pushBack(o.v)
				}
			}
			if got := q.items(); !reflect.DeepEqual(got, tc.want) || q.len() != len(tc.want) {
				t.Fatalf("items = %v (len %d), want %v", got, q.len(), tc.want)
			}
		})
	}
}

// TestDequeModel checks the ring buffer against a plain slice through many
// wrap-arounds and growths.
func TestDequeModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		r := rand.New(rand.NewPCG(seed, 0))
		var q deque
		var model []int64
		for i := range int64(5000) {
			switch r.IntN(3) {
			case 0:
				q.pushBack(i)
				model = append(model, i)
			case 1:
				q.pushFront(i)
				model = append([]int64{i}, model...)
			case 2:
				v, ok := q.popFront()
				if ok != (len(model) > 0) || (ok && v != model[0]) {
					t.Fatalf("seed %d step %d: popFront = %d,%v; model %v", seed, i, v, ok, model)
				}
				if ok {
					model = model[1:]
				}
			}
		}
		if got := q.items(); !reflect.DeepEqual(got, append([]int64{}, model...)) {
			t.Fatalf("seed %d: items differ from model", seed)
		}
	}
}

func TestCoverageMeasure(t *testing.T) {
	tests := []struct {
		name              string
		ranges            []rangeKey
		wantOnce, wantTwo int64
	}{
		{"empty", nil, 0, 0},
		{"disjoint", []rangeKey{{"a", 0, 10}, {"a", 10, 15}, {"b", 0, 3}}, 18, 0},
		{"same range twice", []rangeKey{{"a", 0, 10}, {"a", 0, 10}}, 10, 10},
		{"same range three times", []rangeKey{{"a", 0, 10}, {"a", 0, 10}, {"a", 0, 10}}, 10, 10},
		{"overlap", []rangeKey{{"a", 0, 10}, {"a", 5, 20}}, 20, 5},
		{"nested", []rangeKey{{"a", 0, 100}, {"a", 10, 20}, {"a", 15, 30}}, 100, 20},
		{"gap", []rangeKey{{"a", 0, 5}, {"a", 10, 15}}, 10, 0},
		{"shards do not mix", []rangeKey{{"a", 50, 60}, {"b", 0, 100}}, 110, 0},
		{"empty range ignored", []rangeKey{{"a", 5, 5}}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := coverage{}
			for _, k := range tc.ranges {
				c[k]++
			}
			once, two := c.measure()
			if once != tc.wantOnce || two != tc.wantTwo {
				t.Fatalf("measure = %d,%d, want %d,%d", once, two, tc.wantOnce, tc.wantTwo)
			}
		})
	}
}
