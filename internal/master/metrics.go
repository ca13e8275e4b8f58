package master

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"elasticdl/internal/cluster"
)

// metricsCollector exposes the job's state as Prometheus metrics, read at
// scrape time from what the master already keeps (the summary, the
// dispatcher, the instances), so no code path needs a second set of
// counters to keep in step.
type metricsCollector struct {
	m *Master

	tasks, launched, lost, relaunched, preempted, parked *prometheus.Desc
	replaced                                             *prometheus.Desc
	instances, records, corrupt, epoch, version          *prometheus.Desc
	finished, ringVersion, worldSize                     *prometheus.Desc
	arOps, arBytes, arSeconds                            *prometheus.Desc
	target, bounds, requested, goodput                   *prometheus.Desc
	psShards, psLayout, reshards                         *prometheus.Desc
	workerSlow, workerRate                               *prometheus.Desc

	// goodput is measured over the time between scrapes, at least
	// goodputWindow: the last sample and value.
	mu          sync.Mutex
	lastRecords int64
	lastAt      time.Time
	lastGoodput float64
}

// goodputWindow is the shortest time goodput is measured over.
const goodputWindow = 10 * time.Second

func newDesc(name, help string, labels []string, job string) *prometheus.Desc {
	return prometheus.NewDesc("elasticdl_master_"+name, help, labels, prometheus.Labels{"job": job})
}

