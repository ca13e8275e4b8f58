package k8s

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"elasticdl/internal/autoscale"
	"elasticdl/internal/autoscale/rounds"
	"elasticdl/internal/cluster"
)

// Annotations `elasticdl train --backend=k8s` puts on a job's master Job,
// for an autoscaler: the job's worker bounds and what one worker requests.
const (
	AnnotationMinWorkers    = "elasticdl.io/min-workers"
	AnnotationMaxWorkers    = "elasticdl.io/max-workers"
	AnnotationWorkerRequest = "elasticdl.io/worker-request"
)

// AutoscalerConfig configures RunAutoscaler.
type AutoscalerConfig struct {
	// Interval between decisions (default 5 s).
	Interval time.Duration
	// Settle: after a change that can move a decision (a pod created,
	// bound, finished or deleted; a node; a job), decide again this soon
	// rather than at the next Interval, the changes within it together:
	// a growing service is seen at once. 0: only every Interval.
	Settle time.Duration
	Logger *slog.Logger
	// Registry, if set, gets the autoscaler's metrics (autoscalermetrics.go).
	Registry prometheus.Registerer
	// Rounds, if set, hears what each round saw and decided, once it set
	// the targets (the cluster dashboard). It must return at once.
	Rounds func(rounds.Round)
	// Policy is PolicyFair ("": the default) or PolicyRemaining, with
	// Remaining its knobs.
	Policy    string
	Remaining autoscale.RemainingOptions
}

// autoscaler sees the whole cluster through informers: nodes, every pod,
// and the elastic jobs' master Jobs.
type autoscaler struct {
	c     *Client
	log   *slog.Logger
	nodes corelisters.NodeLister
	pods  corelisters.PodLister
	jobs  batchlisters.JobLister
	// warned: jobs whose bounds could not be read, said once.
	warned map[string]bool
	// metrics: nil without a registry.
	metrics *autoscalerMetrics
	// rounds: AutoscalerConfig.Rounds.
	rounds func(rounds.Round)
	// policy and remaining: AutoscalerConfig's.
	policy    string
	remaining autoscale.RemainingOptions
}

// RunAutoscaler sizes every elastic job of the cluster until ctx ends:
// each Interval, and Settle after a change, it decides targets (package autoscale) from what the
// cluster holds and sets AnnotationTargetWorkers on the master Jobs whose
// target changed. Jobs without AnnotationMaxWorkers, and jobs that ended,
// are left alone.
func (c *Client) RunAutoscaler(ctx context.Context, cfg AutoscalerConfig) error {
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Policy == "" {
		cfg.Policy = PolicyFair
	}
	if err := CheckPolicy(cfg.Policy); err != nil {
		return fmt.Errorf("autoscaler: %w", err)
	}
	all := informers.NewSharedInformerFactory(c.cs, 0)
	masters := informers.NewSharedInformerFactoryWithOptions(c.cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = LabelApp + "=" + AppName + "," + LabelReplicaType + "=" + ReplicaMaster
	}))
	a := &autoscaler{c: c, log: cfg.Logger, warned: map[string]bool{}, rounds: cfg.Rounds, policy: cfg.Policy, remaining: cfg.Remaining,
		nodes: all.Core().V1().Nodes().Lister(), pods: all.Core().V1().Pods().Lister(), jobs: masters.Batch().V1().Jobs().Lister()}
	if cfg.Registry != nil {
		m, err := newAutoscalerMetrics(cfg.Registry)
		if err != nil {
			return err
		}
		a.metrics = m
	}
	kick := make(chan struct{}, 1)
	if cfg.Settle > 0 {
		if err := a.watchChanges(all, masters, kick); err != nil {
			return err
		}
	}
	all.Start(ctx.Done())
	masters.Start(ctx.Done())
	defer all.Shutdown()
	defer masters.Shutdown()
	sctx, cancel := c.bounded(ctx)
	synced := cache.WaitForCacheSync(sctx.Done(), all.Core().V1().Nodes().Informer().HasSynced,
		all.Core().V1().Pods().Informer().HasSynced, masters.Batch().V1().Jobs().Informer().HasSynced)
	cancel()
	if !synced {
		return fmt.Errorf("autoscaler: the cluster's nodes, pods and jobs not listed within %s (RBAC: deploy/autoscaler.yaml)", c.timeout)
	}
	a.log.Info("autoscaler watching the cluster", "interval", cfg.Interval, "settle", cfg.Settle, "policy", cfg.Policy)
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	for {
		if _, err := a.round(ctx); err != nil {
			a.log.Warn("autoscaler round", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-kick:
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(cfg.Settle):
			}
			select { // what came during the wait is in this round
			case <-kick:
			default:
			}
		}
	}
}

