package k8s

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

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
// cluster's pods leave on its nodes (autoscale.Admit), looking again
// whenever a node or pod changes that room, and at least every Interval;
// meanwhile the job holds nothing but its master. The cluster's nodes and
// pods are listed once and then watched (informers), not listed on every
// look. It returns how long it waited. A master that may not list the
// cluster's nodes and pods fails at once, naming the RBAC it needs. Two
// gang jobs that look at the same moment may both be admitted and then
// wait for pods: a scheduler plugin (coscheduling) closes that race, which
// this admission does not.
func (m *MasterPod) WaitAdmitted(ctx context.Context, g Gang) (time.Duration, error) {
	if g.Interval <= 0 {
		g.Interval = time.Second
	}
	if g.Logger == nil {
		g.Logger = slog.Default()
	}
	start := time.Now()
	// An informer retries a forbidden list for ever: ask once first.
	if err := m.c.mayListCluster(ctx); err != nil {
		return time.Since(start), err
	}
	f := informers.NewSharedInformerFactory(m.c.cs, 0)
	nodes, pods := f.Core().V1().Nodes(), f.Core().V1().Pods()
	kick := make(chan struct{}, 1)
	podChanges, nodeChanges := roomChanges(pokes(kick))
	if _, err := pods.Informer().AddEventHandler(podChanges); err != nil {
		return time.Since(start), fmt.Errorf("gang admission: watching pods: %w", err)
	}
	if _, err := nodes.Informer().AddEventHandler(nodeChanges); err != nil {
		return time.Since(start), fmt.Errorf("gang admission: watching nodes: %w", err)
	}
	wctx, stop := context.WithCancel(ctx)
	f.Start(wctx.Done())
	defer f.Shutdown()
	defer stop() // before Shutdown, which waits for the informers
	sctx, cancel := m.c.bounded(ctx)
	synced := cache.WaitForCacheSync(sctx.Done(), nodes.Informer().HasSynced, pods.Informer().HasSynced)
	cancel()
	if !synced {
		if ctx.Err() != nil {
			return time.Since(start), context.Cause(ctx)
		}
		return time.Since(start), fmt.Errorf("gang admission: the cluster's nodes and pods not listed within %s", m.c.timeout)
	}
	tick := time.NewTicker(g.Interval)
	defer tick.Stop()
	for said := false; ; said = true {
		s, err := listedSnapshot(nodes.Lister(), pods.Lister())
		if err != nil {
			return time.Since(start), fmt.Errorf("gang admission: %w", err)
		}
		if autoscale.Admit(s, g.Priority, g.Pods) {
			return time.Since(start), nil
		}
		if !said {
			var want autoscale.Resources
			for _, p := range g.Pods {
				want = want.Add(p.Request)
			}
			g.Logger.Info("gang: waiting until all the job's pods fit at once", "pods", len(g.Pods),
				"milli_cpu", want.MilliCPU, "memory", want.Memory, "nodes", len(s.Nodes), "cluster_pods", len(s.Pods))
		}
		select {
		case <-ctx.Done():
			return time.Since(start), context.Cause(ctx)
		case <-kick:
		case <-tick.C:
		}
	}
}

// mayListCluster lists one node and one pod of the whole cluster: what
// the gang admission's informers need, with RBAC's verdict said plainly.
func (c *Client) mayListCluster(ctx context.Context) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	_, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err == nil {
		_, err = c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("--gang: the master must see the cluster's nodes and pods to admit the job whole: apply deploy/rbac-gang.yaml (%w)", err)
	}
	if err != nil {
		return fmt.Errorf("gang admission: list the cluster: %w", err)
	}
	return nil
}

// listedSnapshot is what the listers hold of the cluster's nodes and of
// the pods that hold or want room (no jobs: admission does not size them).
func listedSnapshot(nodes corelisters.NodeLister, pods corelisters.PodLister) (autoscale.Snapshot, error) {
	var s autoscale.Snapshot
	ns, err := nodes.List(labels.Everything())
	if err != nil {
		return s, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range ns {
		s.Nodes = append(s.Nodes, snapshotNode(n))
	}
	ps, err := pods.List(labels.Everything())
	if err != nil {
		return s, fmt.Errorf("list pods: %w", err)
	}
	for _, p := range ps {
		if ap, ok := snapshotPod(p); ok {
			s.Pods = append(s.Pods, ap)
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