// RegisterMetrics adds the master's metrics to reg: the job's counters and
// gauges, and the latency of GetTask. Call it before Run.
func (m *Master) RegisterMetrics(reg prometheus.Registerer) error {
	job := m.cfg.JobName
	c := &metricsCollector{
		m:           m,
		tasks:       newDesc("tasks_total", "Task reports and requeues: completed, failed (reported with an error), requeued (worker lost or timed out), backup (copies of straggling tasks handed out), superseded (reports of a copy whose other copy won, dropped).", []string{"outcome"}, job),
		launched:    newDesc("instances_launched_total", "Instances launched, relaunches included.", []string{"role"}, job),
		lost:        newDesc("instances_lost_total", "Instances that ended without being asked to (killed, preempted, deleted, failed).", []string{"role"}, job),
		relaunched:  newDesc("instances_relaunched_total", "Instances launched to replace a lost one.", []string{"role"}, job),
		preempted:   newDesc("instances_preempted_total", "Lost instances the cluster took back for higher-priority work.", []string{"role"}, job),
		parked:      newDesc("workers_parked_total", "AllReduce: slow workers that left the ring for a while (parked), and new workers launched on probation in their slots (unparked).", []string{"event"}, job),
		replaced:    newDesc("workers_replaced_total", "Slow workers stopped and relaunched away from their nodes (replaced), and replacements relaunched anywhere after pending too long (avoidance_dropped); --replace_slow_workers.", []string{"event"}, job),
		instances:   newDesc("instances", "Instances by state: running, or launched and not running yet (pending pods: the elastic headroom).", []string{"role", "state"}, job),
		records:     newDesc("records_done_total", "Training records of tasks reported done.", nil, job),
		corrupt:     newDesc("corrupt_records_total", "Records skipped as corrupt.", nil, job),
		epoch:       newDesc("epoch", "The training epoch in progress (1-based).", nil, job),
		version:     newDesc("model_version", "The highest model version training reports carried.", nil, job),
		finished:    newDesc("job_finished", "1 once the job has ended (see the summary for how).", nil, job),
		ringVersion: newDesc("ring_version", "AllReduce: the rendezvous version (it moves whenever the ring re-forms).", nil, job),
		worldSize:   newDesc("world_size", "AllReduce: members of the formed ring (0 while it forms).", nil, job),
		arOps:       newDesc("allreduce_ops_total", "AllReduce: collective operations, summed over the workers (as of their last heartbeat).", nil, job),
		arBytes:     newDesc("allreduce_bytes_total", "AllReduce: bytes the workers sent to their ring neighbours.", nil, job),
		arSeconds:   newDesc("allreduce_seconds_total", "AllReduce: seconds the workers spent inside collectives.", nil, job),
		target:      newDesc("target_workers", "The workers the job aims to run now (--num_workers, or what elasticdl scale or the autoscaler asked, within the bounds).", nil, job),
		bounds:      newDesc("worker_bounds", "The job's worker bounds: --min_workers (bound=min) and --num_workers (bound=max).", []string{"bound"}, job),
		requested:   newDesc("requested_cpu_cores", "CPU cores the job's running pods request (Kubernetes; absent where unknown).", nil, job),
		goodput:     newDesc("goodput_records_per_cpu_second", "Training records per second per requested CPU core of the job's running pods, over the time since the previous scrape (at least 10 s).", nil, job),
		psShards:    newDesc("ps_shards", "PS jobs: the shards of the layout the workers route by (--num_ps_pods, or what elasticdl scale --ps asked once re-sharded).", nil, job),
		psLayout:    newDesc("ps_layout", "PS jobs: the layout number (0 until the first live re-shard).", nil, job),
		reshards:    newDesc("ps_reshards_total", "PS jobs: live re-shards completed.", nil, job),
		// Per worker, as the issue and docs/faults.md name them.
		workerSlow: prometheus.NewDesc("elasticdl_worker_slow", "1 while the worker is marked slow: its records/s below --slow_worker_fraction of the other workers' median (docs/faults.md).",
			[]string{"worker"}, prometheus.Labels{"job": job}),
		workerRate: prometheus.NewDesc("elasticdl_worker_records_per_second", "A live worker's training records per second over its recent tasks, each timed from hand-out to report.",
			[]string{"worker"}, prometheus.Labels{"job": job}),
	}
	lat := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "elasticdl", Subsystem: "master", Name: "get_task_seconds",
		Help:        "Time to answer GetTask, waiting for the master's lock included.",
		Buckets:     prometheus.ExponentialBuckets(0.0001, 4, 10), // 0.1 ms .. 26 s
		ConstLabels: prometheus.Labels{"job": job},
	})
	if err := reg.Register(c); err != nil {
		return err
	}
	resize := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "elasticdl", Subsystem: "master", Name: "resize_seconds",
		Help:        "Time to recover: from a worker lost (cause=lost) or a new worker target (cause=target) to training with every worker the job aims for running.",
		Buckets:     prometheus.ExponentialBuckets(0.1, 2, 12), // 0.1 s .. 205 s
		ConstLabels: prometheus.Labels{"job": job},
	}, []string{"cause"})
	rec := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "elasticdl", Subsystem: "master", Name: "ring_recovery_seconds",
		Help:        "AllReduce: from a membership change (a worker lost, joined, or a ring reported broken) to the next committed step.",
		Buckets:     prometheus.ExponentialBuckets(0.05, 2, 12), // 50 ms .. 102 s
		ConstLabels: prometheus.Labels{"job": job},
	})
	reshard := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "elasticdl", Subsystem: "master", Name: "ps_reshard_seconds",
		Help:        "PS jobs: a live re-shard, from the PS target (kind=total) or from the pause of new tasks (kind=paused) to the new layout serving.",
		Buckets:     prometheus.ExponentialBuckets(0.01, 2, 14), // 10 ms .. 82 s
		ConstLabels: prometheus.Labels{"job": job},
	}, []string{"kind"})
	cols := []prometheus.Collector{lat, rec, resize, reshard}
	for i, col := range cols {
		if err := reg.Register(col); err != nil {
			reg.Unregister(c)
			for _, done := range cols[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	m.observe.metrics = shellMetrics{getTaskLatency: lat, ringRecovery: rec, resizeTime: resize, reshardTime: reshard}
	return nil
}

func (c *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.tasks, c.launched, c.lost, c.relaunched, c.preempted, c.parked, c.replaced, c.instances, c.records, c.corrupt, c.epoch, c.version, c.finished, c.ringVersion, c.worldSize, c.arOps, c.arBytes, c.arSeconds, c.target, c.bounds, c.requested, c.goodput, c.psShards, c.psLayout, c.reshards, c.workerSlow, c.workerRate} {
		ch <- d
	}
}

func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	m.mu.Lock()
	snap := m.job.Snapshot()
	target, lowest := m.job.Target(), m.job.MinWorkers()
	shards, layout := m.job.NumPS()
	m.mu.Unlock()
	s, pr := snap.Summary, snap.Progress
	wRun, wPend := float64(snap.WorkersRunning), float64(snap.WorkersPending)
	pRun, pPend := float64(snap.PSRunning), float64(snap.PSPending)
	version, finished := snap.ModelVersion, snap.Over

	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(c.tasks, float64(s.Tasks.Completed), "completed")
	counter(c.tasks, float64(s.Tasks.Failed), "failed")
	counter(c.tasks, float64(s.Tasks.Requeued), "requeued")
	counter(c.tasks, float64(s.Tasks.Backups), "backup")
	counter(c.tasks, float64(s.Tasks.Superseded), "superseded")
	for _, r := range snap.WorkerRates {
		id, slow := strconv.Itoa(r.Worker), 0.0
		if r.Slow {
			slow = 1
		}
		gauge(c.workerSlow, slow, id)
		gauge(c.workerRate, r.RecordsPerSecond, id)
	}
	w, p := string(cluster.Worker), string(cluster.PS)
	counter(c.launched, float64(s.Workers.Launched), w)
	counter(c.launched, float64(s.PS.Launched), p)
	counter(c.lost, float64(s.Workers.Lost), w)
	counter(c.lost, float64(s.PS.Lost), p)
	counter(c.relaunched, float64(s.Workers.Relaunched), w)
	counter(c.relaunched, float64(s.PS.Relaunched), p)
	counter(c.preempted, float64(s.Workers.Preempted), w)
	counter(c.preempted, float64(s.PS.Preempted), p)
	counter(c.parked, float64(s.Workers.Parked), "parked")
	counter(c.parked, float64(s.Workers.Unparked), "unparked")
	counter(c.replaced, float64(s.Workers.Replaced), "replaced")
	counter(c.replaced, float64(s.Workers.AvoidanceDropped), "avoidance_dropped")
	gauge(c.instances, wRun, w, "running")
	gauge(c.instances, wPend, w, "pending")
	gauge(c.instances, pRun, p, "running")
	gauge(c.instances, pPend, p, "pending")
	counter(c.records, float64(pr.RecordsDone))
	counter(c.corrupt, float64(s.CorruptRecords))
	gauge(c.epoch, float64(pr.Epoch))
	gauge(c.version, float64(version))
	f := 0.0
	if finished {
		f = 1
	}
	gauge(c.finished, f)
	gauge(c.target, float64(target))
	gauge(c.bounds, float64(lowest), "min")
	gauge(c.bounds, float64(m.cfg.NumWorkers), "max")
	if req := m.cfg.RequestedCPU; req.Worker > 0 {
		cores := req.Master + wRun*req.Worker + pRun*req.PS
		gauge(c.requested, cores)
		gauge(c.goodput, c.measureGoodput(m.now(), pr.RecordsDone, cores))
	}
	if m.cfg.NumPS > 0 {
		gauge(c.psShards, float64(shards))
		gauge(c.psLayout, float64(layout))
		counter(c.reshards, float64(len(s.PS.Reshards)))
	}
	if m.cfg.allReduce() {
		gauge(c.ringVersion, float64(snap.RingVersion))
		gauge(c.worldSize, float64(snap.WorldSize))
		counter(c.arOps, float64(snap.Allreduce.Ops))
		counter(c.arBytes, float64(snap.Allreduce.Bytes))
		counter(c.arSeconds, snap.Allreduce.Seconds)
	}
}

// measureGoodput is the records per second per requested core since the
// previous sample, a new sample being taken at most every goodputWindow.
func (c *metricsCollector) measureGoodput(now time.Time, records int64, cores float64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch dt := now.Sub(c.lastAt); {
	case c.lastAt.IsZero():
	case dt < goodputWindow:
		return c.lastGoodput
	case cores > 0:
		c.lastGoodput = float64(records-c.lastRecords) / dt.Seconds() / cores
	default:
		c.lastGoodput = 0
	}
	c.lastRecords, c.lastAt = records, now
	return c.lastGoodput
}
