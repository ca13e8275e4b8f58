package cli

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// bindDashboard says where a local dashboard is; a port that cannot be
// bound leaves the job without one, with a warning, not an error.
func TestBindDashboard(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	f := bindDashboard(logger, "127.0.0.1:0")
	if f == nil {
		t.Fatalf("no dashboard: %s", buf.String())
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !strings.HasPrefix(ln.Addr().String(), "127.0.0.1:") || buf.Len() > 0 {
		t.Errorf("bound %s, logged %q", ln.Addr(), buf.String())
	}
	if f := bindDashboard(logger, ln.Addr().String()); f != nil {
		f.Close()
		t.Fatal("bound a port in use")
	}
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "without a dashboard") {
		t.Errorf("no warning: %q", buf.String())
	}
	if f := bindDashboard(logger, ""); f != nil {
		t.Error("--dashboard_port=-1 bound a port")
	}
}

func TestDashboardAddr(t *testing.T) {
	cases := []struct {
		o    jobOptions
		addr string
		k8s  int
	}{
		{jobOptions{backend: backendLocal}, "127.0.0.1:0", k8sDashboardPort},
		{jobOptions{backend: backendLocal, dashboardPort: 9000}, "127.0.0.1:9000", 9000},
		{jobOptions{backend: backendLocal, dashboardPort: -1}, "", 0},
		{jobOptions{backend: backendK8s}, ":8042", k8sDashboardPort},
		{jobOptions{backend: backendK8s, dashboardPort: -1}, "", 0},
	}
	for _, c := range cases {
		if got, k := c.o.dashboardAddr(), c.o.k8sDashboardPort(); got != c.addr || k != c.k8s {
			t.Errorf("%+v: %q %d, want %q %d", c.o, got, k, c.addr, c.k8s)
		}
	}
}
