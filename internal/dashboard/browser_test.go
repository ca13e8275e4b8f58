package dashboard

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
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
	return chromium.b.Tab(t, time.Minute)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if chromium.b != nil {
		chromium.b.Close()
	}
	os.Exit(code)
}

// The embedded page in a real browser: it shows the published document,
// follows a delta live without reloading, and ends with the job.
func TestPageInBrowser(t *testing.T) {
	h := New(Options{Interval: 20 * time.Millisecond})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	defer h.Close()
	h.Publish(Update{Snapshot: json.RawMessage(`{"job":"mnist-1","phase":"training","workers":2}`)})
	ctx := tab(t)
	shows := func(s string) chromedp.Action[bool] {
		b, _ := json.Marshal(s)
		return chromedp.Poll[bool]("document.getElementById('doc').textContent.includes(" + string(b) + ")")
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, shows(`"mnist-1"`)); err != nil {
		t.Fatalf("the page never showed the job: %v", err)
	}
	// A mark the page would lose if it reloaded.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("window.mark = true")); err != nil {
		t.Fatal(err)
	}
	h.Publish(Update{Snapshot: json.RawMessage(`{"job":"mnist-1","phase":"evaluating","workers":3}`),
		Delta: json.RawMessage(`{"phase":"evaluating","workers":3}`)})
	if _, err := chromedp.Run(ctx, shows(`"evaluating"`)); err != nil {
		t.Fatalf("the page never followed the delta: %v", err)
	}
	h.Publish(Update{Snapshot: json.RawMessage(`{"job":"mnist-1","phase":"succeeded","workers":0}`), Ended: true})
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool]("document.getElementById('status').textContent.includes('job ended')")); err != nil {
		t.Fatalf("the page never showed the end: %v", err)
	}
	mark, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("window.mark === true"))
	if err != nil || !mark {
		t.Fatalf("the page reloaded (mark %v, %v)", mark, err)
	}
	path, err := browsertest.Screenshot(ctx, t.ArtifactDir(), "placeholder.png")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
