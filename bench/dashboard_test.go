package bench

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"elasticdl/internal/browsertest"
)

// BenchmarkDashboardOverhead measures what a job's dashboard costs its
// training: the mlp job (2 workers, 1 PS, 8 epochs: ~8 s of training) with the dashboard
// off (--dashboard_port=-1), on with nobody watching (the default), on
// with a program reading its stream and polling api/job and api/series
// every 250 ms, and on with headless Chromium showing the page, one after
// the other in each iteration. Reported: each condition's records/s (the
// job's own figure) and its ratio to off.
//
//	go test ./bench -run '^$' -bench DashboardOverhead -benchtime 3x
func BenchmarkDashboardOverhead(b *testing.B) {
	bin := benchBinary(b)
	br := browsertest.Launch()
	defer br.Close()
	tab := br.Tab(b, time.Hour)
	args := []string{"--model_def=fashion_mnist.mlp", "--num_workers=2", "--num_ps_pods=1", "--num_epochs=8"}
	conds := []struct {
		name  string
		args  []string
		watch func(ctx context.Context, url string)
	}{
		{"off", []string{"--dashboard_port=-1"}, nil},
		{"on", nil, nil},
		{"reader", nil, readDashboard},
		{"browser", nil, func(ctx context.Context, url string) {
			_ = chromedp.Do(tab, chromedp.Navigate(url))
			<-ctx.Done()
			_ = chromedp.Do(tab, chromedp.Navigate("about:blank"))
		}},
	}
	rps := make([]float64, len(conds))
	for i := 0; i < b.N; i++ {
		for c, cond := range conds {
			rps[c] += dashboardJob(b, bin, append(append([]string{}, args...), cond.args...), cond.watch)
		}
	}
	for c, cond := range conds {
		b.ReportMetric(rps[c]/float64(b.N), cond.name+"-records/s")
		if c > 0 {
			b.ReportMetric(rps[c]/rps[0], cond.name+"/off")
		}
	}
	b.ReportMetric(0, "ns/op")
}

var dashboardURL = regexp.MustCompile(`url=(http://\S+)`)

// dashboardJob runs a training job and, once it logs its dashboard's URL,
// watch (if any) until it ends; returns the job's records/s.
func dashboardJob(b *testing.B, bin string, args []string, watch func(context.Context, string)) float64 {
	b.Helper()
	out := b.TempDir()
	cmd := exec.Command(bin, append([]string{"train",
		"--training_data=" + filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
		"--log_interval=0", "--output=" + out}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	sc := bufio.NewScanner(stderr)
	started := false
	for sc.Scan() {
		if m := dashboardURL.FindStringSubmatch(sc.Text()); m != nil && watch != nil && !started {
			started = true
			go func() { defer close(watched); watch(ctx, m[1]) }()
		}
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("job: %v", err)
	}
	cancel()
	if started {
		<-watched
	} else if watch != nil {
		b.Fatal("the job logged no dashboard URL")
	}
	return readSummary(b, out).RecordsPerSecond
}

// readDashboard reads the dashboard's stream and polls two documents every
// 250 ms, as a tool watching the job would, until ctx ends.
func readDashboard(ctx context.Context, url string) {
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"api/stream", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, doc := range []string{"api/job", "api/series"} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+doc, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
}
