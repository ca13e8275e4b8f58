package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"elasticdl/internal/master"
)

// serveMetrics serves reg (plus the Go runtime's and the process's own
// metrics) at http://addr/metrics until the returned stop is called.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	stop, _, err = serveMetricsAt(addr, reg, log)
	return stop, err
}

// serveMetricsAt is serveMetrics that also says where it listens.
func serveMetricsAt(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), at string, err error) {
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, "", fmt.Errorf("metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, "", fmt.Errorf("metrics: %w", err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", "http://"+lis.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, lis.Addr().String(), nil
}

// startMasterMetrics registers the master's metrics and serves them.
func startMasterMetrics(m *master.Master, addr string, log *slog.Logger) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	if err := m.RegisterMetrics(reg); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return serveMetrics(addr, reg, log)
}