// watchChanges pokes kick (without blocking) on the changes that can move
// a decision: a pod created, bound, finishing, being deleted or gone; a
// node added, removed, or whose room or readiness changed; a master Job
// added, changed (not only its progress) or removed.
func (a *autoscaler) watchChanges(all, masters informers.SharedInformerFactory, kick chan<- struct{}) error {
	poke := pokes(kick)
	pods, nodes := roomChanges(poke)
	jobs := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { poke() }, DeleteFunc: func(any) { poke() },
		UpdateFunc: func(o, n any) {
			if !progressOnly(o, n) {
				poke()
			}
		}}
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{all.Core().V1().Pods().Informer(), pods},
		{all.Core().V1().Nodes().Informer(), nodes},
		{masters.Batch().V1().Jobs().Informer(), jobs},
	} {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return fmt.Errorf("autoscaler: watching changes: %w", err)
		}
	}
	return nil
}

// pokes returns a function that signals kick without blocking (one
// signal waits at most).
func pokes(kick chan<- struct{}) func() {
	return func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// roomChanges are informer handlers that poke on what can change the room
// of a cluster: a pod created, bound, finishing, being deleted or gone; a
// node added, removed, or whose room or readiness changed.
func roomChanges(poke func()) (pods, nodes cache.ResourceEventHandlerFuncs) {
	pods = cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Pod)
			n, ok2 := newObj.(*corev1.Pod)
			if !ok1 || !ok2 || o.Spec.NodeName != n.Spec.NodeName || o.Status.Phase != n.Status.Phase ||
				(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) {
				poke()
			}
		},
		DeleteFunc: func(any) { poke() },
	}
	nodes = cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			if !ok1 || !ok2 || schedulable(o) != schedulable(n) || resources(o.Status.Allocatable) != resources(n.Status.Allocatable) {
				poke()
			}
		},
		DeleteFunc: func(any) { poke() },
	}
	return pods, nodes
}

// round decides once, annotates the jobs whose target changed, and tells
// a.rounds what it saw and did.
func (a *autoscaler) round(ctx context.Context) ([]autoscale.Decision, error) {
	s, jobs, usage, err := a.snapshot()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ds := a.decide(s, jobs, usage)
	a.metrics.observe(time.Since(start), usage, ds)
	if a.log.Enabled(ctx, slog.LevelDebug) {
		a.logRoom(s.Nodes, usage)
	}
	var changes []rounds.Change
	for i, d := range ds {
		j := jobs[i]
		if j.Annotations[AnnotationTargetWorkers] == strconv.Itoa(d.Target) {
			continue
		}
		job := j.Labels[LabelJob]
		if err := a.c.ScaleJob(ctx, j.Namespace, job, d.Target); err != nil {
			a.log.Warn("setting a job's target", "job", d.Key, "target", d.Target, "err", err)
			continue
		}
		a.log.Info("job target", "job", d.Key, "from", j.Annotations[AnnotationTargetWorkers], "to", d.Target, "fits", d.Placed, "reason", d.Reason)
		if from := previousTarget(j, s.Jobs[i].Max); from != d.Target {
			changes = append(changes, rounds.Change{At: start, Job: d.Key, From: from, To: d.Target, Reason: d.Reason})
		}
	}
	if a.rounds != nil {
		a.rounds(newRound(start, usage, s.Jobs, ds, changes))
	}
	return ds, nil
}

// previousTarget is the target a job had before a round: its annotation,
// else (none set yet, or garbled: the master ignores it) the master's
// --num_workers, which is the job's maximum.
func previousTarget(j *batchv1.Job, max int) int {
	if n, err := strconv.Atoi(j.Annotations[AnnotationTargetWorkers]); err == nil && n >= 0 {
		return n
	}
	return max
}

// newRound is what a round saw and decided, for Rounds: CPU in cores.
func newRound(at time.Time, u clusterUsage, jobs []autoscale.Job, ds []autoscale.Decision, changes []rounds.Change) rounds.Round {
	cores := func(r autoscale.Resources) float64 { return float64(r.MilliCPU) / 1000 }
	r := rounds.Round{At: at, CapacityCPU: cores(u.capacity), ServicesCPU: cores(u.requested[kindServices]),
		PendingServicePods: u.pending[kindServices], Changes: changes}
	for i, d := range ds {
		r.Jobs = append(r.Jobs, rounds.Job{Key: d.Key, Min: jobs[i].Min, Max: jobs[i].Max, Target: d.Target, Placed: d.Placed,
			Running: u.bound[d.Key], Pending: u.waiting[d.Key], CPU: cores(u.jobs[d.Key]), Reason: d.Reason})
	}
	return r
}

