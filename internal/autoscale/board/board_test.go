package board

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/autoscale/rounds"
	"elasticdl/internal/dashboard"
)

// seriesDoc is api/cluster/series.
type seriesDoc struct {
	StrideSeconds float64         `json:"stride_seconds"`
	Samples       []rounds.Sample `json:"samples"`
}

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// round is a fake round i: the services' and the job's CPU move with i;
// every third round ns/a's target changes.
func round(i int, after time.Duration) rounds.Round {
	r := rounds.Round{At: t0.Add(after), CapacityCPU: 8, ServicesCPU: 1 + 0.5*float64(i), PendingServicePods: i % 2,
		Jobs: []rounds.Job{{Key: "ns/a", Min: 1, Max: 4, Target: 1 + i%4, Placed: 1 + i%4, Running: 1 + i%3, Pending: i % 2, CPU: 0.5 + float64(i), Reason: "share"}}}
	if i%3 == 2 {
		r.Changes = []rounds.Change{{At: r.At, Job: "ns/a", From: i % 4, To: 1 + i%4, Reason: "share"}}
	}
	return r
}

func serve(t *testing.T) (*Board, *dashboard.Hub, string) {
	t.Helper()
	hub := dashboard.New(dashboard.Options{Page: Page})
	srv := httptest.NewServer(hub.Handler())
	t.Cleanup(func() { hub.Close(); srv.Close() })
	return New(hub, time.Second, nil), hub, srv.URL
}

