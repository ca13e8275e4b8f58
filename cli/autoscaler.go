package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"

	"elasticdl/internal/autoscale"
	"elasticdl/internal/autoscale/board"
	"elasticdl/internal/autoscale/rounds"
	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/dashboard"
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
	dashboardPort := fs.Int("dashboard_port", clusterDashboardPort, "serve the cluster's live dashboard (a web page and its JSON API, docs/dashboard.md) on :PORT, all addresses: -1 none, 0 a free port; a port that cannot be bound is logged and the autoscaler runs without")
	policy := addPolicyFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := policy.check(fs); err != nil {
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
	if *dashboardPort < -1 || *dashboardPort > 65535 {
		return usageError{fmt.Errorf("--dashboard_port=%d: want -1 (no dashboard), 0 (a free port) or a port up to 65535", *dashboardPort)}
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
	cfg := k8s.AutoscalerConfig{Interval: *interval, Settle: *settle, Logger: log, Policy: policy.name, Remaining: policy.options()}
	if *metricsPort > 0 {
		reg := prometheus.NewRegistry()
		cfg.Registry = reg
		stop, err := serveMetrics(fmt.Sprintf(":%d", *metricsPort), reg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *dashboardPort >= 0 {
		if _, round, stop := serveClusterBoard(ctx, fmt.Sprintf(":%d", *dashboardPort), *interval, log); round != nil {
			cfg.Rounds = round
			defer stop()
		}
	}
	return client.RunAutoscaler(ctx, cfg)
}

// policyFlags are the autoscaler's policy and the remaining policy's knobs.
type policyFlags struct {
	name       string
	fairness   float64
	resizeCost time.Duration
}

// addPolicyFlags registers --policy, --fairness and --resize_cost; the
// knobs' defaults are those the policy was measured with in the
// simulator (autoscale.DefaultRemainingOptions).
func addPolicyFlags(fs *flag.FlagSet) *policyFlags {
	d := autoscale.DefaultRemainingOptions()
	p := &policyFlags{}
	fs.StringVar(&p.name, "policy", k8s.PolicyFair, "how jobs share the cluster: fair (max-min fair shares) or remaining (jobs with less work left get more, from the progress each master publishes on its Job; docs/kubernetes.md#the-cluster-autoscaler); fair stays the default until the control-plane experiment measures remaining better")
	fs.Float64Var(&p.fairness, "fairness", d.Fairness, "--policy=remaining: every job keeps about this fraction of its fair share, in [0, 1] (0: pure shortest-remaining-first; 1: fair shares)")
	fs.DurationVar(&p.resizeCost, "resize_cost", time.Duration(d.ResizeCost*float64(time.Second)), "--policy=remaining: what one resize costs a job (its stall); a running job is not resized for a smaller gain")
	return p
}

// check says what is wrong with the flags: one error.
func (p *policyFlags) check(fs *flag.FlagSet) error {
	if err := k8s.CheckPolicy(p.name); err != nil {
		return usageError{fmt.Errorf("--policy: %w", err)}
	}
	if p.name != k8s.PolicyRemaining && (fs.Changed("fairness") || fs.Changed("resize_cost")) {
		return usageError{errors.New("--fairness and --resize_cost are the remaining policy's: give --policy=remaining too")}
	}
	if !(p.fairness >= 0 && p.fairness <= 1) {
		return usageError{fmt.Errorf("--fairness=%v: want a fraction in [0, 1]", p.fairness)}
	}
	if p.resizeCost < 0 {
		return usageError{fmt.Errorf("--resize_cost=%v: must not be negative", p.resizeCost)}
	}
	return nil
}

func (p *policyFlags) options() autoscale.RemainingOptions {
	o := autoscale.DefaultRemainingOptions()
	o.Fairness, o.ResizeCost = p.fairness, p.resizeCost.Seconds()
	return o
}

// clusterDashboardPort is the autoscaler's --dashboard_port by default
// (the job's is 8042).
const clusterDashboardPort = 8043

// serveClusterBoard serves the cluster's dashboard on addr until stop (or
// ctx's end) and returns where it listens and what to tell it of each
// round. A port that cannot be bound is logged and round is nil:
// observability never fails scaling.
func serveClusterBoard(ctx context.Context, addr string, interval time.Duration, log *slog.Logger) (at net.Addr, round func(rounds.Round), stop func()) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("no cluster dashboard: its port cannot be bound", "addr", addr, "err", err)
		return nil, nil, func() {}
	}
	hub := dashboard.New(dashboard.Options{Page: board.Page, Logger: log})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := (&dashboard.Server{Hub: hub, Logger: log}).Serve(ctx, ln); err != nil {
			log.Warn("the cluster dashboard stopped serving", "err", err)
		}
	}()
	log.Info("cluster dashboard", "addr", ln.Addr().String())
	return ln.Addr(), board.New(hub, interval, log).Round, func() { cancel(); <-done }
}
