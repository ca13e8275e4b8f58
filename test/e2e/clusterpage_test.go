package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"elasticdl/internal/browsertest"
)

// clusterPage is the cluster's dashboard page as a user opens it: through
// `elasticdl dashboard --autoscaler` (a port-forward through the API server
// to the autoscaler's pod), in a headless Chromium, read every second while
// the scenario runs — what the page drew, through its test hooks
// (docs/dashboard.md, "The cluster's dashboard").
type clusterPage struct {
	t    *testing.T
	tab  context.Context
	job  string // the job ("ns/name") whose band and row must show
	stop func() // stops the reads

	mu               sync.Mutex
	n                []int     // the CPU chart's data-n, each read
	services, jobCPU []float64 // the services' band's and the job's latest values, each read
	rows, reasons    []string  // the jobs table's rows and the decisions' reasons, last read
	reads            int
	last             string // the last read's error, if any
}

// pageRead is what one read of the page returns.
type pageRead struct {
	Status  string             `json:"status"`
	N       int                `json:"n"`
	Bands   map[string]float64 `json:"bands"`
	Jobs    []string           `json:"jobs"`
	Reasons []string           `json:"reasons"`
}

const readClusterPage = `(function () {
	var svg = document.querySelector('svg[data-series=cpu]'), bands = {};
	svg.querySelectorAll('path[data-key]').forEach(function (p) { bands[p.dataset.key] = +p.dataset.last; });
	return {status: document.getElementById('status').dataset.state, n: +svg.dataset.n, bands: bands,
		jobs: Array.from(document.querySelectorAll('#jobs tr[data-job]')).map(function (tr) { return tr.dataset.job; }),
		reasons: Array.from(document.querySelectorAll('#decisions li[data-reason]')).map(function (li) { return li.dataset.reason; })};
})()`

// openClusterPage opens the cluster's page and reads it every second until
// the test ends or screenshot. Without a browser it returns nil (a failure
// under browsertest.RequireEnv).
func openClusterPage(t *testing.T, job string) *clusterPage {
	t.Helper()
	if _, err := browsertest.Exec(); err != nil && os.Getenv(browsertest.RequireEnv) != "1" {
		t.Logf("the cluster's page is not checked: %v", err)
		return nil
	}
	d := startDashboardCLI(t, "--autoscaler", fmt.Sprintf("--port=%d", freePortBlock(1)))
	b := browsertest.Launch()
	t.Cleanup(b.Close)
	p := &clusterPage{t: t, tab: b.Tab(t, 10*time.Minute), job: job}
	if err := chromedp.Do(p.tab, chromedp.Navigate(d.url)); err != nil {
		t.Fatalf("open %s: %v", d.url, err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	p.stop = func() { once.Do(func() { close(stop); <-done }) }
	t.Cleanup(p.stop) // before the tab and the browser close
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			p.read()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *clusterPage) read() {
	ctx, cancel := context.WithTimeout(p.tab, 5*time.Second)
	defer cancel()
	r, err := chromedp.Run(ctx, chromedp.Evaluate[pageRead](readClusterPage))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	if p.last = ""; err != nil {
		p.last = err.Error()
		return
	}
	if r.Status != "live" {
		p.last = "status " + r.Status
	}
	p.n = append(p.n, r.N)
	p.services, p.jobCPU = append(p.services, r.Bands["services"]), append(p.jobCPU, r.Bands[p.job])
	p.rows, p.reasons = r.Jobs, slices.DeleteFunc(r.Reasons, func(s string) bool { return s == "" })
}

// shown says whether the page drew more rounds over time, the services'
// band and the job's rise and fall (as clusterBoard.shown asks of the
// JSON API), the job's row and a decision with its reason.
func (p *clusterPage) shown() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	grew := len(p.n) > 1 && p.n[len(p.n)-1] > p.n[0]
	ok := grew && peaked(p.services) && peaked(p.jobCPU) && slices.Contains(p.rows, p.job) && len(p.reasons) > 0
	what := fmt.Sprintf("%d reads (last error %q): data-n %s, services' band %v, %s's %v, rows %v, %d decisions with a reason",
		p.reads, p.last, span(p.n), distinct(p.services), p.job, distinct(p.jobCPU), p.rows, len(p.reasons))
	return ok, what
}

// span is the first and the last of xs.
func span(xs []int) string {
	if len(xs) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d → %d", xs[0], xs[len(xs)-1])
}

// screenshot stops the reads and writes the page to the test's artifact
// directory as cluster.png.
func (p *clusterPage) screenshot() {
	p.t.Helper()
	p.stop()
	path, err := browsertest.Screenshot(p.tab, p.t.ArtifactDir(), "cluster.png")
	if err != nil {
		p.t.Error(err)
		return
	}
	p.t.Logf("screenshot: %s", path)
}
