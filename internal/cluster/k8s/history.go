package k8s

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HistoryKey is the key of the dashboard's history in its ConfigMap.
const HistoryKey = "history.json"

// HistoryConfigMapName is the ConfigMap holding a job's dashboard history
// for the next master pod.
func HistoryConfigMapName(job string) string { return "elasticdl-" + job + "-master-history" }

// HistoryStore keeps the dashboard's history of a job in a ConfigMap of
// the job (owned by it, so that it outlives each master pod and goes with
// the job). Unlike the StateStore it is not fenced: the history is for
// display, and a stale master's last write is at worst 5 s of history
// that the next master's own writes replace.
type HistoryStore struct {
	c    *Client
	ns   string
	name string
	meta metav1.ObjectMeta // of a ConfigMap to create
}

// HistoryStore is the store of job's history.
func (m *MasterPod) HistoryStore(job string) *HistoryStore {
	name := HistoryConfigMapName(job)
	return &HistoryStore{c: m.c, ns: m.pod.Namespace, name: name, meta: metav1.ObjectMeta{
		Name: name, Namespace: m.pod.Namespace, Labels: JobLabels(job, ReplicaMaster),
		OwnerReferences: []metav1.OwnerReference{*m.owner},
	}}
}

// Load returns the saved history; ok is false when there is none.
func (s *HistoryStore) Load(ctx context.Context) ([]byte, bool, error) {
	ctx, cancel := s.c.bounded(ctx)
	defer cancel()
	cm, err := s.c.cs.CoreV1().ConfigMaps(s.ns).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, fmt.Errorf("history: get ConfigMap %s: %w", s.name, err)
	}
	v, ok := cm.Data[HistoryKey]
	return []byte(v), ok, nil
}

// Save replaces the saved history with data, creating the ConfigMap the
// first time.
func (s *HistoryStore) Save(ctx context.Context, data []byte) error {
	ctx, cancel := s.c.bounded(ctx)
	defer cancel()
	cms := s.c.cs.CoreV1().ConfigMaps(s.ns)
	cm := &corev1.ConfigMap{ObjectMeta: *s.meta.DeepCopy(), Data: map[string]string{HistoryKey: string(data)}}
	// An update without a resourceVersion is unconditional: the latest
	// history wins.
	_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // created meanwhile by another master
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("history: save ConfigMap %s: %w", s.name, err)
	}
	return nil
}
