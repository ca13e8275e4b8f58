package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"elasticdl/internal/browsertest"
)

// One Chromium for the package's tests, started by the first that needs it.
var chromium struct {
	once sync.Once
	b    *browsertest.Browser
}

func tab(t *testing.T) context.Context {
	chromium.once.Do(func() { chromium.b = browsertest.Launch() })
	return chromium.b.Tab(t, 2*time.Minute)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if chromium.b != nil {
		chromium.b.Close()
	}
	os.Exit(code)
}

// ShotsEnv set to 1 makes the page tests also write their screenshots to
// docs/images (make dashboard-shots).
const ShotsEnv = "ELASTICDL_UPDATE_SHOTS"

// maxShot is the most a screenshot in docs/images may weigh.
const maxShot = 120 << 10

// await polls the JS condition cond in the page until it holds.
func await(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	// A condition that throws (an element not there yet) is false.
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(pctx, chromedp.Poll[bool]("(function () { try { return ("+cond+") } catch (e) { return false } })()")); err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(window.errors || []).join('; ') + ' ' + document.getElementById('status').textContent +
			' seq=' + document.body.dataset.seq + ' ' + Array.from(document.querySelectorAll('svg[data-series]')).map(function (s) {
			return s.dataset.series + '=' + s.dataset.n }).join(' ')`))
		t.Fatalf("the page never showed %s: %v (page: %s)", what, err, state)
	}
}

// serve publishes to a new hub served over httptest and opens its page.
func serve(t *testing.T, opts Options) (*Hub, context.Context) {
	t.Helper()
	opts.Interval = 20 * time.Millisecond
	h := New(opts)
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(func() { h.Close(); srv.Close() })
	ctx := tab(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	return h, ctx
}

// shoot writes the page's screenshot to the test's artifact directory and,
// under ShotsEnv, to docs/images.
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	path, err := browsertest.Screenshot(ctx, t.ArtifactDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	if os.Getenv(ShotsEnv) != "1" {
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	png, err := browsertest.SmallPNG(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(png) > maxShot {
		t.Fatalf("%s is %d KiB, more than %d KiB: simplify the page", name, len(png)>>10, maxShot>>10)
	}
	if err := os.WriteFile(filepath.Join("..", "..", "docs", "images", name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestJobPage: the job's page draws the published documents (charts with
// every point, the timeline's lanes and states, the events), follows a
// delta live without reloading, and keeps the end with its summary and
// the banner.
func TestJobPage(t *testing.T) {
	j := newFakeJob()
	h, ctx := serve(t, Options{})
	docs := j.docs(t, "running")
	h.Publish(Update{Snapshot: encode(t, docs), Docs: docs})
	loss, rps := j.counts()
	n := strconv.Itoa
	await(t, ctx, "the header", `document.getElementById('job').textContent === 'mnist-demo' &&
		document.getElementById('phase').dataset.phase === 'training' && document.body.dataset.seq === '1'`)
	await(t, ctx, "the loss chart with every point", `document.querySelector('svg[data-series=loss]').dataset.n === '`+n(loss)+`'`)
	await(t, ctx, "the records/s chart with every point", `document.querySelector('svg[data-series=rps]').dataset.n === '`+n(rps)+`'`)
	await(t, ctx, "the eval markers and the re-shard", `document.querySelectorAll('svg[data-series=loss] circle[fill="#7c3aed"]').length === 2 &&
		Array.from(document.querySelectorAll('svg[data-series=rps] .vmark text')).map(function (e) { return e.textContent }).join() === 'PS 1→2 · 1.6 s'`)
	lane := func(slot, state string) string {
		return `document.querySelector('[data-slot="` + slot + `"]').dataset.state === '` + state + `'`
	}
	await(t, ctx, "the lanes' states", lane("worker/0", "running")+` && `+lane("worker/1", "running")+` && `+
		lane("worker/2", "ended")+` && `+lane("ps/1", "running")+` &&
		document.querySelector('[data-slot="worker/0"]').dataset.id === '2' &&
		document.querySelectorAll('[data-slot="worker/0"] rect.end[fill="#dc2626"]').length === 1 &&
		document.querySelectorAll('[data-slot="worker/2"] rect.end[fill="#2563eb"]').length === 1 &&
		document.querySelector('[data-slot="worker/0"] rect.end title').textContent.includes('relaunching')`)
	await(t, ctx, "the slow marks on their workers' lanes, and the summary's line", `document.querySelectorAll('[data-slot="worker/1"] rect.slow').length === 1 &&
		document.querySelectorAll('[data-slot="worker/1"] rect.recovered').length === 1 &&
		document.querySelectorAll('[data-slot="worker/2"] rect.slow').length === 1 &&
		document.querySelectorAll('[data-slot="worker/0"] rect.slow, [data-slot="ps/0"] rect.slow').length === 0 &&
		document.querySelector('[data-slot="worker/1"] rect.slow title').textContent.includes('marked slow: 311 records/s') &&
		Array.from(document.querySelectorAll('#summary dd')).some(function (e) { return e.textContent === '#3 now · 3 marks · 0 parked' })`)
	await(t, ctx, "the events, newest first, the loss a warning", `document.querySelectorAll('#events li').length === `+n(len(j.events))+` &&
		document.querySelector('#events li').dataset.kind === 'let-go' &&
		document.querySelector('#events li[data-kind=exited][data-cause=killed]').className === 'warning'`)
	await(t, ctx, "the ledger's twice in red", `document.querySelector('#epochs tr[data-epoch="1"] td.bad').textContent === '1200'`)
	await(t, ctx, "the summary so far", `document.getElementById('summary').dataset.status === 'running'`)
	// A mark the page would lose if it reloaded.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("window.mark = true")); err != nil {
		t.Fatal(err)
	}

	// Delta: two samples, worker 1 preempted.
	j.sample(91)
	j.sample(92)
	j.elapsed = 92.4
	j.segments["worker/1"][0]["ended"], j.segments["worker/1"][0]["cause"], j.segments["worker/1"][0]["lost"] = at(92), "preempted", true
	j.events = append(j.events, obj{"seq": len(j.events) + 1, "at": at(92), "kind": "exited", "role": "worker", "id": 1, "slot": 1,
		"cause": "preempted", "warning": true})
	j.ring = []obj{{"version": 7, "cause": "worker lost", "at": at(91), "seconds": 0.4}}
	docs = j.docs(t, "running")
	h.Publish(Update{Snapshot: encode(t, docs), Docs: docs, Delta: encode(t, obj{"job": j.jobDoc(),
		"events": j.events[len(j.events)-1:], "samples": j.samples[len(j.samples)-2:], "timeline": j.timeline()})})
	await(t, ctx, "the delta's samples, event and lane", `document.querySelector('svg[data-series=loss]').dataset.n === '`+n(loss+2)+`' &&
		document.querySelector('svg[data-series=rps]').dataset.n === '`+n(rps+2)+`' && `+lane("worker/1", "ended")+` &&
		document.querySelector('#events li').dataset.cause === 'preempted' && document.body.dataset.seq === '2' &&
		Array.from(document.querySelectorAll('svg[data-series=rps] .vmark text')).map(function (e) { return e.textContent }).join() === 'v7 · 0.4 s,PS 1→2 · 1.6 s'`)

	j.phase = "succeeded"
	docs = j.docs(t, "succeeded")
	h.Publish(Update{Snapshot: encode(t, docs), Docs: docs, Ended: true})
	await(t, ctx, "the end: the summary and the banner", `document.getElementById('summary').dataset.status === 'succeeded' &&
		!document.getElementById('banner').hidden && document.getElementById('status').textContent.includes('job ended') &&
		document.getElementById('phase').dataset.phase === 'succeeded'`)
	if mark, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("window.mark === true")); err != nil || !mark {
		t.Fatalf("the page reloaded (mark %v, %v)", mark, err)
	}
	shoot(t, ctx, "job.png")
}

// TestClusterPage: the cluster's page draws the autoscaler's documents
// (every round in the CPU chart, the jobs, the decisions newest first),
// follows a delta live, and says it is reconnecting when the autoscaler
// goes away.
func TestClusterPage(t *testing.T) {
	c := newFakeCluster()
	h, ctx := serve(t, Options{Page: "cluster.html"})
	snap, docs := c.snapshot(t)
	h.Publish(Update{Snapshot: snap, Docs: rawDocs(docs)})
	n := strconv.Itoa
	await(t, ctx, "every round, the jobs and the decisions", `document.querySelector('svg[data-series=cpu]').dataset.n === '`+n(len(c.samples))+`' &&
		document.querySelectorAll('#jobs tr[data-job]').length === 3 &&
		document.querySelectorAll('#decisions li[data-reason]').length === `+n(len(c.decisions))+` &&
		document.querySelector('#decisions li').dataset.reason === 'min-unfit' && document.getElementById('capacity').textContent === '12' &&
		document.querySelector('#jobs tr[data-job="ns/a"]').cells[7].textContent === 'services-first (2 waiting)'`)
	last := c.samples[len(c.samples)-1]
	await(t, ctx, "the services and three jobs stacked, each band with its latest value", fmt.Sprintf(`
		document.querySelectorAll('svg[data-series=cpu] path[fill-opacity]').length === 4 &&
		Math.abs(+document.querySelector('svg[data-series=cpu] path[data-key="services"]').dataset.last - %v) < 1e-9 &&
		document.querySelector('svg[data-series=cpu] path[data-key="ns/a"]').dataset.last === '2.5' &&
		document.querySelector('svg[data-series=cpu] path[data-key="ns/c"]').dataset.last === '1.5'`, last["services_cpu"]))
	shoot(t, ctx, "cluster.png")
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("window.mark = true")); err != nil {
		t.Fatal(err)
	}

	c.decisions = append(c.decisions, obj{"at": at(240), "job": "ns/c", "from": 1, "to": 2, "reason": "share"})
	c.sample(240)
	c.sample(241)
	snap, docs = c.snapshot(t)
	h.Publish(Update{Snapshot: snap, Docs: rawDocs(docs), Delta: encode(t, obj{"cluster": c.clusterDoc(),
		"samples": c.samples[len(c.samples)-2:], "decisions": c.decisions[len(c.decisions)-1:]})})
	await(t, ctx, "the delta's rounds and decision", `document.querySelector('svg[data-series=cpu]').dataset.n === '`+n(len(c.samples))+`' &&
		document.querySelector('#decisions li').dataset.reason === 'share' && document.body.dataset.seq === '2' &&
		document.querySelector('#jobs tr[data-job="ns/c"]').cells[2].textContent === '2' && window.mark === true`)

	// After the autoscaler thinned its series, a delta carries the whole
	// series, which replaces the page's.
	c.samples = c.samples[:0:0]
	for i := range 5 {
		c.sample(300 + 2*i)
	}
	snap, docs = c.snapshot(t)
	h.Publish(Update{Snapshot: snap, Docs: rawDocs(docs), Delta: encode(t, obj{"cluster": c.clusterDoc(),
		"series": obj{"stride_seconds": 2, "samples": c.samples}})})
	await(t, ctx, "the thinned series replacing the page's", `document.querySelector('svg[data-series=cpu]').dataset.n === '5' &&
		document.body.dataset.seq === '3' && window.mark === true`)

	h.Close() // the autoscaler goes: its streams end, and new ones are refused
	await(t, ctx, "the status reconnecting", `document.getElementById('status').dataset.state === 'reconnecting' &&
		document.getElementById('banner').hidden`)
}

func rawDocs(docs map[string][]byte) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range docs {
		out[k] = v
	}
	return out
}
