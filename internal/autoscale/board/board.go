// Package board publishes the autoscaler's rounds to the cluster's
// dashboard: a dashboard.Hub whose page is cluster.html. Each round it
// records the round in a rounds.History and publishes api/cluster (the
// round), api/cluster/series, api/cluster/decisions and a delta for the
// stream (docs/dashboard.md, "Cluster dashboard"). Publishing never waits
// for a reader (the hub swaps a pointer), so a slow browser cannot slow a
// round.
package board

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"elasticdl/internal/autoscale/rounds"
	"elasticdl/internal/dashboard"
	"elasticdl/internal/decimate"
)

// Page is the asset the cluster's hub serves at /.
const Page = "cluster.html"

// The documents' names under api/.
const (
	DocCluster   = "cluster"
	DocSeries    = "cluster/series"
	DocDecisions = "cluster/decisions"
)

// Board is the publisher. Its Round is called from the autoscaler's round
// loop only: what it sent last is its own.
type Board struct {
	hub      *dashboard.Hub
	history  *rounds.History
	interval time.Duration
	log      *slog.Logger

	sent      bool            // a first update was published
	series    json.RawMessage // the last encoded series and decisions:
	decisions json.RawMessage // the snapshot holds them between changes
	// encoded is each sample of the series encoded once, in step with the
	// history's: a round re-encodes only its own sample, not 720.
	encoded []json.RawMessage
}

// New returns a board publishing to hub; interval is the autoscaler's
// (--interval), shown on the page.
func New(hub *dashboard.Hub, interval time.Duration, logger *slog.Logger) *Board {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Board{hub: hub, history: rounds.New(), interval: interval, log: logger}
}

// Round records r and publishes the documents; a round it cannot encode is
// logged and left out (observability never fails scaling).
func (b *Board) Round(r rounds.Round) {
	u, err := b.update(r)
	if err != nil {
		b.log.Warn("the cluster dashboard skips a round", "err", err)
		return
	}
	b.hub.Publish(u)
}

// clusterDoc is api/cluster: the last round.
type clusterDoc struct {
	At                 time.Time `json:"at"`
	IntervalSeconds    float64   `json:"interval_seconds"`
	CapacityCPU        float64   `json:"capacity_cpu"`
	ServicesCPU        float64   `json:"services_cpu"`
	PendingServicePods int       `json:"pending_service_pods"`
	Jobs               []jobDoc  `json:"jobs"`
}

type jobDoc struct {
	Job     string  `json:"job"`
	Min     int     `json:"min"`
	Max     int     `json:"max"`
	Target  int     `json:"target"`
	Placed  int     `json:"placed"`
	Running int     `json:"running"`
	Pending int     `json:"pending"`
	CPU     float64 `json:"cpu"`
	Reason  string  `json:"reason"`
}

// decisionsDoc is api/cluster/decisions: the latest target changes,
// oldest first.
type decisionsDoc struct {
	Decisions []rounds.Change `json:"decisions"`
}

// snapshot is the stream's snapshot, {"cluster":…,"series":…,"decisions":…},
// put together from the documents encoded (json.Marshal would check and
// compact the whole series again, most of a round's cost).
func snapshot(cluster, series, decisions json.RawMessage) json.RawMessage {
	b := make([]byte, 0, len(cluster)+len(series)+len(decisions)+40)
	b = append(append(b, `{"cluster":`...), cluster...)
	b = append(append(b, `,"series":`...), series...)
	b = append(append(b, `,"decisions":`...), decisions...)
	return append(b, '}')
}

// deltaDoc is the stream's delta: the round, and the samples and
// decisions it added; after a decimation the whole series instead of its
// samples (the page replaces what it holds, as the job's page does).
type deltaDoc struct {
	Cluster   json.RawMessage   `json:"cluster"`
	Samples   []json.RawMessage `json:"samples,omitempty"`
	Series    json.RawMessage   `json:"series,omitempty"`
	Decisions []rounds.Change   `json:"decisions,omitempty"`
}

