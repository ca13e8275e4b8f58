package k8s

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// StateKey is the key of the master's persisted state in its ConfigMap;
// AnnotationStateHolder names the master that may write it.
const (
	StateKey              = "state.json"
	AnnotationStateHolder = "elasticdl.io/state-holder"
)

// StateConfigMapName is the ConfigMap holding a job master's persisted
// state (master failover).
func StateConfigMapName(job string) string { return "elasticdl-" + job + "-master-state" }

// ErrFenced: another master took the job's state over; this one must stop
// acting (and not try again).
var ErrFenced = errors.New("another master took the job's state over")

// StateStore keeps a job master's state in a ConfigMap of the job, for the
// master that takes over after a crash. Only one master writes: opening
// the store takes it over (the ConfigMap names its holder), and every save
// is an update at the resourceVersion this master last wrote, so once
// another master has taken over, a stale one's next save fails with
// ErrFenced instead of overwriting the newer state.
type StateStore struct {
	c      *Client
	cs     kubernetes.Interface
	ns     string
	name   string
	holder string
	// cm is the ConfigMap as this master last wrote it.
	cm   *corev1.ConfigMap
	data []byte // what Open found
	had  bool
}

// OpenStateStore takes over the state of job for holder (a name unique to
// this master process), creating the ConfigMap, owned by the job,
// if there is none. What a previous master saved is Load's.
func (m *MasterPod) OpenStateStore(ctx context.Context, job, holder string) (*StateStore, error) {
	s := &StateStore{c: m.c, cs: m.c.cs, ns: m.pod.Namespace, name: StateConfigMapName(job), holder: holder}
	ctx, cancel := m.c.bounded(ctx)
	defer cancel()
	cms := s.cs.CoreV1().ConfigMaps(s.ns)
	cm, err := cms.Get(ctx, s.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: s.name, Namespace: s.ns, Labels: JobLabels(job, ReplicaMaster),
			Annotations:     map[string]string{AnnotationStateHolder: holder},
			OwnerReferences: []metav1.OwnerReference{*m.owner},
		}}
		if cm, err = cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("state store: create ConfigMap %s: %w", s.name, err)
		}
		s.cm = cm
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("state store: get ConfigMap %s: %w", s.name, err)
	}
	if v, ok := cm.Data[StateKey]; ok {
		s.data, s.had = []byte(v), true
	}
	cm = cm.DeepCopy()
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[AnnotationStateHolder] = holder
	// At the version read: two masters taking over at once cannot both win.
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return nil, fmt.Errorf("state store: %w (while taking it over)", ErrFenced)
		}
		return nil, fmt.Errorf("state store: take over ConfigMap %s: %w", s.name, err)
	}
	s.cm = cm
	return s, nil
}

// Load returns the state found when the store was opened.
func (s *StateStore) Load(context.Context) ([]byte, bool, error) {
	return s.data, s.had, nil
}

// Save writes data, unless another master took the store over since this
// one last wrote (ErrFenced).
func (s *StateStore) Save(ctx context.Context, data []byte) error {
	ctx, cancel := s.c.bounded(ctx)
	defer cancel()
	cms := s.cs.CoreV1().ConfigMaps(s.ns)
	for retried := false; ; retried = true {
		cm := s.cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[StateKey] = string(data)
		out, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("state store: ConfigMap %s is gone: %w", s.name, ErrFenced)
		case apierrors.IsConflict(err) && !retried:
			// Written since: by another master (fenced), or by this one in
			// a call that failed after it was applied (a timeout).
			cur, gerr := cms.Get(ctx, s.name, metav1.GetOptions{})
			if gerr != nil {
				return fmt.Errorf("state store: get ConfigMap %s: %w", s.name, gerr)
			}
			if holder := cur.Annotations[AnnotationStateHolder]; holder != s.holder {
				return fmt.Errorf("state store: ConfigMap %s held by %q: %w", s.name, holder, ErrFenced)
			}
			s.cm = cur
			continue
		case apierrors.IsConflict(err):
			return fmt.Errorf("state store: ConfigMap %s: %w", s.name, ErrFenced)
		case err != nil:
			return fmt.Errorf("state store: update ConfigMap %s: %w", s.name, err)
		}
		s.cm = out
		return nil
	}
}
