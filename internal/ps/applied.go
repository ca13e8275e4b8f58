package ps

import (
	"cmp"
	"slices"
	"sync"

	"elasticdl/internal/spans"
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
	applied map[int64]*spans.Set[int32]
	held    map[minibatch]bool
}

func newAppliedSet() *appliedSet {
	return &appliedSet{applied: map[int64]*spans.Set[int32]{}, held: map[minibatch]bool{}}
}

func (a *appliedSet) has(k minibatch) bool {
	s := a.applied[k.task]
	return s != nil && s.Has(k.index)
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
	case a.has(k):
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
		s := a.applied[k.task]
		if s == nil {
			s = &spans.Set[int32]{}
			a.applied[k.task] = s
		}
		s.Add(k.index)
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
	add := func(id int64, set *spans.Set[int32]) {
		m := &pserverpb.AppliedMinibatches{TaskId: id, Spans: make([]int32, 0, 2*set.Len())}
		for _, p := range set.Pairs() {
			m.Spans = append(m.Spans, p[0], p[1])
		}
		out = append(out, m)
	}
	if tasks == nil {
		for id, set := range a.applied {
			add(id, set)
		}
		slices.SortFunc(out, func(x, y *pserverpb.AppliedMinibatches) int { return cmp.Compare(x.TaskId, y.TaskId) })
		return out
	}
	for _, id := range tasks {
		if set, ok := a.applied[id]; ok {
			add(id, set)
		}
	}
	return out
}

// restore replaces the applied minibatches by list (a checkpoint's).
func (a *appliedSet) restore(list []*pserverpb.AppliedMinibatches) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applied = map[int64]*spans.Set[int32]{}
	for _, m := range list {
		var pairs [][2]int32
		for sp := m.GetSpans(); len(sp) >= 2; sp = sp[2:] {
			pairs = append(pairs, [2]int32{sp[0], sp[1]})
		}
		set := spans.FromPairs(pairs)
		a.applied[m.GetTaskId()] = &set
	}
}
