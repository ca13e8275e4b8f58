package job

import "slices"

// stepSet is a set of step numbers kept as sorted, disjoint, inclusive
// spans: steps are reported in order, so a job's whole history is usually
// one span, whatever its length.
type stepSet struct{ spans [][2]int64 }

func (s *stepSet) has(step int64) bool {
	i, found := s.find(step)
	return found || i > 0 && s.spans[i-1][1] >= step
}

// find is the index of the first span starting at or after step, and
// whether one starts at step.
func (s *stepSet) find(step int64) (int, bool) {
	return slices.BinarySearchFunc(s.spans, step, func(sp [2]int64, v int64) int {
		switch {
		case sp[0] < v:
			return -1
		case sp[0] > v:
			return 1
		}
		return 0
	})
}

// add adds step (a no-op when present).
func (s *stepSet) add(step int64) {
	if s.has(step) {
		return
	}
	i, _ := s.find(step)
	joinsPrev := i > 0 && s.spans[i-1][1] == step-1
	joinsNext := i < len(s.spans) && s.spans[i][0] == step+1
	switch {
	case joinsPrev && joinsNext:
		s.spans[i-1][1] = s.spans[i][1]
		s.spans = slices.Delete(s.spans, i, i+1)
	case joinsPrev:
		s.spans[i-1][1] = step
	case joinsNext:
		s.spans[i][0] = step
	default:
		s.spans = slices.Insert(s.spans, i, [2]int64{step, step})
	}
}

// dropAbove removes every step after at and returns how many there were.
func (s *stepSet) dropAbove(at int64) int64 {
	var n int64
	for len(s.spans) > 0 {
		last := &s.spans[len(s.spans)-1]
		switch {
		case last[0] > at:
			n += last[1] - last[0] + 1
			s.spans = s.spans[:len(s.spans)-1]
			continue
		case last[1] > at:
			n += last[1] - at
			last[1] = at
		}
		break
	}
	return n
}

// list is the spans, for persisting.
func (s *stepSet) list() [][2]int64 { return slices.Clone(s.spans) }
