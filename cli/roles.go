package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/roleflags"
	"elasticdl/internal/worker"
	"elasticdl/proto/pserverpb"
)

func runWorker(ctx context.Context, env Env, args []string) error {
	var f roleflags.Worker
	fs := newFlagSet(env, "worker")
	f.Register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return usageError{err}
	}
	cfg := worker.Config{
		WorkerID:      f.WorkerID,
		MasterAddr:    f.MasterAddr,
		PSAddrs:       f.PSAddrs,
		ModelDef:      f.ModelDef,
		ModelParams:   f.ModelParams,
		MinibatchSize: f.MinibatchSize,
		Seed:          f.Seed,
		// AllReduce workers apply the updates themselves.
		AllReduce:      f.DistributionStrategy == roleflags.StrategyAllReduce,
		CollectiveAddr: f.CollectiveAddr,
		Optimizer:      f.Optimizer,
		GlobalBatch:    f.GlobalBatchSize,
		// AllReduce checkpoints (a PS job's are the PS's).
		CheckpointDir:     f.CheckpointDir,
		CheckpointSteps:   f.CheckpointSteps,
		KeepCheckpointMax: f.KeepCheckpointMax,
		// Modelled compute (experiments).
		ModelledSecondsPerRecord: f.ModelledSecondsPerRecord,
		ModelledCPUs:             f.ModelledCPUs,
		Sync:                     !f.UseAsync,
		OverlapPush:              f.OverlapPush,
		TransportDType:           pserverpb.DType_FLOAT32,
		PSOverGRPC:               f.PSTransport == roleflags.PSTransportGRPC,
		PreloadData:              f.PreloadData,
		MasterTimeout:            f.MasterTimeout,
	}
	if f.TransportDType == roleflags.DTypeBFloat16 {
		cfg.TransportDType = pserverpb.DType_BFLOAT16
	}
	logger := newLogger(env.Stderr, slog.LevelInfo)
	creds, err := roleCreds(logger)
	if err != nil {
		return err
	}
	cfg.Creds = creds
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
	var f roleflags.PS
	fs := newFlagSet(env, "ps")
	f.Register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return usageError{err}
	}
	opt, err := optimizer.Parse(f.Optimizer)
	if err != nil {
		return usageError{fmt.Errorf("--optimizer: %w", err)}
	}
	logger := newLogger(env.Stderr, slog.LevelInfo) // the server adds ps=index
	stop, err := startProfile("ps", f.PSID)
	if err != nil {
		return err
	}
	defer stop()
	cfg := ps.Config{
		Index:                 f.PSID,
		NumPS:                 f.NumPS,
		Optimizer:             opt,
		Logger:                logger,
		CheckpointDir:         f.CheckpointDir,
		CheckpointSteps:       f.CheckpointSteps,
		KeepCheckpointMax:     f.KeepCheckpointMax,
		CheckpointDirForInit:  f.CheckpointDirForInit,
		Run:                   f.Run,
		Sync:                  !f.UseAsync,
		GradsToWait:           f.GradsToWait,
		SyncVersionTolerance:  f.SyncVersionTolerance,
		LiveWorkers:           f.LiveWorkers,
		LRStalenessModulation: f.LRStalenessModulation,
		FrozenTables:          f.FrozenTables,
		ModelledPush:          time.Duration(f.ModelledSecondsPerPush * float64(time.Second)),
	}
	if cfg.Creds, err = roleCreds(logger); err != nil {
		return err
	}
	if f.MetricsAddr != "" {
		cfg.Registry = prometheus.NewRegistry()
		stopMetrics, err := serveMetrics(f.MetricsAddr, cfg.Registry, logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	if f.MasterAddr != "" && f.MasterTimeout > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		go watchMaster(ctx, cancel, f.MasterAddr, f.MasterTimeout, logger)
	}
	err = ps.Run(ctx, f.Addr, cfg)
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
