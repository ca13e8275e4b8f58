package cli

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
)

// k8sDashboardPort is where a master pod serves its dashboard when
// --dashboard_port is 0: bound on every address of the pod, reached by
// port-forward.
const k8sDashboardPort = 8042

// dashboardFD is the master process's inherited dashboard listener.
const dashboardFD = 5

// checkDashboardPort refuses a --dashboard_port that is not -1, 0 or a port.
func checkDashboardPort(port int) error {
	if port < -1 || port > 65535 {
		return usageError{fmt.Errorf("--dashboard_port=%d: want -1 (no dashboard), 0 (the default: a free port locally, %d on Kubernetes) or a port up to 65535", port, k8sDashboardPort)}
	}
	return nil
}

// dashboardAddr is where the job's supervisor binds the dashboard ("":
// none): locally on 127.0.0.1 only, in a master pod on every address.
func (o jobOptions) dashboardAddr() string {
	switch {
	case o.dashboardPort < 0:
		return ""
	case o.backend == backendK8s:
		return portAddr("", o.k8sDashboardPort())
	}
	return portAddr("127.0.0.1", o.dashboardPort)
}

// k8sDashboardPort is a master pod's dashboard port (0: none).
func (o jobOptions) k8sDashboardPort() int {
	switch {
	case o.dashboardPort < 0:
		return 0
	case o.dashboardPort == 0:
		return k8sDashboardPort
	}
	return o.dashboardPort
}

// bindDashboard binds the dashboard's port at addr once for the whole job,
// so that its URL outlives each master (which logs it once the job is
// accepted: a refused job says one line). A port that cannot be bound
// leaves the job without a dashboard (nil): observability never fails
// training.
func bindDashboard(logger *slog.Logger, addr string) *os.File {
	if addr == "" {
		return nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Warn("the job runs without a dashboard: its port cannot be bound", "addr", addr, "err", err)
		return nil
	}
	defer lis.Close() // the file is a descriptor of its own
	f, err := lis.(*net.TCPListener).File()
	if err != nil {
		logger.Warn("the job runs without a dashboard", "err", err)
		return nil
	}
	return f
}

// dashboardListener is the dashboard listener inherited as --dashboard_fd
// (nil: none, or one that cannot be used: the job runs without).
func (l *localMasterOptions) dashboardListener(logger *slog.Logger) net.Listener {
	if l.dashboardFD <= 0 {
		return nil
	}
	f := os.NewFile(uintptr(l.dashboardFD), "dashboard-listener")
	defer f.Close()
	lis, err := net.FileListener(f)
	if err != nil {
		logger.Warn("the job runs without a dashboard", "flag", "--dashboard_fd="+strconv.Itoa(l.dashboardFD), "err", err)
		return nil
	}
	return lis
}
