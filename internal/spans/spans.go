// Package spans is a set of integers kept as sorted, disjoint, half-open
// [lo, hi) spans: the master's record of reported steps, a PS shard's
// record of applied minibatches. Both grow in order, so a long history is
// usually one span.
package spans

import (
	"cmp"
	"slices"
)

// Set is a set of integers. The zero value is empty.
type Set[T ~int32 | ~int64] struct{ spans [][2]T }

// FromPairs builds a set from [lo, hi) pairs (as Pairs returns them);
// empty or reversed pairs add nothing.
func FromPairs[T ~int32 | ~int64](pairs [][2]T) Set[T] {
	var s Set[T]
	for _, p := range pairs {
		if p[0] < p[1] {
			s.spans = append(s.spans, p)
		}
	}
	slices.SortFunc(s.spans, func(a, b [2]T) int { return cmp.Compare(a[0], b[0]) })
	out := s.spans[:0]
	for _, p := range s.spans {
		if n := len(out); n > 0 && out[n-1][1] >= p[0] {
			out[n-1][1] = max(out[n-1][1], p[1])
			continue
		}
		out = append(out, p)
	}
	s.spans = out
	return s
}

// find is the index of the first span starting after x.
func (s *Set[T]) find(x T) int {
	i, found := slices.BinarySearchFunc(s.spans, x, func(sp [2]T, v T) int { return cmp.Compare(sp[0], v) })
	if found {
		i++
	}
	return i
}

// Has reports whether x is in the set.
func (s *Set[T]) Has(x T) bool {
	i := s.find(x)
	return i > 0 && s.spans[i-1][1] > x
}

// Add adds x (a no-op when present).
func (s *Set[T]) Add(x T) {
	if s.Has(x) {
		return
	}
	i := s.find(x)
	joinsPrev := i > 0 && s.spans[i-1][1] == x
	joinsNext := i < len(s.spans) && s.spans[i][0] == x+1
	switch {
	case joinsPrev && joinsNext:
		s.spans[i-1][1] = s.spans[i][1]
		s.spans = slices.Delete(s.spans, i, i+1)
	case joinsPrev:
		s.spans[i-1][1] = x + 1
	case joinsNext:
		s.spans[i][0] = x
	default:
		s.spans = slices.Insert(s.spans, i, [2]T{x, x + 1})
	}
}

// DropAbove removes every element after at and returns how many there were.
func (s *Set[T]) DropAbove(at T) int64 {
	var n int64
	for len(s.spans) > 0 {
		last := &s.spans[len(s.spans)-1]
		if last[0] > at {
			n += int64(last[1] - last[0])
			s.spans = s.spans[:len(s.spans)-1]
			continue
		}
		if last[1] > at+1 {
			n += int64(last[1] - at - 1)
			last[1] = at + 1
		}
		break
	}
	return n
}

// Pairs is the set as [lo, hi) pairs, in order (a copy).
func (s *Set[T]) Pairs() [][2]T { return slices.Clone(s.spans) }

// Len is the number of spans.
func (s *Set[T]) Len() int { return len(s.spans) }
