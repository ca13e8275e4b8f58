package ps

import (
	"cmp"
	"slices"
	"sync"

	"elasticdl/proto/pserverpb"
)

// minibatch names a minibatch: the index-th of a task's fixed record order.
type minibatch struct {
	task  int64
	index int32
}

// appliedSet is what a shard's parameters hold, by minibatch, so that a
// minibatch is applied at most once whoever pushes it and however often:
// per task, the indices applied (sorted, disjoint [start, end) spans: a
// task's minibatches come in order, so usually one span), and the ones a
// push holds — being applied, or waiting in the sync accumulator.
type appliedSet struct {
	mu      sync.Mutex
	applied map[int64][][2]int32
	held    map[minibatch]bool
}

func newAppliedSet() *appliedSet {
	return &appliedSet{applied: map[int64][][2]int32{}, held: map[minibatch]bool{}}
}

// claimResult is what claim found.
type claimResult int

const (
	claimed        claimResult = iota // the push applies it
	alreadyApplied                    // nothing to do
	heldByAnother                     // another push is applying it: ask again
)

// claim reserves k for a push.
func (a *appliedSet) claim(k minibatch) claimResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case hasIndex(a.applied[k.task], k.index):
		return alreadyApplied
	case a.held[k]:
		return heldByAnother
	}
	a.held[k] = true
	return claimed
}

// commit marks claimed minibatches applied.
func (a *appliedSet) commit(ks ...minibatch) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range ks {
		delete(a.held, k)
		a.applied[k.task] = addIndex(a.applied[k.task], k.index)
	}
}

// release gives up claimed minibatches that were not applied.
func (a *appliedSet) release(ks ...minibatch) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range ks {
		delete(a.held, k)
	}
}

// list returns the applied minibatches of tasks (nil: of every task), by
// task ID.
func (a *appliedSet) list(tasks []int64) []*pserverpb.AppliedMinibatches {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*pserverpb.AppliedMinibatches
	add := func(id int64, spans [][2]int32) {
		m := &pserverpb.AppliedMinibatches{TaskId: id, Spans: make([]int32, 0, 2*len(spans))}
		for _, s := range spans {
			m.Spans = append(m.Spans, s[0], s[1])
		}
		out = append(out, m)
	}
	if tasks == nil {
		for id, spans := range a.applied {
			add(id, spans)
		}
		slices.SortFunc(out, func(x, y *pserverpb.AppliedMinibatches) int { return cmp.Compare(x.TaskId, y.TaskId) })
		return out
	}
	for _, id := range tasks {
		if spans, ok := a.applied[id]; ok {
			add(id, spans)
		}
	}
	return out
}

// restore replaces the applied minibatches by list (a checkpoint's).
func (a *appliedSet) restore(list []*pserverpb.AppliedMinibatches) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applied = map[int64][][2]int32{}
	for _, m := range list {
		s := m.GetSpans()
		for i := 0; i+1 < len(s); i += 2 {
			for x := s[i]; x < s[i+1]; x++ {
				a.applied[m.GetTaskId()] = addIndex(a.applied[m.GetTaskId()], x)
			}
		}
	}
}

func hasIndex(spans [][2]int32, i int32) bool {
	k, _ := slices.BinarySearchFunc(spans, i, func(s [2]int32, v int32) int { return cmp.Compare(s[0], v) })
	// spans[k] starts at or after i; spans[k-1] starts before it.
	return k < len(spans) && spans[k][0] == i || k > 0 && spans[k-1][1] > i
}

func addIndex(spans [][2]int32, i int32) [][2]int32 {
	if hasIndex(spans, i) {
		return spans
	}
	k, _ := slices.BinarySearchFunc(spans, i, func(s [2]int32, v int32) int { return cmp.Compare(s[0], v) })
	joinsPrev := k > 0 && spans[k-1][1] == i
	joinsNext := k < len(spans) && spans[k][0] == i+1
	switch {
	case joinsPrev && joinsNext:
		spans[k-1][1] = spans[k][1]
		return slices.Delete(spans, k, k+1)
	case joinsPrev:
		spans[k-1][1] = i + 1
	case joinsNext:
		spans[k][0] = i
	default:
		return slices.Insert(spans, k, [2]int32{i, i + 1})
	}
	return spans
}
