package k8s

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AnnotationProgress on a job's master Job is what its master publishes
// for an autoscaler (autoscale.Progress, EncodeProgress): the records
// left, the worker bounds and the throughput measured at each worker
// count. It is on the Job, not the pod, so that the next master pod reads
// it back and goes on measuring.
const AnnotationProgress = "elasticdl.io/progress"

// ProgressStore is AnnotationProgress of the master's Job (the master's
// ProgressStore). Writes are not fenced: the value is advice to a
// scheduler, and a stale master's last write is replaced by the next
// master's.
type ProgressStore struct {
	c        *Client
	ns, name string
}

// ProgressStore is the store of the job's progress; nil for a pod no Job
// runs (nothing outlives it, and no autoscaler sizes it).
func (m *MasterPod) ProgressStore() *ProgressStore {
	if !m.Replaced() {
		return nil
	}
	return &ProgressStore{c: m.c, ns: m.pod.Namespace, name: m.owner.Name}
}

// Load returns the published value; ok is false when there is none.
func (s *ProgressStore) Load(ctx context.Context) (string, bool, error) {
	ctx, cancel := s.c.bounded(ctx)
	defer cancel()
	j, err := s.c.cs.BatchV1().Jobs(s.ns).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false, nil
	} else if err != nil {
		return "", false, fmt.Errorf("progress: get Job %s: %w", s.name, err)
	}
	v, ok := j.Annotations[AnnotationProgress]
	return v, ok, nil
}

// Save sets the annotation to value (a merge patch: the Job's other
// annotations stay), within the Client's timeout. RBAC: patch jobs.
func (s *ProgressStore) Save(ctx context.Context, value string) error {
	ctx, cancel := s.c.bounded(ctx)
	defer cancel()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationProgress: value}}})
	if err != nil {
		return fmt.Errorf("progress: %w", err)
	}
	if _, err := s.c.cs.BatchV1().Jobs(s.ns).Patch(ctx, s.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("progress: annotate Job %s (RBAC: patch jobs, deploy/rbac.yaml): %w", s.name, err)
	}
	return nil
}
