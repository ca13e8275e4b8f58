package spans

import (
	"math/rand"
	"slices"
	"testing"
)

// TestSet checks Set against a plain map over random adds and
// rewinds, and that in-order steps stay one span.
func TestSet(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 200; round++ {
		var s Set[int64]
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
				if got := s.DropAbove(at); got != n {
					t.Fatalf("round %d: dropAbove(%d) = %d, want %d", round, at, got, n)
				}
				continue
			}
			k := 1 + rng.Int63n(60)
			s.Add(k)
			want[k] = true
		}
		for k := int64(0); k <= 61; k++ {
			if s.Has(k) != want[k] {
				t.Fatalf("round %d: has(%d) = %v, want %v (spans %v)", round, k, s.Has(k), want[k], s.spans)
			}
		}
		for i, sp := range s.spans {
			if sp[0] >= sp[1] || i > 0 && s.spans[i-1][1] >= sp[0] {
				t.Fatalf("round %d: spans not sorted, disjoint and apart: %v", round, s.spans)
			}
		}
	}
	var s Set[int64]
	for k := int64(1); k <= 100000; k++ {
		s.Add(k)
	}
	if len(s.spans) != 1 {
		t.Fatalf("100000 steps in order: %d spans", len(s.spans))
	}
	if got := FromPairs(s.Pairs()); got.Len() != 1 || !got.Has(1) || !got.Has(100000) || got.Has(100001) {
		t.Fatalf("FromPairs(Pairs()) = %v", got.Pairs())
	}
}

func TestFromPairs(t *testing.T) {
	s := FromPairs([][2]int32{{5, 7}, {0, 2}, {1, 3}, {7, 9}, {4, 4}, {12, 10}})
	if got := s.Pairs(); !slices.Equal(got, [][2]int32{{0, 3}, {5, 9}}) {
		t.Fatalf("FromPairs = %v, want [[0 3] [5 9]]", got)
	}
}
