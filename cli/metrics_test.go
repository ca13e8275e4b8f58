package cli

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "elasticdl_test_total", Help: "a test counter"})
	reg.MustRegister(c)
	c.Add(3)
	stop, at, err := serveMetricsAt("127.0.0.1:0", reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + at + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"elasticdl_test_total 3", "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The port is taken now: a second server says so.
	if _, _, err := serveMetricsAt(at, prometheus.NewRegistry(), slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "listen on "+at) {
		t.Errorf("second server on %s: %v", at, err)
	}
}
