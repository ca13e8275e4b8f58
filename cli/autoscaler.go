package cli

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"elasticdl/internal/cluster/k8s"
)

// runAutoscaler sizes every elastic job of a cluster (see package
// autoscale) until it is stopped: deploy/autoscaler.yaml runs it.
func runAutoscaler(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "autoscaler")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	interval := fs.Duration("interval", 5*time.Second, "time between decisions")
	apiTimeout := fs.Duration("api_timeout", 30*time.Second, "how long to wait for the API server")
	verbose := fs.Bool("verbose", false, "debug logging")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *interval <= 0 || *apiTimeout <= 0 {
		return usageError{errors.New("--interval and --api_timeout must be positive")}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	client, err := k8s.Connect(*kubeconfig, *apiTimeout)
	if err != nil {
		return err
	}
	return client.RunAutoscaler(ctx, k8s.AutoscalerConfig{Interval: *interval, Logger: newLogger(env.Stderr, level)})
}
