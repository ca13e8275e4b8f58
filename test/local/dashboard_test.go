package local

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"elasticdl/internal/browsertest"
)

var dashboardURL = regexp.MustCompile(`msg=dashboard url=(http://127\.0\.0\.1:\d+/)`)

// boardEvent is what the test reads of api/events' events.
type boardEvent struct {
	Seq   int64  `json:"seq"`
	Kind  string `json:"kind"`
	Role  string `json:"role"`
	ID    int    `json:"id"`
	Slot  int    `json:"slot"`
	Cause string `json:"cause"`
}

// getJSON GETs url into v; false on any failure (the master may be busy
// starting).
func getJSON(url string, v any) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil
}

// TestDashboard: a local job prints its dashboard's URL; api/job shows
// both workers running, and so does the page (the job's name, a loss
// chart with points, two running worker lanes); after a worker is
// killed, api/events and the page show its exit (killed), its relaunch
// and the new worker running in its slot; after the master is killed, the
// next one serves the same URL with the history and resumed.
func TestDashboard(t *testing.T) {
	needData(t)
	j := startJob(t, mlpArgs("20")...) // stopped once checked
	var base string
	waitFor(t, time.Minute, "the dashboard's URL on stderr", func() bool {
		m := dashboardURL.FindStringSubmatch(j.stderr.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	var jd struct {
		API     int    `json:"api"`
		Job     string `json:"job"`
		Phase   string `json:"phase"`
		Workers struct {
			Running int `json:"running"`
		} `json:"workers"`
	}
	waitFor(t, 2*time.Minute, "api/job: training with 2 workers running", func() bool {
		return getJSON(base+"api/job", &jd) && jd.Phase == "training" && jd.Workers.Running == 2
	})
	if jd.API != 1 || jd.Job == "" {
		t.Errorf("api/job: api %d, job %q", jd.API, jd.Job)
	}
	page := openPage(t, base, jd.Job)
	var workers []int
	waitFor(t, time.Minute, "two worker processes", func() bool {
		workers = j.children("worker")
		return len(workers) == 2
	})
	if err := syscall.Kill(workers[0], syscall.SIGKILL); err != nil {
		t.Fatalf("kill worker %d: %v", workers[0], err)
	}
	killed := awaitRelaunch(t, base)
	t.Logf("worker %d (slot %d) killed, relaunched and running again", killed.ID, killed.Slot)
	if page != nil {
		pagePoll(t, page, "the kill, the relaunch and the new worker running in the slot's lane", fmt.Sprintf(`
			document.querySelectorAll('#events li[data-kind="exited"][data-cause="killed"]').length > 0 &&
			document.querySelectorAll('#events li[data-kind="launched"][data-cause="relaunch"]').length > 0 &&
			document.querySelector('[data-slot="worker/%d"]').dataset.state === 'running' &&
			+document.querySelector('[data-slot="worker/%d"]').dataset.id >= 2`, killed.Slot, killed.Slot))
		path, err := browsertest.Screenshot(page, t.ArtifactDir(), "job.png")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}
	killMaster(t, j, base, page)
	if err := j.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	j.wait(time.Minute)
}

// awaitRelaunch waits until api/events shows a worker killed, its
// relaunch and the new worker running in its slot; it returns the exit.
func awaitRelaunch(t *testing.T, base string) *boardEvent {
	t.Helper()
	var killed *boardEvent
	var seen map[string]bool
	waitFor(t, time.Minute, "api/events: the worker killed, relaunched and running again", func() bool {
		var ed struct {
			Events []boardEvent `json:"events"`
		}
		if !getJSON(base+"api/events", &ed) {
			return false
		}
		seen = map[string]bool{}
		for i, e := range ed.Events {
			switch {
			case e.Role != "worker":
			case e.Kind == "exited" && e.Cause == "killed":
				killed = &ed.Events[i]
				seen["exited"] = true
			case killed != nil && e.Kind == "launched" && e.Cause == "relaunch" && e.Slot == killed.Slot:
				seen["relaunch"] = true
			case killed != nil && e.Kind == "running" && e.Slot == killed.Slot && e.ID >= 2:
				seen["running"] = true
			}
		}
		return seen["exited"] && seen["relaunch"] && seen["running"]
	})
	return killed
}

// openPage opens the dashboard in a headless Chromium: it shows the job,
// a loss chart with at least 3 points and two running worker lanes.
// Without a browser it returns nil (a failure under
// browsertest.RequireEnv).
func openPage(t *testing.T, base, name string) context.Context {
	t.Helper()
	if _, err := browsertest.Exec(); err != nil && os.Getenv(browsertest.RequireEnv) != "1" {
		t.Logf("the page is not checked: %v", err)
		return nil
	}
	b := browsertest.Launch()
	t.Cleanup(b.Close)
	ctx := b.Tab(t, 3*time.Minute)
	if err := chromedp.Do(ctx, chromedp.Navigate(base)); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(name)
	pagePoll(t, ctx, "the job training, a loss chart with 3 points and two running worker lanes", `
		document.getElementById('job').textContent === `+string(js)+` &&
		document.getElementById('phase').dataset.phase === 'training' &&
		+document.querySelector('svg[data-series=loss]').dataset.n >= 3 &&
		document.querySelectorAll('[data-slot^="worker/"][data-state="running"]').length === 2`)
	return ctx
}

// pagePoll waits (a minute at most) until the JS condition cond holds in
// the page; a condition that throws is false.
func pagePoll(t *testing.T, page context.Context, what, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(page, time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool]("(function () { try { return ("+cond+") } catch (e) { return false } })()")); err != nil {
		state, _ := chromedp.Run(page, chromedp.Evaluate[string](`document.getElementById('job').textContent + ' ' +
			document.getElementById('phase').dataset.phase + ' ' + document.getElementById('status').textContent + ' seq=' +
			document.body.dataset.seq + ' loss=' + document.querySelector('svg[data-series=loss]').dataset.n + ' lanes=' +
			Array.from(document.querySelectorAll('[data-slot]')).map(function (g) { return g.dataset.slot + ':' + g.dataset.state + ':' + g.dataset.id }).join(',') +
			' events=' + Array.from(document.querySelectorAll('#events li')).map(function (li) { return li.dataset.kind + ':' + li.dataset.cause }).join(',')`))
		t.Fatalf("the page never showed %s: %v (page: %s)", what, err, state)
	}
}

// killMaster kill -9s the job's master: the next one serves the same URL,
// with a new boot, the first one's events and resumed; the open page
// (nil: none) follows without a reload.
func killMaster(t *testing.T, j *job, base string, page context.Context) {
	t.Helper()
	var before struct {
		Boot string `json:"boot"`
	}
	if !getJSON(base+"api/job", &before) {
		t.Fatal("api/job does not answer")
	}
	// The history is saved every 5 s: a crash before loses what is new.
	waitFor(t, time.Minute, "the history saved with the killed worker", func() bool {
		b, err := os.ReadFile(filepath.Join(j.out, "master", "history.json"))
		return err == nil && strings.Contains(string(b), `"cause":"killed"`)
	})
	masters := j.children("master")
	if len(masters) != 1 {
		t.Fatalf("masters %v, want one", masters)
	}
	if err := syscall.Kill(masters[0], syscall.SIGKILL); err != nil {
		t.Fatalf("kill master %d: %v", masters[0], err)
	}
	waitFor(t, time.Minute, "the next master's api/events: the first one's events, then resumed", func() bool {
		var ed struct {
			Boot   string       `json:"boot"`
			Events []boardEvent `json:"events"`
		}
		if !getJSON(base+"api/events", &ed) || ed.Boot == before.Boot || len(ed.Events) == 0 || ed.Events[0].Seq != 1 {
			return false
		}
		resumed, killed := 0, 0
		for _, e := range ed.Events {
			switch {
			case e.Kind == "resumed":
				resumed++
			case e.Kind == "exited" && e.Cause == "killed":
				killed++
			}
		}
		return resumed == 1 && killed == 1
	})
	if page == nil {
		return
	}
	pagePoll(t, page, "the next master's resumed and the first one's events", `document.querySelectorAll('#events li[data-kind="resumed"]').length > 0 &&
		document.querySelectorAll('#events li[data-kind="exited"][data-cause="killed"]').length > 0`)
}
