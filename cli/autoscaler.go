package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"elasticdl/internal/cluster/k8s"
)

// runAutoscaler sizes every elastic job of a cluster (see package
// autoscale) until it is stopped: deploy/autoscaler.yaml runs it.
func runAutoscaler(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "autoscaler")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	interval := fs.Duration("interval", 5*time.Second, "time between decisions")
	settle := fs.Duration("settle", 200*time.Millisecond, "after a change in the cluster (a pod created, bound or gone; a node; a job), decide again this soon, the changes within it together (0: only every --interval)")
	apiTimeout := fs.Duration("api_timeout", 30*time.Second, "how long to wait for the API server")
	verbose := fs.Bool("verbose", false, "debug logging")
	metricsPort := fs.Int("metrics_port", 0, "serve Prometheus metrics at :PORT/metrics (0: none)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *interval <= 0 || *apiTimeout <= 0 {
		return usageError{errors.New("--interval and --api_timeout must be positive")}
	}
	if *settle < 0 {
		return usageError{errors.New("--settle must not be negative")}
	}
	if *metricsPort < 0 || *metricsPort > 65535 {
		return usageError{fmt.Errorf("--metrics_port must be a port number, got %d", *metricsPort)}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := newLogger(env.Stderr, level)
	client, err := k8s.Connect(*kubeconfig, *apiTimeout)
	if err != nil {
		return err
	}
	cfg := k8s.AutoscalerConfig{Interval: *interval, Settle: *settle, Logger: log}
	if *metricsPort > 0 {
		reg := prometheus.NewRegistry()
		cfg.Registry = reg
		stop, err := serveMetrics(fmt.Sprintf(":%d", *metricsPort), reg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	return client.RunAutoscaler(ctx, cfg)
}