// snapshot builds the decision's input, the Jobs in the order of its
// jobs, and what the cluster's pods use (for the metrics).
func (a *autoscaler) snapshot() (autoscale.Snapshot, []*batchv1.Job, clusterUsage, error) {
	var s autoscale.Snapshot
	usage := newClusterUsage()
	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		return s, nil, usage, err
	}
	byName(nodes)
	for _, n := range nodes {
		node := snapshotNode(n)
		s.Nodes = append(s.Nodes, node)
		usage.addNode(node)
	}
	all, err := a.jobs.List(labels.Everything())
	if err != nil {
		return s, nil, usage, err
	}
	byName(all)
	var jobs []*batchv1.Job
	index := map[string]int{}
	for _, j := range all {
		job, ok, err := autoscaledJob(j)
		if err != nil && !a.warned[j.Namespace+"/"+j.Name] {
			a.warned[j.Namespace+"/"+j.Name] = true
			a.log.Warn("job left alone: its bounds cannot be read", "job", j.Namespace+"/"+j.Name, "err", err)
		}
		if !ok {
			continue
		}
		index[job.Key] = len(s.Jobs)
		s.Jobs = append(s.Jobs, job)
		jobs = append(jobs, j)
	}
	pods, err := a.pods.List(labels.Everything())
	if err != nil {
		return s, nil, usage, err
	}
	byName(pods)
	seen := make([]bool, len(s.Jobs)) // a worker's priority known
	for _, p := range pods {
		ap, ok := snapshotPod(p)
		if !ok {
			continue
		}
		if p.Labels[LabelApp] == AppName && p.Labels[LabelReplicaType] == string(cluster.Worker) {
			key := p.Namespace + "/" + p.Labels[LabelJob]
			if i, ok := index[key]; ok {
				ap.Job = key
				// A job's workers' priority is its own (the lowest, if
				// they differ).
				if !seen[i] || ap.Priority < s.Jobs[i].Priority {
					s.Jobs[i].Priority, seen[i] = ap.Priority, true
				}
			}
		}
		s.Pods = append(s.Pods, ap)
		job := ""
		if name, ok := p.Labels[LabelJob]; ok {
			job = p.Namespace + "/" + name
		}
		usage.addPod(ap, p.Labels[LabelApp] == AppName, job)
	}
	return s, jobs, usage, nil
}

// byName sorts what a lister returned (in its cache's map order, new at
// every call) by namespace and name. The decision depends on the order of
// the nodes (first fit) and of the jobs (who gets a worker two jobs tie
// for): the same cluster must get the same targets, or the odd worker
// moves between jobs from round to round, each move a worker let go in
// one job and launched in the other.
func byName[T metav1.Object](items []T) {
	slices.SortFunc(items, func(a, b T) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
}

// autoscaledJob reads an elastic job's bounds from its master Job; ok is
// false for a job that ended, does not say its bounds (not autoscaled), or
// says them wrong (err).
func autoscaledJob(j *batchv1.Job) (job autoscale.Job, ok bool, err error) {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return job, false, nil
		}
	}
	v, set := j.Annotations[AnnotationMaxWorkers]
	if !set {
		return job, false, nil
	}
	hi, err := strconv.Atoi(v)
	if err != nil || hi < 1 {
		return job, false, fmt.Errorf("%s=%q: not a number of workers", AnnotationMaxWorkers, v)
	}
	lo := 0
	if v, set := j.Annotations[AnnotationMinWorkers]; set {
		if lo, err = strconv.Atoi(v); err != nil || lo < 0 {
			return job, false, fmt.Errorf("%s=%q: not a number of workers", AnnotationMinWorkers, v)
		}
	}
	req, err := ParseResources(j.Annotations[AnnotationWorkerRequest])
	if err != nil {
		return job, false, fmt.Errorf("%s: %w", AnnotationWorkerRequest, err)
	}
	// Every pod of a job has the node selector of its master (--node_selector).
	return autoscale.Job{Key: j.Namespace + "/" + j.Labels[LabelJob], Min: lo, Max: hi, Worker: resources(req),
		NodeSelector: j.Spec.Template.Spec.NodeSelector}, true, nil
}

func resources(l corev1.ResourceList) autoscale.Resources {
	return autoscale.Resources{MilliCPU: l.Cpu().MilliValue(), Memory: l.Memory().Value()}
}

// podRequest is what a pod asks of its node: its containers' requests.
func podRequest(p *corev1.Pod) autoscale.Resources {
	var r autoscale.Resources
	for _, c := range p.Spec.Containers {
		r = r.Add(resources(c.Resources.Requests))
	}
	return r
}

// schedulable: a node pods may go to now (Ready, not cordoned).
func schedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// logRoom logs, at debug level, what each node holds besides the jobs'
// workers, and the other pods waiting: what a decision starts from.
func (a *autoscaler) logRoom(nodes []autoscale.Node, u clusterUsage) {
	for _, n := range nodes {
		used := u.others[n.Name]
		a.log.Debug("node room", "node", n.Name, "schedulable", n.Schedulable, "allocatable_mcpu", n.Allocatable.MilliCPU, "used_mcpu", used.MilliCPU,
			"allocatable_mem", n.Allocatable.Memory, "used_mem", used.Memory)
	}
	a.log.Debug("pods waiting, not the jobs' workers", "pods", u.othersWaiting)
}