func get(t *testing.T, url string, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestDocuments: after three rounds a second apart, the API serves the
// last round, the three samples and the change, in the hub's envelope.
func TestDocuments(t *testing.T) {
	b, _, base := serve(t)
	for i := range 3 {
		b.Round(round(i, time.Duration(i)*time.Second))
	}
	var cluster struct {
		API int `json:"api"`
		clusterDoc
	}
	get(t, base+"/api/cluster", &cluster)
	want := clusterDoc{At: t0.Add(2 * time.Second), IntervalSeconds: 1, CapacityCPU: 8, ServicesCPU: 2, PendingServicePods: 0,
		Jobs: []jobDoc{{Job: "ns/a", Min: 1, Max: 4, Target: 3, Placed: 3, Running: 3, Pending: 0, CPU: 2.5, Reason: "share"}}}
	if cluster.API != 1 || fmt.Sprint(cluster.clusterDoc) != fmt.Sprint(want) {
		t.Errorf("api/cluster %+v, want api 1 and %+v", cluster, want)
	}
	var series seriesDoc
	get(t, base+"/api/cluster/series", &series)
	if series.StrideSeconds != 1 || len(series.Samples) != 3 {
		t.Fatalf("api/cluster/series: stride %v, %d samples; want 1 s, 3", series.StrideSeconds, len(series.Samples))
	}
	for i, s := range series.Samples {
		j := s.Jobs["ns/a"]
		if !s.T.Equal(t0.Add(time.Duration(i)*time.Second)) || s.CapacityCPU != 8 || s.ServicesCPU != 1+0.5*float64(i) || j.CPU != 0.5+float64(i) || j.Target != 1+i {
			t.Errorf("sample %d: %+v", i, s)
		}
	}
	var decisions decisionsDoc
	get(t, base+"/api/cluster/decisions", &decisions)
	if wantC := (rounds.Change{At: t0.Add(2 * time.Second), Job: "ns/a", From: 2, To: 3, Reason: "share"}); len(decisions.Decisions) != 1 || decisions.Decisions[0] != wantC {
		t.Errorf("api/cluster/decisions %+v, want %+v", decisions.Decisions, wantC)
	}
}

// TestEmptyLists: before any change, and with no jobs, the lists are
// empty, not null.
func TestEmptyLists(t *testing.T) {
	b, _, base := serve(t)
	b.Round(rounds.Round{At: t0, CapacityCPU: 4})
	for doc, want := range map[string]string{"cluster": `"jobs":[]`, "cluster/decisions": `"decisions":[]`, "cluster/series": `"jobs":{}`} {
		resp, err := http.Get(base + "/api/" + doc)
		if err != nil {
			t.Fatal(err)
		}
		var body strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
		resp.Body.Close()
		if !strings.Contains(body.String(), want) {
			t.Errorf("api/%s = %s, want %s in it", doc, body.String(), want)
		}
	}
}

// TestStream: a stream gets the snapshot, then a delta per round with the
// round, its new sample and its new decision; a round that is not sampled
// (a settle after the last) sends the round alone.
func TestStream(t *testing.T) {
	b, _, base := serve(t)
	b.Round(round(0, 0))
	events := openStream(t, base)
	snap := next(t, events, "snapshot")
	for _, k := range []string{"cluster", "series", "decisions", "api", "boot", "seq"} {
		if _, ok := snap[k]; !ok {
			t.Errorf("snapshot without %q: %v", k, snap)
		}
	}
	b.Round(round(2, time.Second)) // sampled, a change
	d := next(t, events, "delta")
	if s, _ := d["samples"].([]any); len(s) != 1 || s[0].(map[string]any)["services_cpu"] != 2.0 {
		t.Errorf("delta samples %v, want the one new sample", d["samples"])
	}
	if c, _ := d["decisions"].([]any); len(c) != 1 || c[0].(map[string]any)["reason"] != "share" {
		t.Errorf("delta decisions %v, want the one new decision", d["decisions"])
	}
	if c, _ := d["cluster"].(map[string]any); c["services_cpu"] != 2.0 {
		t.Errorf("delta cluster %v, want the round's", d["cluster"])
	}
	b.Round(round(3, time.Second+200*time.Millisecond)) // not due
	d = next(t, events, "delta")
	if _, ok := d["samples"]; ok {
		t.Errorf("a round not sampled sent samples: %v", d)
	}
	if _, ok := d["decisions"]; ok {
		t.Errorf("a round without changes sent decisions: %v", d)
	}
	if c, _ := d["cluster"].(map[string]any); c["services_cpu"] != 2.5 {
		t.Errorf("delta cluster %v, want the last round's", d["cluster"])
	}
}

// TestDecimatedDelta: the round that thins the series sends the whole of
// it, stride doubled, instead of its sample.
func TestDecimatedDelta(t *testing.T) {
	b := New(dashboard.New(dashboard.Options{}), time.Second, nil)
	var u dashboard.Update
	for i := range rounds.MaxSamples + 1 {
		var err error
		if u, err = b.update(round(i, time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	var d struct {
		Samples []rounds.Sample `json:"samples"`
		Series  *seriesDoc      `json:"series"`
	}
	if err := json.Unmarshal(u.Delta, &d); err != nil {
		t.Fatal(err)
	}
	if d.Samples != nil || d.Series == nil || d.Series.StrideSeconds != 2 || len(d.Series.Samples) != rounds.MaxSamples/2+1 {
		t.Fatalf("delta after thinning: samples %d, series %+v; want the whole series at 2 s", len(d.Samples), d.Series)
	}
	// The samples encoded one by one are the history's.
	var doc seriesDoc
	if err := json.Unmarshal(u.Docs[DocSeries], &doc); err != nil {
		t.Fatal(err)
	}
	stride, held := b.history.Samples()
	if doc.StrideSeconds != stride.Seconds() || !reflect.DeepEqual(doc.Samples, held) || !reflect.DeepEqual(d.Series.Samples, held) {
		t.Errorf("api/cluster/series after thinning is not the history's series")
	}
}

// TestNotFinite: a round with a CPU that is not a number is logged and
// not published, and spoils nothing after it.
func TestNotFinite(t *testing.T) {
	var logged strings.Builder
	hub := dashboard.New(dashboard.Options{})
	b := New(hub, time.Second, slog.New(slog.NewTextHandler(&logged, nil)))
	b.Round(round(0, 0))
	bad := round(1, time.Second)
	bad.Jobs[0].CPU = math.NaN()
	b.Round(bad)
	if hub.Seq() != 1 || !strings.Contains(logged.String(), "not finite") {
		t.Errorf("after a NaN round: %d publishes, log %q; want 1 and a warning", hub.Seq(), logged.String())
	}
	bad = round(1, time.Second)
	bad.ServicesCPU = math.Inf(1)
	b.Round(bad)
	b.Round(round(2, 2*time.Second))
	_, ss := b.history.Samples()
	if hub.Seq() != 2 || len(ss) != 2 {
		t.Errorf("then a good round: %d publishes, %d samples; want 2, 2", hub.Seq(), len(ss))
	}
}

// openStream reads api/stream's events (name and decoded data) until the
// test ends.
func openStream(t *testing.T, base string) <-chan map[string]any {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	events := make(chan map[string]any, 64)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				var m map[string]any
				if json.Unmarshal([]byte(v), &m) != nil {
					m = map[string]any{"undecodable": v}
				}
				m["event"] = name
				events <- m
			}
		}
	}()
	return events
}

// next is the stream's next event, which must be a name.
func next(t *testing.T, events <-chan map[string]any, name string) map[string]any {
	t.Helper()
	select {
	case e, ok := <-events:
		if !ok {
			t.Fatalf("the stream ended before a %s", name)
		}
		if e["event"] != name {
			t.Fatalf("event %v, want a %s", e, name)
		}
		return e
	case <-time.After(20 * time.Second): // a guard: the event comes at once
		t.Fatalf("no %s", name)
	}
	return nil
}

// BenchmarkRound: a round with a full series of 5 jobs (what the
// autoscaler's loop spends on its dashboard).
func BenchmarkRound(b *testing.B) {
	bd := New(dashboard.New(dashboard.Options{}), time.Second, nil)
	r := round(0, 0)
	for i := range 5 {
		r.Jobs = append(r.Jobs, rounds.Job{Key: fmt.Sprintf("ns/job-%d", i), Min: 1, Max: 8, Target: 4, Running: 4, CPU: 4.25, Reason: "share"})
	}
	for i := range rounds.MaxSamples {
		r.At = t0.Add(time.Duration(i) * time.Second)
		bd.Round(r)
	}
	b.ResetTimer()
	for i := range b.N {
		r.At = t0.Add(time.Duration(rounds.MaxSamples+i) * time.Second)
		bd.Round(r)
	}
}
