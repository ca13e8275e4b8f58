package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/autoscale/rounds"
)

func TestAutoscalerDashboardPortFlag(t *testing.T) {
	for _, port := range []string{"-2", "70000"} {
		code, _, errOut := run(t, "autoscaler", "--dashboard_port="+port)
		if code != 2 || !strings.Contains(errOut, "--dashboard_port="+port+": want -1 (no dashboard)") {
			t.Errorf("--dashboard_port=%s: exit %d, stderr %q; want a usage error", port, code, errOut)
		}
	}
}

// TestServeClusterBoard: the autoscaler's dashboard serves what each round
// tells it, until stopped.
func TestServeClusterBoard(t *testing.T) {
	var logged strings.Builder
	at, round, stop := serveClusterBoard(context.Background(), "127.0.0.1:0", time.Second, slog.New(slog.NewTextHandler(&logged, nil)))
	if round == nil {
		t.Fatalf("no dashboard: %s", logged.String())
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	if !strings.Contains(logged.String(), "cluster dashboard") || !strings.Contains(logged.String(), at.String()) {
		t.Errorf("log %q does not say where the dashboard is", logged.String())
	}
	round(rounds.Round{At: time.Now(), CapacityCPU: 8, ServicesCPU: 2, Jobs: []rounds.Job{{Key: "ns/a", Target: 3, CPU: 3.25, Reason: "share"}}})
	resp, err := http.Get("http://" + at.String() + "/api/cluster")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		CapacityCPU float64 `json:"capacity_cpu"`
		Jobs        []struct {
			Job string  `json:"job"`
			CPU float64 `json:"cpu"`
		} `json:"jobs"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || doc.CapacityCPU != 8 || len(doc.Jobs) != 1 || doc.Jobs[0].Job != "ns/a" || doc.Jobs[0].CPU != 3.25 {
		t.Errorf("api/cluster: %+v, %v", doc, err)
	}
	stop()
	stopped = true
	if c, err := net.Dial("tcp", at.String()); err == nil {
		c.Close()
		t.Errorf("the dashboard still listens at %s after stop", at)
	}
}

// TestServeClusterBoardPortTaken: a port that cannot be bound is a warning,
// and no dashboard.
func TestServeClusterBoardPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var logged strings.Builder
	at, round, stop := serveClusterBoard(context.Background(), taken.Addr().String(), time.Second, slog.New(slog.NewTextHandler(&logged, nil)))
	stop()
	if at != nil || round != nil || !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "cannot be bound") {
		t.Errorf("on a port taken: at %v, round set %v, log %q; want a warning and no dashboard", at, round != nil, logged.String())
	}
}
