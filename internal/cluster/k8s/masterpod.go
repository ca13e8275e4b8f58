package k8s

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// MasterPod is a job master's own pod, seen from inside it: the owner of
// the job's pods and Services, the subject of the job's Events, and where
// the job's result is published when it ends.
type MasterPod struct {
	c   *Client
	pod *corev1.Pod
}

// MasterPod gets the pod the master runs in (the downward API gives it
// its name and namespace).
func (c *Client) MasterPod(ctx context.Context, namespace, name string) (*MasterPod, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	p, err := c.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get own pod %s/%s: %w", namespace, name, err)
	}
	return &MasterPod{c: c, pod: p}, nil
}

// NewRecorder returns a running Recorder of Events about the master pod.
func (m *MasterPod) NewRecorder(component string, logger *slog.Logger) *Recorder {
	return NewRecorder(m.c.cs, m.pod, component, logger)
}

// NewBackend is New with the master pod's client and namespace, and the
// master pod as the owner of what the backend creates; cfg's Client,
// Namespace and Owner are replaced.
func (m *MasterPod) NewBackend(ctx context.Context, cfg Config) (*Backend, error) {
	cfg.Client, cfg.Namespace, cfg.Owner = m.c.cs, m.pod.Namespace, OwnerReference(m.pod)
	return New(ctx, cfg)
}

// PublishResult writes summary (job_summary.json; nil: none) to the job's
// summary ConfigMap, owned by the master pod, and then labels the master
// pod LabelStatus=StatusFailed or StatusFinished, so that whoever sees the
// label finds the summary. It is bounded by the Client's timeout.
func (m *MasterPod) PublishResult(ctx context.Context, job string, summary []byte, failed bool) error {
	ctx, cancel := m.c.bounded(ctx)
	defer cancel()
	var errs []error
	if summary != nil {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:            SummaryConfigMapName(job),
				Namespace:       m.pod.Namespace,
				Labels:          JobLabels(job, ReplicaMaster),
				OwnerReferences: []metav1.OwnerReference{*OwnerReference(m.pod)},
			},
			Data: map[string]string{SummaryKey: string(summary)},
		}
		cms := m.c.cs.CoreV1().ConfigMaps(m.pod.Namespace)
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			if err != nil {
				errs = append(errs, fmt.Errorf("update ConfigMap %s: %w", cm.Name, err))
			}
		} else if err != nil {
			errs = append(errs, fmt.Errorf("create ConfigMap %s: %w", cm.Name, err))
		}
	}
	status := StatusFinished
	if failed {
		status = StatusFailed
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, LabelStatus, status)
	if _, err := m.c.cs.CoreV1().Pods(m.pod.Namespace).Patch(ctx, m.pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		errs = append(errs, fmt.Errorf("label pod %s %s=%s: %w", m.pod.Name, LabelStatus, status, err))
	}
	return errors.Join(errs...)
}

// UID is the master pod's UID: a pod restarted in place keeps it.
func (m *MasterPod) UID() types.UID { return m.pod.UID }
