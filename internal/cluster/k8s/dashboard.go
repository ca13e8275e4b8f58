package k8s

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DashboardTarget is a pod that serves a dashboard, and its port in the pod.
type DashboardTarget struct {
	Namespace, Pod string
	Port           int
}

func (t DashboardTarget) String() string {
	return t.Namespace + "/" + t.Pod + ":" + strconv.Itoa(t.Port)
}

// The autoscaler's pods (deploy/autoscaler.yaml) and the port of its
// dashboard when its pod declares no container port PortNameDashboard.
const (
	LabelAppName             = "app.kubernetes.io/name"
	AutoscalerAppName        = "elasticdl-autoscaler"
	AutoscalerNamespace      = "elasticdl-system"
	AutoscalerDashboardPort  = 8043
	autoscalerDashboardLabel = LabelAppName + "=" + AutoscalerAppName
)

// Why a dashboard cannot be reached (wrapped, with the pod's name).
var (
	// ErrNotRunning: no pod runs yet (one is pending, or being replaced).
	// Worth waiting for.
	ErrNotRunning = errors.New("not running yet")
	// ErrNoDashboard: the pod runs without a dashboard.
	ErrNoDashboard = errors.New("no dashboard")
	// ErrJobEnded: the job's master pods have all ended.
	ErrJobEnded = errors.New("the job has ended")
)

// live are pods that run and are not being deleted, the newest first.
func live(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sortNewestFirst(out)
	return out
}

// pickMasterDashboard is the dashboard of a job, given its master pods:
// that of the newest master pod that runs. None running is ErrNotRunning,
// or ErrJobEnded once a master published the job's result.
func pickMasterDashboard(job string, pods []corev1.Pod) (DashboardTarget, error) {
	run := live(pods)
	if len(run) == 0 {
		for _, p := range pods {
			if s := p.Labels[LabelStatus]; s != "" {
				return DashboardTarget{}, fmt.Errorf("job %s: %w (master pod %s: %s), its master is gone", job, ErrJobEnded, p.Name, s)
			}
		}
		return DashboardTarget{}, fmt.Errorf("job %s has no running master pod: %w", job, ErrNotRunning)
	}
	p := run[0]
	v, ok := p.Annotations[AnnotationDashboardPort]
	if !ok {
		return DashboardTarget{}, fmt.Errorf("job %s: %w: master pod %s has no annotation %s (the job was started with --dashboard_port=-1)", job, ErrNoDashboard, p.Name, AnnotationDashboardPort)
	}
	port, err := strconv.Atoi(v)
	if err != nil || port < 1 || port > 65535 {
		return DashboardTarget{}, fmt.Errorf("job %s: %w: master pod %s has %s=%q, not a port", job, ErrNoDashboard, p.Name, AnnotationDashboardPort, v)
	}
	return DashboardTarget{Namespace: p.Namespace, Pod: p.Name, Port: port}, nil
}

// pickAutoscalerDashboard is the dashboard of the newest running pod
// among the autoscaler's pods: its container port PortNameDashboard, or
// AutoscalerDashboardPort.
func pickAutoscalerDashboard(ns string, pods []corev1.Pod) (DashboardTarget, error) {
	if len(pods) == 0 {
		return DashboardTarget{}, fmt.Errorf("no pod labelled %s in namespace %s (deploy/autoscaler.yaml; --namespace)", autoscalerDashboardLabel, ns)
	}
	run := live(pods)
	if len(run) == 0 {
		return DashboardTarget{}, fmt.Errorf("the autoscaler in namespace %s has no running pod: %w", ns, ErrNotRunning)
	}
	p := run[0]
	port := AutoscalerDashboardPort
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == PortNameDashboard {
				port = int(cp.ContainerPort)
			}
		}
	}
	return DashboardTarget{Namespace: p.Namespace, Pod: p.Name, Port: port}, nil
}

// masterPods lists a job's master pods, or fails with ErrNoJob when there
// are none because there is no job.
func (c *Client) masterPods(ctx context.Context, namespace, job string) ([]corev1.Pod, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	pods, err := c.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: JobSelector(job) + "," + LabelReplicaType + "=" + ReplicaMaster})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	if len(pods.Items) == 0 {
		// No master pod yet, or no job at all.
		if _, err := c.cs.BatchV1().Jobs(namespace).Get(ctx, MasterName(job), metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil, noJob(namespace, job)
		}
	}
	return pods.Items, nil
}

// JobDashboard is where the job's dashboard is served now: see
// pickMasterDashboard; an unknown job is an error wrapping ErrNoJob.
func (c *Client) JobDashboard(ctx context.Context, namespace, job string) (DashboardTarget, error) {
	pods, err := c.masterPods(ctx, namespace, job)
	if err != nil {
		return DashboardTarget{}, err
	}
	return pickMasterDashboard(job, pods)
}

// AutoscalerDashboard is where the cluster's dashboard is served now, by
// the autoscaler's pod in namespace.
func (c *Client) AutoscalerDashboard(ctx context.Context, namespace string) (DashboardTarget, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	pods, err := c.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: autoscalerDashboardLabel})
	if err != nil {
		return DashboardTarget{}, fmt.Errorf("list pods: %w", err)
	}
	return pickAutoscalerDashboard(namespace, pods.Items)
}