// errNotFinite: a round whose CPU is NaN or infinite cannot be encoded,
// and would spoil every later series.
var errNotFinite = errors.New("a CPU figure is not finite")

// update records r and returns what to publish.
func (b *Board) update(r rounds.Round) (dashboard.Update, error) {
	if err := finite(r); err != nil {
		return dashboard.Update{}, err
	}
	added := b.history.Add(r)
	docs := map[string]json.RawMessage{}
	var err error
	enc := func(name string, doc any) json.RawMessage {
		data, e := json.Marshal(doc)
		if e != nil && err == nil {
			err = fmt.Errorf("encode %s: %w", name, e)
		}
		docs[name] = data
		return data
	}
	delta := deltaDoc{Cluster: enc(DocCluster, newClusterDoc(r, b.interval))}
	if added.Sample || b.series == nil {
		if err := b.encodeSeries(added); err != nil {
			return dashboard.Update{}, err
		}
		docs[DocSeries] = b.series
		switch {
		case added.Thinned:
			delta.Series = b.series
		case added.Sample:
			delta.Samples = b.encoded[len(b.encoded)-1:]
		}
	}
	if changes := b.history.Changes(); added.Changes > 0 || b.decisions == nil {
		b.decisions = enc(DocDecisions, decisionsDoc{Decisions: orEmpty(changes)})
		delta.Decisions = changes[len(changes)-added.Changes:]
	}
	if err != nil {
		return dashboard.Update{}, err
	}
	u := dashboard.Update{Snapshot: snapshot(docs[DocCluster], b.series, b.decisions), Docs: docs}
	if b.sent {
		if u.Delta, err = json.Marshal(delta); err != nil {
			return dashboard.Update{}, fmt.Errorf("encode the delta: %w", err)
		}
	}
	b.sent = true
	return u, nil
}

// encodeSeries encodes api/cluster/series, {"stride_seconds":…,
// "samples":[…]}, from the samples encoded so far and the round's new one.
func (b *Board) encodeSeries(added rounds.Added) error {
	stride, samples := b.history.Samples()
	if added.Sample {
		data, err := json.Marshal(samples[len(samples)-1])
		if err != nil {
			return fmt.Errorf("encode a sample: %w", err)
		}
		b.encoded = append(b.encoded, data)
		if added.Thinned {
			b.encoded = decimate.Halve(b.encoded, func(_, _, kept json.RawMessage) json.RawMessage { return kept })
		}
	}
	doc := append([]byte(`{"stride_seconds":`), strconv.FormatFloat(stride.Seconds(), 'f', -1, 64)...)
	doc = append(doc, `,"samples":[`...)
	for i, e := range b.encoded {
		if i > 0 {
			doc = append(doc, ',')
		}
		doc = append(doc, e...)
	}
	b.series = append(doc, "]}"...)
	return nil
}

func newClusterDoc(r rounds.Round, interval time.Duration) clusterDoc {
	d := clusterDoc{At: r.At, IntervalSeconds: interval.Seconds(), CapacityCPU: r.CapacityCPU, ServicesCPU: r.ServicesCPU,
		PendingServicePods: r.PendingServicePods, Jobs: []jobDoc{}}
	for _, j := range r.Jobs {
		d.Jobs = append(d.Jobs, jobDoc{Job: j.Key, Min: j.Min, Max: j.Max, Target: j.Target, Placed: j.Placed,
			Running: j.Running, Pending: j.Pending, CPU: j.CPU, Reason: j.Reason})
	}
	return d
}

func finite(r rounds.Round) error {
	ok := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	if !ok(r.CapacityCPU) || !ok(r.ServicesCPU) {
		return errNotFinite
	}
	for _, j := range r.Jobs {
		if !ok(j.CPU) {
			return fmt.Errorf("job %s: %w", j.Key, errNotFinite)
		}
	}
	return nil
}

// orEmpty makes a nil slice encode as [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
