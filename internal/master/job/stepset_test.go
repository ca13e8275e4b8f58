package job

import (
	"math/rand"
	"testing"
)

// TestStepSet checks stepSet against a plain map over random adds and
// rewinds, and that in-order steps stay one span.
func TestStepSet(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 200; round++ {
		var s stepSet
		want := map[int64]bool{}
		for op := 0; op < 300; op++ {
			if rng.Intn(20) == 0 {
				at := rng.Int63n(60)
				var n int64
				for k := range want {
					if k > at {
						delete(want, k)
						n++
					}
				}
				if got := s.dropAbove(at); got != n {
					t.Fatalf("round %d: dropAbove(%d) = %d, want %d", round, at, got, n)
				}
				continue
			}
			k := 1 + rng.Int63n(60)
			s.add(k)
			want[k] = true
		}
		for k := int64(0); k <= 61; k++ {
			if s.has(k) != want[k] {
				t.Fatalf("round %d: has(%d) = %v, want %v (spans %v)", round, k, s.has(k), want[k], s.spans)
			}
		}
		for i, sp := range s.spans {
			if sp[0] > sp[1] || i > 0 && s.spans[i-1][1]+1 >= sp[0] {
				t.Fatalf("round %d: spans not sorted, disjoint and apart: %v", round, s.spans)
			}
		}
	}
	var s stepSet
	for k := int64(1); k <= 100000; k++ {
		s.add(k)
	}
	if len(s.spans) != 1 {
		t.Fatalf("100000 steps in order: %d spans", len(s.spans))
	}
}
