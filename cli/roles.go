package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/worker"
)

func runWorker(ctx context.Context, env Env, args []string) error {
	var cfg worker.Config
	var psAddrs string
	fs := newFlagSet(env, "worker")
	fs.IntVar(&cfg.WorkerID, "worker_id", -1, "this worker's ID, given by the master")
	fs.StringVar(&cfg.MasterAddr, "master_addr", "", "host:port of the job's master")
	fs.StringVar(&psAddrs, "ps_addrs", "", "comma-separated host:port of the parameter servers, in shard order")
	fs.StringVar(&cfg.ModelDef, "model_def", "", "model to train")
	fs.IntVar(&cfg.MinibatchSize, "minibatch_size", 64, "records per gradient step")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed of the initial model")
	if err := parse(fs, args); err != nil {
		return err
	}
	if cfg.WorkerID < 0 {
		return usageError{fmt.Errorf("--worker_id: required")}
	}
	if psAddrs != "" {
		cfg.PSAddrs = strings.Split(psAddrs, ",")
	}
	logger := newLogger(env.Stderr, slog.LevelInfo)
	w, err := worker.New(cfg, env.Registry, logger)
	if err != nil {
		return usageError{err}
	}
	stop, err := startProfile("worker", cfg.WorkerID)
	if err != nil {
		return err
	}
	defer stop()
	if err := w.Run(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	// Stopped by a signal: the master (or Kubernetes) asked, a clean exit.
	return nil
}

func runPS(ctx context.Context, env Env, args []string) error {
	var (
		index, numPS      int
		addr, optSpec, ma string
		cfg               ps.Config
	)
	fs := newFlagSet(env, "ps")
	fs.IntVar(&index, "ps_id", -1, "this parameter server's shard index")
	fs.IntVar(&numPS, "num_ps_pods", 0, "number of parameter servers in the job")
	fs.StringVar(&addr, "addr", "", "host:port to serve on")
	fs.StringVar(&optSpec, "optimizer", "sgd:learning_rate=0.01", "optimizer spec")
	fs.StringVar(&ma, "master_addr", "", "host:port of the job's master")
	metricsAddr := fs.String("metrics_addr", "", "host:port to serve Prometheus metrics on (/metrics; empty: none)")
	masterTimeout := fs.Duration("master_timeout", 2*time.Minute, "exit when the master has been unreachable this long (0: never); on Kubernetes nothing else stops a PS whose master died")
	fs.StringVar(&cfg.CheckpointDir, "checkpoint_dir", "", "directory of the PS checkpoints: restored from at start, written every --checkpoint_steps")
	fs.Int64Var(&cfg.CheckpointSteps, "checkpoint_steps", 0, "checkpoint every this many versions of the shard (0: never)")
	fs.IntVar(&cfg.KeepCheckpointMax, "keep_checkpoint_max", 0, "complete checkpoint versions to keep (0: all)")
	fs.StringVar(&cfg.CheckpointDirForInit, "checkpoint_dir_for_init", "", "checkpoint directory to start from when --checkpoint_dir has none")
	useAsync := fs.Bool("use_async", true, "asynchronous SGD; false: sync SGD")
	fs.IntVar(&cfg.GradsToWait, "grads_to_wait", 1, "sync SGD: gradient pushes averaged into one update (capped by --live_workers)")
	fs.Int64Var(&cfg.SyncVersionTolerance, "sync_version_tolerance", 0, "sync SGD: reject gradients computed more than this many versions ago")
	fs.IntVar(&cfg.LiveWorkers, "live_workers", -1, "sync SGD: live workers at start (the master updates it; -1: unknown)")
	fs.BoolVar(&cfg.LRStalenessModulation, "lr_staleness_modulation", false, "async SGD: scale the learning rate of a gradient by 1/staleness")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.Sync = !*useAsync
	if cfg.Sync {
		if err := ps.CheckSyncFlags(cfg.GradsToWait, cfg.SyncVersionTolerance); err != nil {
			return usageError{err}
		}
	}
	if numPS < 1 || index < 0 || index >= numPS {
		return usageError{fmt.Errorf("--ps_id=%d --num_ps_pods=%d: need 0 <= ps_id < num_ps_pods", index, numPS)}
	}
	if err := ps.CheckCheckpointFlags(cfg.CheckpointDir, cfg.CheckpointSteps, cfg.KeepCheckpointMax); err != nil {
		return usageError{err}
	}
	if addr == "" {
		return usageError{fmt.Errorf("--addr: required")}
	}
	opt, err := optimizer.Parse(optSpec)
	if err != nil {
		return usageError{fmt.Errorf("--optimizer: %w", err)}
	}
	logger := newLogger(env.Stderr, slog.LevelInfo) // the server adds ps=index
	stop, err := startProfile("ps", index)
	if err != nil {
		return err
	}
	defer stop()
	cfg.Index, cfg.NumPS, cfg.Optimizer, cfg.Logger = index, numPS, opt, logger
	if *metricsAddr != "" {
		cfg.Registry = prometheus.NewRegistry()
		stopMetrics, err := serveMetrics(*metricsAddr, cfg.Registry, logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	if ma != "" && *masterTimeout > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		go watchMaster(ctx, cancel, ma, *masterTimeout, logger)
	}
	err = ps.Run(ctx, addr, cfg)
	if cause := context.Cause(ctx); err == nil && errors.Is(cause, errMasterGone) {
		return cause
	}
	return err
}

var errMasterGone = errors.New("the job's master is gone")

// watchMaster cancels ctx when nothing has answered at masterAddr for
// timeout: a PS must not outlive its job's master.
func watchMaster(ctx context.Context, cancel context.CancelCauseFunc, masterAddr string, timeout time.Duration, log *slog.Logger) {
	const every = 5 * time.Second
	lastSeen := time.Now()
	tick := time.NewTicker(min(every, timeout))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		conn, err := net.DialTimeout("tcp", masterAddr, every)
		if err == nil {
			conn.Close()
			lastSeen = time.Now()
			continue
		}
		if gone := time.Since(lastSeen); gone >= timeout {
			log.Error("master unreachable, exiting", "master", masterAddr, "for", gone.Round(time.Second), "err", err)
			cancel(fmt.Errorf("%w: %s unreachable for %s", errMasterGone, masterAddr, gone.Round(time.Second)))
			return
		}
	}
}
