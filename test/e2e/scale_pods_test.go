package e2e

import (
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"elasticdl/internal/cluster"
	"elasticdl/internal/cluster/k8s"
)

// ---- the pods, watched --------------------------------------------------------------------------

// scalePod is what the test's informer saw of one worker pod, and when.
type scalePod struct {
	name, node                     string
	id, index                      int
	added, running, deleting, gone time.Time
	created                        time.Time // metadata.creationTimestamp (1 s resolution)
}

type scalePods struct {
	mu   sync.Mutex
	pods map[int]*scalePod // by instance ID
	// onRunning and onDeleting start and stop the fake worker of an ID.
	onRunning, onDeleting func(id int)
}

func (s *scalePods) observe(obj any, gone bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Labels[k8s.LabelReplicaType] != string(cluster.Worker) {
		return
	}
	id, err1 := strconv.Atoi(p.Labels[k8s.LabelInstanceID])
	index, err2 := strconv.Atoi(p.Labels[k8s.LabelReplicaIndex])
	if err1 != nil || err2 != nil {
		return
	}
	now := time.Now()
	s.mu.Lock()
	sp := s.pods[id]
	if sp == nil {
		sp = &scalePod{name: p.Name, id: id, index: index, added: now, created: p.CreationTimestamp.Time}
		s.pods[id] = sp
	}
	sp.node = p.Spec.NodeName
	startWorker, stopWorker := false, false
	if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && !gone && sp.running.IsZero() {
		sp.running, startWorker = now, true
	}
	if (p.DeletionTimestamp != nil || gone) && sp.deleting.IsZero() {
		sp.deleting, stopWorker = now, true
	}
	if gone && sp.gone.IsZero() {
		sp.gone = now
	}
	s.mu.Unlock()
	if startWorker {
		s.onRunning(id)
	}
	if stopWorker {
		s.onDeleting(id)
	}
}

func (s *scalePods) get(id int) scalePod {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pods[id]; p != nil {
		return *p
	}
	return scalePod{}
}

// live returns the worker pods Running and not being deleted.
func (s *scalePods) live() []scalePod {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []scalePod
	for _, p := range s.pods {
		if !p.running.IsZero() && p.deleting.IsZero() {
			out = append(out, *p)
		}
	}
	slices.SortFunc(out, func(a, b scalePod) int { return a.id - b.id })
	return out
}

// successor is the pod of slot index with the lowest ID above id.
func (s *scalePods) successor(index, id int) (scalePod, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *scalePod
	for _, p := range s.pods {
		if p.index == index && p.id > id && (best == nil || p.id < best.id) {
			best = p
		}
	}
	if best == nil {
		return scalePod{}, false
	}
	return *best, true
}
