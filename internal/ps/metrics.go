package ps

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcome labels.
const (
	pushApplied       = "applied"
	pushInvalid       = "invalid"
	pushUninitialized = "uninitialized"
	pushFailed        = "failed"
	pushRejected      = "rejected"    // sync: too stale, nothing applied
	pushAccumulated   = "accumulated" // sync: summed towards the current version
	pushDuplicate     = "duplicate"   // a minibatch the shard holds already: nothing done
	pushEmpty         = "empty"       // a minibatch with no gradients for the shard: recorded as applied

	pullFull          = "full"
	pullCurrent       = "current"
	pullUninitialized = "uninitialized"

	checkpointWritten = "written"
	checkpointFailed  = "failed"
	checkpointSkipped = "skipped"
)

// metrics is nil-safe: a nil *metrics records nothing, so handlers need no
// "metrics enabled?" branches.
type metrics struct {
	pushes *prometheus.CounterVec
	pulls  *prometheus.CounterVec
	models *prometheus.CounterVec
	ckpts  *prometheus.CounterVec
	stale  prometheus.Histogram
	syncN  prometheus.Histogram

	reg *prometheus.Registry
	all []prometheus.Collector // registered so far, for unregister
}

func newMetrics(reg *prometheus.Registry, index int, version func() int64) (*metrics, error) {
	labels := prometheus.Labels{"shard": strconv.Itoa(index)}
	m := &metrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "elasticdl", Subsystem: "ps", Name: "gradient_pushes_total",
			Help: "PushGradients calls by outcome.", ConstLabels: labels,
		}, []string{"outcome"}),
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "elasticdl", Subsystem: "ps", Name: "pulls_total",
			Help: "PullDenseParameters calls by outcome (full: parameters sent, current: caller up to date).", ConstLabels: labels,
		}, []string{"outcome"}),
		models: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "elasticdl", Subsystem: "ps", Name: "model_pushes_total",
			Help: "PushModel calls by whether they initialized the shard.", ConstLabels: labels,
		}, []string{"accepted"}),
		ckpts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "elasticdl", Subsystem: "ps", Name: "checkpoints_total",
			Help: "Checkpoint writes by outcome (skipped: replaced by a newer snapshot before it was written).", ConstLabels: labels,
		}, []string{"outcome"}),
		stale: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "elasticdl", Subsystem: "ps", Name: "gradient_staleness",
			Help:    "Versions applied between the one a gradient was computed on and the push.",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64}, ConstLabels: labels,
		}),
	}
	m.syncN = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "elasticdl", Subsystem: "ps", Name: "sync_update_gradients",
		Help:    "Sync SGD: gradients averaged into each applied update.",
		Buckets: []float64{1, 2, 3, 4, 6, 8, 16, 32}, ConstLabels: labels,
	})
	versionGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "elasticdl", Subsystem: "ps", Name: "model_version",
		Help: "The shard's model version; -1 before initialization.", ConstLabels: labels,
	}, func() float64 { return float64(version()) })
	m.reg = reg
	for _, c := range []prometheus.Collector{m.pushes, m.pulls, m.models, m.ckpts, m.stale, m.syncN, versionGauge} {
		if err := reg.Register(c); err != nil {
			m.unregister() // leave the registry as we found it
			return nil, err
		}
		m.all = append(m.all, c)
	}
	return m, nil
}

func (m *metrics) unregister() {
	if m == nil {
		return
	}
	for _, c := range m.all {
		m.reg.Unregister(c)
	}
	m.all = nil
}

func (m *metrics) push(outcome string) {
	if m != nil {
		m.pushes.WithLabelValues(outcome).Inc()
	}
}

func (m *metrics) pull(outcome string) {
	if m != nil {
		m.pulls.WithLabelValues(outcome).Inc()
	}
}

func (m *metrics) pushModel(accepted bool) {
	if m != nil {
		m.models.WithLabelValues(strconv.FormatBool(accepted)).Inc()
	}
}

func (m *metrics) checkpoint(outcome string) {
	if m != nil {
		m.ckpts.WithLabelValues(outcome).Inc()
	}
}

func (m *metrics) staleness(versions int64) {
	if m != nil && versions >= 0 {
		m.stale.Observe(float64(versions))
	}
}

func (m *metrics) syncUpdate(n int) {
	if m != nil {
		m.syncN.Observe(float64(n))
	}
}
