package k8s

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"elasticdl/internal/autoscale"
)

// Pod kinds in the autoscaler's metrics: the pods of ElasticDL jobs
// (masters, parameter servers, workers), and every other pod (online
// services, system pods, other work).
const (
	kindTraining = "training"
	kindServices = "services"
)

// clusterUsage is what a round saw: the schedulable capacity, what the
// pods bound to it request by kind, the pods waiting by kind, and each
// elastic job's workers.
type clusterUsage struct {
	capacity    autoscale.Resources
	schedulable map[string]bool
	requested   map[string]autoscale.Resources
	pending     map[string]int
	// workers of each autoscaled job: bound to a node, or waiting.
	bound, waiting map[string]int
	// others: what the pods that are not the jobs' workers hold on each
	// node (where a decision starts from), and how many of them wait.
	others        map[string]autoscale.Resources
	othersWaiting int
	// jobs: what every pod of each ElasticDL job (namespace/name: workers,
	// master, PS, autoscaled or not) bound to the capacity requests.
	jobs map[string]autoscale.Resources
}

func newClusterUsage() clusterUsage {
	return clusterUsage{schedulable: map[string]bool{}, requested: map[string]autoscale.Resources{},
		pending: map[string]int{}, bound: map[string]int{}, waiting: map[string]int{}, others: map[string]autoscale.Resources{},
		jobs: map[string]autoscale.Resources{}}
}

func (u *clusterUsage) addNode(n autoscale.Node) {
	if n.Schedulable {
		u.capacity = u.capacity.Add(n.Allocatable)
		u.schedulable[n.Name] = true
	}
}

// addPod counts p; training: a pod of an ElasticDL job, job (if known)
// its namespace/name.
func (u *clusterUsage) addPod(p autoscale.Pod, training bool, job string) {
	kind := kindServices
	if training {
		kind = kindTraining
	}
	switch {
	case p.Node == "":
		u.pending[kind]++
	case u.schedulable[p.Node]:
		// Only what is on the capacity counts toward its use.
		u.requested[kind] = u.requested[kind].Add(p.Request)
		if job != "" {
			u.jobs[job] = u.jobs[job].Add(p.Request)
		}
	}
	switch {
	case p.Job != "" && p.Node == "":
		u.waiting[p.Job]++
	case p.Job != "":
		u.bound[p.Job]++
	case p.Node == "":
		u.othersWaiting++
	default:
		u.others[p.Node] = u.others[p.Node].Add(p.Request)
	}
}

// autoscalerMetrics are the cluster-level elasticity metrics, set each
// round (names in docs/kubernetes.md, "The cluster autoscaler").
type autoscalerMetrics struct {
	capacity, requested, utilization *prometheus.GaugeVec
	pending                          *prometheus.GaugeVec
	target, workers                  *prometheus.GaugeVec
	decision                         prometheus.Histogram
}

func newAutoscalerMetrics(reg prometheus.Registerer) (*autoscalerMetrics, error) {
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "elasticdl", Subsystem: "autoscaler", Name: name, Help: help}, labels)
	}
	m := &autoscalerMetrics{
		capacity:    gauge("capacity", "Allocatable resources of the schedulable nodes: CPU in cores, memory in bytes.", "resource"),
		requested:   gauge("requested", "What the pods bound to schedulable nodes request, by kind: training (ElasticDL jobs' pods) or services (every other pod).", "resource", "kind"),
		utilization: gauge("utilization", "Requested over capacity (0..1), all kinds together.", "resource"),
		pending:     gauge("pending_pods", "Pods waiting to be scheduled, by kind.", "kind"),
		target:      gauge("job_target_workers", "The target the autoscaler decided for each elastic job.", "job"),
		workers:     gauge("job_workers", "Each elastic job's worker pods: bound to a node (state=bound) or waiting (state=pending).", "job", "state"),
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "elasticdl", Subsystem: "autoscaler", Name: "decision_seconds",
			Help: "Time to decide the targets from a snapshot of the cluster.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
	}
	for _, c := range []prometheus.Collector{m.capacity, m.requested, m.utilization, m.pending, m.target, m.workers, m.decision} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe sets the metrics from a round; a nil m does nothing.
func (m *autoscalerMetrics) observe(took time.Duration, u clusterUsage, ds []autoscale.Decision) {
	if m == nil {
		return
	}
	m.decision.Observe(took.Seconds())
	m.capacity.WithLabelValues("cpu").Set(float64(u.capacity.MilliCPU) / 1000)
	m.capacity.WithLabelValues("memory").Set(float64(u.capacity.Memory))
	var used autoscale.Resources
	for _, kind := range []string{kindTraining, kindServices} {
		r := u.requested[kind]
		used = used.Add(r)
		m.requested.WithLabelValues("cpu", kind).Set(float64(r.MilliCPU) / 1000)
		m.requested.WithLabelValues("memory", kind).Set(float64(r.Memory))
		m.pending.WithLabelValues(kind).Set(float64(u.pending[kind]))
	}
	ratio := func(a, b int64) float64 {
		if b <= 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	m.utilization.WithLabelValues("cpu").Set(ratio(used.MilliCPU, u.capacity.MilliCPU))
	m.utilization.WithLabelValues("memory").Set(ratio(used.Memory, u.capacity.Memory))
	// Jobs come and go: only those of this round are reported.
	m.target.Reset()
	m.workers.Reset()
	for _, d := range ds {
		m.target.WithLabelValues(d.Key).Set(float64(d.Target))
		m.workers.WithLabelValues(d.Key, "bound").Set(float64(u.bound[d.Key]))
		m.workers.WithLabelValues(d.Key, "pending").Set(float64(u.waiting[d.Key]))
	}
}
