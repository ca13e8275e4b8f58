package k8s

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// MasterPod is a job master's own pod, seen from inside it. The Job that
// runs it (JobOwner) owns the job's pods, Services and ConfigMaps and is
// the subject of the job's Events, so that they outlive the pod: a master
// pod deleted or evicted is replaced by the Job, and the new master resumes
// the job. The job's result is published on the pod when it ends.
type MasterPod struct {
	c     *Client
	pod   *corev1.Pod
	owner *metav1.OwnerReference
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
	return &MasterPod{c: c, pod: p, owner: JobOwner(p)}, nil
}

// Replaced says whether a Job runs this pod, and so replaces it when it is
// lost: only then may the master leave the job to the next one when its
// pod is deleted.
func (m *MasterPod) Replaced() bool { return m.owner.Kind == "Job" }

// RunID names the run of the job: the Job's UID, which every master pod
// of the job shares (or, with no Job, the pod's).
func (m *MasterPod) RunID() string {
	return strings.ToLower(m.owner.Kind) + "-" + string(m.owner.UID)
}

// NewRecorder returns a running Recorder of Events about the job: about
// its Job, which all its master pods share, or the pod when there is none.
func (m *MasterPod) NewRecorder(component string, logger *slog.Logger) *Recorder {
	subject := corev1.ObjectReference{APIVersion: m.owner.APIVersion, Kind: m.owner.Kind, Namespace: m.pod.Namespace, Name: m.owner.Name, UID: m.owner.UID}
	return NewRecorder(m.c.cs, subject, m.pod.Name, component, logger)
}

// EnsureService creates the master's Service (MasterName; selecting
// whichever master pod of the job runs) unless it exists, and returns the
// host by which the job's pods reach the master across master pods.
func (m *MasterPod) EnsureService(ctx context.Context, job string, port int) (string, error) {
	ctx, cancel := m.c.bounded(ctx)
	defer cancel()
	svc := newService(MasterName(job), m.pod.Namespace, JobLabels(job, ReplicaMaster), JobLabels(job, ReplicaMaster), port, m.owner)
	if _, err := m.c.cs.CoreV1().Services(m.pod.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create the master's Service %s: %w", svc.Name, err)
	}
	return svc.Name + "." + m.pod.Namespace + ".svc", nil
}

// NewBackend is New with the master pod's client and namespace, and the
// master pod as the owner of what the backend creates; cfg's Client,
// Namespace and Owner are replaced.
func (m *MasterPod) NewBackend(ctx context.Context, cfg Config) (*Backend, error) {
	cfg.Client, cfg.Namespace, cfg.Owner = m.c.cs, m.pod.Namespace, m.owner
	return New(ctx, cfg)
}

// PublishResult writes summary (job_summary.json; nil: none) to the job's
// summary ConfigMap, owned by the job, and then labels the master
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
				OwnerReferences: []metav1.OwnerReference{*m.owner},
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

// AnnotationTargetWorkers on a job's master Job is the number of workers
// the job is asked to run (by `elasticdl scale`, or an autoscaler); the
// master clamps it to the job's bounds.
const AnnotationTargetWorkers = "elasticdl.io/target-workers"

// AnnotationDashboardPort on a master pod is the port its dashboard is
// served on (in the pod: reached by port-forward), declared as the
// container port named PortNameDashboard.
const (
	AnnotationDashboardPort = "elasticdl.io/dashboard-port"
	PortNameDashboard       = "dashboard"
)

// AnnotationTargetPS on a job's master Job is the number of parameter
// servers the job is asked to run (`elasticdl scale --ps`); the master
// re-shards them live.
const AnnotationTargetPS = "elasticdl.io/target-ps"

// TargetWatch is what WatchTarget does with one annotation's new values:
// Set with a non-negative integer, Bad with anything else.
type TargetWatch struct {
	Set func(int)
	Bad func(value string)
}

// WatchTarget calls the watch of each annotation of the master Job (by
// name, e.g. AnnotationTargetWorkers) each time it is set or changes,
// until ctx ends. It returns an error when the Job cannot be watched
// (RBAC: get, list, watch jobs) within the Client's timeout. A pod no Job
// runs has no target to watch: WatchTarget returns nil at once.
func (m *MasterPod) WatchTarget(ctx context.Context, watches map[string]TargetWatch) error {
	if !m.Replaced() {
		return nil
	}
	f := informers.NewSharedInformerFactoryWithOptions(m.c.cs, 0, informers.WithNamespace(m.pod.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + m.owner.Name }))
	last := map[string]string{}
	on := func(obj any) {
		j, ok := obj.(*batchv1.Job)
		if !ok || j.UID != m.owner.UID {
			return
		}
		for _, key := range slices.Sorted(maps.Keys(watches)) {
			v, ok := j.Annotations[key]
			if !ok || v == last[key] {
				continue
			}
			last[key] = v
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				watches[key].Bad(v)
				continue
			}
			watches[key].Set(n)
		}
	}
	inf := f.Batch().V1().Jobs().Informer()
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    on,
		UpdateFunc: func(_, obj any) { on(obj) },
	})
	stop := make(chan struct{})
	f.Start(stop)
	defer f.Shutdown()
	defer close(stop) // before Shutdown, which waits for the informer
	sctx, cancel := m.c.bounded(ctx)
	synced := cache.WaitForCacheSync(sctx.Done(), inf.HasSynced)
	cancel()
	if !synced && ctx.Err() == nil {
		return fmt.Errorf("watch Job %s for the worker target: not listed within %s (RBAC: get, list, watch jobs; deploy/rbac.yaml)", m.owner.Name, m.c.timeout)
	}
	<-ctx.Done()
	return nil
}

// ScaleJob asks job to run workers workers: it sets the master Job's
// AnnotationTargetWorkers, which the master watches. An unknown job is an
// error wrapping ErrNoJob.
func (c *Client) ScaleJob(ctx context.Context, namespace, job string, workers int) error {
	return c.annotateTarget(ctx, namespace, job, AnnotationTargetWorkers, workers)
}

// ScalePS asks job to run ps parameter servers: it sets the master Job's
// AnnotationTargetPS. An unknown job is an error wrapping ErrNoJob.
func (c *Client) ScalePS(ctx context.Context, namespace, job string, ps int) error {
	return c.annotateTarget(ctx, namespace, job, AnnotationTargetPS, ps)
}

func (c *Client) annotateTarget(ctx context.Context, namespace, job, key string, n int) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, strconv.Itoa(n))
	_, err := c.cs.BatchV1().Jobs(namespace).Patch(ctx, MasterName(job), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return noJob(namespace, job)
	} else if err != nil {
		return fmt.Errorf("annotate Job %s: %w", MasterName(job), err)
	}
	return nil
}
