package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"elasticdl/internal/cluster/local"
	"elasticdl/internal/master"
)

// runEvaluate evaluates a saved model (a checkpoint directory or a training
// job's OUTPUT/model) on --validation_data: a job whose PS restore the model
// and whose workers get only evaluation tasks.
func runEvaluate(ctx context.Context, env Env, args []string) error {
	cfg := master.DefaultConfig()
	cfg.Mode = master.ModeEvaluate
	cfg.JobName = "elasticdl-evaluate"
	fs := newFlagSet(env, "evaluate")
	fs.StringVar(&cfg.ValidationData, "validation_data", "", "data to evaluate the model on: an IDX images file or a CSV file")
	return runModelJob(ctx, env, fs, &cfg, args)
}

// runPredict writes the predictions of a saved model for every record of
// --prediction_data to --prediction_outputs, in input order.
func runPredict(ctx context.Context, env Env, args []string) error {
	cfg := master.DefaultConfig()
	cfg.Mode = master.ModePredict
	cfg.JobName = "elasticdl-predict"
	fs := newFlagSet(env, "predict")
	fs.StringVar(&cfg.PredictionData, "prediction_data", "", "records to predict: an IDX images file or a CSV file (labels are read but not used)")
	fs.StringVar(&cfg.PredictionOutputs, "prediction_outputs", "", "CSV file to write: a header, then one row per input record in input order: index,class,p0,...,pK-1")
	return runModelJob(ctx, env, fs, &cfg, args)
}

// runModelJob is the part evaluate and predict share: a job on a saved
// model, with the same master, workers and PS as training.
func runModelJob(ctx context.Context, env Env, fs *flag.FlagSet, cfg *master.Config, args []string) error {
	fs.StringVar(&cfg.ModelDef, "model_def", "", "the model, from `elasticdl zoo` (e.g. fashion_mnist.cnn)")
	fs.StringVar(&cfg.CheckpointDirForInit, "checkpoint_dir_for_init", "", "the model to use: a checkpoint directory (--checkpoint_dir of a training job) or a training job's OUTPUT/model")
	fs.StringVar(&cfg.Output, "output", "", "directory for job_summary.json and logs (default: a new temporary directory)")
	fs.StringVar(&cfg.JobName, "job_name", cfg.JobName, "name of the job")
	fs.IntVar(&cfg.NumWorkers, "num_workers", cfg.NumWorkers, "number of workers")
	fs.IntVar(&cfg.NumPS, "num_ps_pods", cfg.NumPS, "number of parameter servers")
	fs.IntVar(&cfg.MinibatchSize, "minibatch_size", cfg.MinibatchSize, "records per forward pass")
	fs.IntVar(&cfg.NumMinibatchesPerTask, "num_minibatches_per_task", cfg.NumMinibatchesPerTask, "minibatches per task")
	fs.IntVar(&cfg.MaxTaskAttempts, "max_task_attempts", cfg.MaxTaskAttempts, "a task that fails this many times fails the job")
	fs.DurationVar(&cfg.TaskTimeout, "task_timeout", cfg.TaskTimeout, "a task held longer than this goes back to the queue (0: never)")
	fs.DurationVar(&cfg.HeartbeatTimeout, "worker_heartbeat_timeout", cfg.HeartbeatTimeout, "a worker silent for this long is stopped and replaced")
	fs.IntVar(&cfg.RelaunchOnWorkerFailure, "relaunch_on_worker_failure", cfg.RelaunchOnWorkerFailure, "relaunches of a worker that exited with an error")
	fs.DurationVar(&cfg.ProgressInterval, "log_interval", cfg.ProgressInterval, "how often progress is shown (0: never)")
	backend := fs.String("backend", "local", "where the job runs: local (child processes)")
	verbose := fs.Bool("verbose", false, "debug logging")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *backend != "local" {
		return usageError{fmt.Errorf("--backend=%s: not supported by this build (supported: local)", *backend)}
	}
	tempOutput := cfg.Output == ""
	if tempOutput {
		cfg.Output = "(temporary)" // filled in below, once the flags are known good
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	for _, p := range []struct{ flag, path string }{{"validation_data", cfg.ValidationData}, {"prediction_data", cfg.PredictionData}} {
		if err := checkDataFile(p.flag, p.path); err != nil {
			return err
		}
	}
	if _, err := os.Stat(cfg.CheckpointDirForInit); err != nil {
		return fmt.Errorf("--checkpoint_dir_for_init: %w", err)
	}
	if cfg.PredictionOutputs != "" {
		dir := filepath.Dir(cfg.PredictionOutputs)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--prediction_outputs: directory %s does not exist: create it first", dir)
		}
	}
	if tempOutput {
		dir, err := os.MkdirTemp("", "elasticdl-"+cfg.Mode+"-")
		if err != nil {
			return fmt.Errorf("--output: %w", err)
		}
		cfg.Output = dir
	} else if err := os.MkdirAll(cfg.Output, 0o755); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	logDir := filepath.Join(cfg.Output, "logs")
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := newLogger(env.Stderr, level)
	be, err := local.New(local.Config{LogDir: logDir, Logger: logger})
	if err != nil {
		return fmt.Errorf("local backend: %w", err)
	}
	m, err := master.New(*cfg, master.Deps{Backend: be, Registry: env.Registry, Logger: logger})
	if err != nil {
		be.Close(context.Background())
		if tempOutput {
			os.RemoveAll(cfg.Output) // nothing ran: leave nothing behind
		}
		return err
	}
	summary, runErr := m.Run(ctx)
	if summary != nil {
		printSummary(env, summary, cfg.Output, logDir)
	}
	return runErr
}
