package k8s

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"elasticdl/internal/autoscale"
)

// Gang is a job that starts only with all its pods (`--gang`): the
// all-or-nothing admission of Kubeflow-style operators behind a gang
// scheduler, which the seeds' experiments compare elastic jobs against.
type Gang struct {
	// Pods are what the job launches at once (its workers and PS).
	Pods []autoscale.Pod
	// Priority is the job's: pods waiting at a higher one go first.
	Priority int32
	// Interval between looks at the cluster (default 1 s).
	Interval time.Duration
	Logger   *slog.Logger
}

// Add adds n pods of settings s to the gang.
func (g *Gang) Add(n int, s PodSettings) {
	for range n {
		g.Pods = append(g.Pods, autoscale.Pod{Request: resources(s.Resources.Requests), NodeSelector: s.NodeSelector})
	}
}

// WaitAdmitted blocks until every pod of g fits at once in the room the
// cluster's pods leave on its nodes (autoscale.Admit over a fresh listing
// of the nodes and pods each Interval); meanwhile the job holds nothing
// but its master. It returns how long it waited. A master that may not
// list the cluster's nodes and pods fails at once, naming the RBAC it
// needs. Two gang jobs that look at the same moment may both be admitted
// and then wait for pods: a scheduler plugin (coscheduling) closes that
// race, which this admission does not.
func (m *MasterPod) WaitAdmitted(ctx context.Context, g Gang) (time.Duration, error) {
	if g.Interval <= 0 {
		g.Interval = time.Second
	}
	if g.Logger == nil {
		g.Logger = slog.Default()
	}
	var want autoscale.Resources
	for _, p := range g.Pods {
		want = want.Add(p.Request)
	}
	start := time.Now()
	for said := false; ; said = true {
		s, err := m.c.clusterSnapshot(ctx)
		if apierrors.IsForbidden(err) {
			return time.Since(start), fmt.Errorf("--gang: the master must see the cluster's nodes and pods to admit the job whole: apply deploy/rbac-gang.yaml (%w)", err)
		}
		if err != nil {
			g.Logger.Warn("gang admission: listing the cluster", "err", err)
		} else if autoscale.Admit(s, g.Priority, g.Pods) {
			return time.Since(start), nil
		} else if !said {
			g.Logger.Info("gang: waiting until all the job's pods fit at once", "pods", len(g.Pods),
				"milli_cpu", want.MilliCPU, "memory", want.Memory, "nodes", len(s.Nodes), "cluster_pods", len(s.Pods))
		}
		select {
		case <-ctx.Done():
			return time.Since(start), context.Cause(ctx)
		case <-time.After(g.Interval):
		}
	}
}

// clusterSnapshot lists every node and every pod that holds or wants
// resources (no jobs: admission does not size them).
func (c *Client) clusterSnapshot(ctx context.Context) (autoscale.Snapshot, error) {
	var s autoscale.Snapshot
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		s.Nodes = append(s.Nodes, snapshotNode(&nodes.Items[i]))
	}
	pods, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		if p, ok := snapshotPod(&pods.Items[i]); ok {
			s.Pods = append(s.Pods, p)
		}
	}
	return s, nil
}

// snapshotNode is n as a decision sees it.
func snapshotNode(n *corev1.Node) autoscale.Node {
	return autoscale.Node{Name: n.Name, Allocatable: resources(n.Status.Allocatable), Schedulable: schedulable(n), Labels: n.Labels}
}

// snapshotPod is p as a decision sees it (Job unset); ok is false for a
// pod that finished and holds nothing.
func snapshotPod(p *corev1.Pod) (autoscale.Pod, bool) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return autoscale.Pod{}, false
	}
	ap := autoscale.Pod{Node: p.Spec.NodeName, Request: podRequest(p), NodeSelector: p.Spec.NodeSelector}
	if p.Spec.Priority != nil {
		ap.Priority = *p.Spec.Priority
	}
	return ap, true
}

// Priority is the scheduling priority of the master's pod.
func (m *MasterPod) Priority() int32 {
	if m.pod.Spec.Priority != nil {
		return *m.pod.Spec.Priority
	}
	return 0
}
