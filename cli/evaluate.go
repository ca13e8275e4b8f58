package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	flag "github.com/spf13/pflag"

	"elasticdl/internal/master"
	"elasticdl/internal/storage"
)

// runEvaluate evaluates a saved model (a checkpoint directory or a training
// job's OUTPUT/model) on --validation_data: a job whose PS restore the model
// and whose workers get only evaluation tasks.
func runEvaluate(ctx context.Context, env Env, args []string) error {
	cfg := master.DefaultConfig()
	fs := newFlagSet(env, "evaluate")
	var opts jobOptions
	addEvaluateFlags(fs, &cfg, &opts)
	return runModelJob(ctx, env, fs, &cfg, &opts, args)
}

// runPredict writes the predictions of a saved model for every record of
// --prediction_data to --prediction_outputs, in input order.
func runPredict(ctx context.Context, env Env, args []string) error {
	cfg := master.DefaultConfig()
	fs := newFlagSet(env, "predict")
	var opts jobOptions
	addPredictFlags(fs, &cfg, &opts)
	return runModelJob(ctx, env, fs, &cfg, &opts, args)
}

func addEvaluateFlags(fs *flag.FlagSet, cfg *master.Config, opts *jobOptions) {
	cfg.Mode = master.ModeEvaluate
	cfg.JobName = "elasticdl-evaluate"
	fs.StringVar(&cfg.ValidationData, "validation_data", "", "data to evaluate the model on: an IDX images file or a CSV file")
	addModelJobFlags(fs, cfg, opts)
}

func addPredictFlags(fs *flag.FlagSet, cfg *master.Config, opts *jobOptions) {
	cfg.Mode = master.ModePredict
	cfg.JobName = "elasticdl-predict"
	fs.StringVar(&cfg.PredictionData, "prediction_data", "", "records to predict: an IDX images file or a CSV file (labels are read but not used)")
	fs.StringVar(&cfg.PredictionOutputs, "prediction_outputs", "", "CSV file to write: a header, then one row per input record in input order: index,class,p0,...,pK-1")
	addModelJobFlags(fs, cfg, opts)
}

// addModelJobFlags registers what evaluate and predict share: a job on a
// saved model, with the same master, workers and PS as training.
func addModelJobFlags(fs *flag.FlagSet, cfg *master.Config, opts *jobOptions) {
	fs.StringVar(&cfg.ModelDef, "model_def", "", "the model: one of `elasticdl zoo` (e.g. fashion_mnist.cnn), or a model file path/model.yaml")
	fs.StringVar(&cfg.ModelParams, "model_params", "", "the model's parameters, as the training job had them: semicolon-separated key=value (e.g. 'fields=62; dense=23'; `elasticdl zoo` lists what each model takes)")
	fs.StringVar(&cfg.CheckpointDirForInit, "checkpoint_dir_for_init", "", "the model to use: a checkpoint directory (--checkpoint_dir of a training job) or a training job's OUTPUT/model")
	fs.StringVar(&cfg.Output, "output", "", "directory for job_summary.json and logs (default: a new temporary directory)")
	addJobFlags(fs, cfg, opts, "records per forward pass")
}

// runModelJob parses and runs an evaluate or predict job.
func runModelJob(ctx context.Context, env Env, fs *flag.FlagSet, cfg *master.Config, opts *jobOptions, args []string) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := opts.check(); err != nil {
		return err
	}
	tempOutput := cfg.Output == ""
	if tempOutput {
		cfg.Output = "(temporary)" // filled in below, once the flags are known good
		if opts.backend == backendK8s {
			cfg.Output = "/tmp/elasticdl-" + cfg.JobName // inside the master pod
		}
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	if opts.backend == backendK8s {
		return submitK8s(ctx, env, fs, *cfg, *opts)
	}
	if err := checkWorkerCommand(cfg.WorkerCommand); err != nil {
		return err
	}
	for _, p := range []struct{ flag, path string }{{"validation_data", cfg.ValidationData}, {"prediction_data", cfg.PredictionData}} {
		if err := checkDataFile(p.flag, p.path); err != nil {
			return err
		}
	}
	// On object storage the master's check reads the checkpoint itself.
	if !storage.IsRemote(cfg.CheckpointDirForInit) {
		if _, err := os.Stat(cfg.CheckpointDirForInit); err != nil {
			return fmt.Errorf("--checkpoint_dir_for_init: %w", err)
		}
	}
	if storage.IsRemote(cfg.Output) {
		return usageError{errors.New("--output: evaluate and predict keep their summary and logs on local disk (--prediction_outputs may be s3://...)")}
	}
	if cfg.PredictionOutputs != "" && !storage.IsRemote(cfg.PredictionOutputs) {
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
	return runJob(ctx, env, fs, *cfg, *opts, func() {
		if tempOutput {
			os.RemoveAll(cfg.Output) // nothing ran: leave nothing behind
		}
	})
}
