package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"

	flag "github.com/spf13/pflag"

	"elasticdl/internal/master"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/roleflags"
)

// fashionMNISTDir is where Debian's dataset-fashion-mnist puts the data.
const fashionMNISTDir = "/usr/share/datasets/fashion-mnist"

func runTrain(ctx context.Context, env Env, args []string) error {
	cfg := master.DefaultConfig()
	fs := newFlagSet(env, "train")
	var opts jobOptions
	addTrainFlags(fs, &cfg, &opts)
	if err := parse(fs, args); err != nil {
		return err
	}
	strategyDefaults(fs, &cfg)
	if err := opts.check(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	if opts.backend == backendK8s {
		return submitK8s(ctx, env, fs, cfg, opts)
	}
	if err := checkWorkerCommand(cfg.WorkerCommand); err != nil {
		return err
	}
	for _, p := range []struct{ flag, path string }{{"training_data", cfg.TrainingData}, {"validation_data", cfg.ValidationData}} {
		if err := checkDataFile(p.flag, p.path); err != nil {
			return err
		}
	}
	if err := prepareOutput(ctx, env, cfg, &opts); err != nil {
		return err
	}
	return runJob(ctx, env, fs, cfg, opts, nil)
}

// addTrainFlags registers the flags of a training job.
func addTrainFlags(fs *flag.FlagSet, cfg *master.Config, opts *jobOptions) {
	fs.StringVar(&cfg.ModelDef, "model_def", "", "model to train: one of `elasticdl zoo` (e.g. fashion_mnist.cnn), or a model file path/model.yaml (docs/models.md)")
	fs.StringVar(&cfg.ModelParams, "model_params", "", "the model's parameters, semicolon-separated key=value (e.g. 'fields=62; dense=23'; `elasticdl zoo` lists what each model takes)")
	fs.StringVar(&cfg.TrainingData, "training_data", "", "training data: an IDX images file (.gz or plain), a CSV file, csv://PATH?schema=..., a Parquet file or directory (parquet://PATH?schema=...), synthetic-ctr://?... or a database table, sqlite://, postgres:// or mysql://...?table=T&label=C (docs/training.md, Data)")
	fs.StringVar(&cfg.ValidationData, "validation_data", "", "data to evaluate the trained model on (optional)")
	fs.Int64Var(&cfg.EvaluationSteps, "evaluation_steps", 0, "evaluate on --validation_data each time the model version crosses a multiple of this (0: only at the end)")
	fs.StringVar(&cfg.Output, "output", "", "directory for the trained model, job_summary.json and logs")
	fs.StringVar(&cfg.ExportFormat, "export_format", "", "also write the trained model as OUTPUT/model.onnx: onnx (opset 17; see elasticdl export)")
	fs.IntVar(&cfg.NumEpochs, "num_epochs", cfg.NumEpochs, "passes over the training data")
	fs.StringVar(&cfg.Optimizer, "optimizer", "", "optimizer spec overriding the model's, e.g. 'sgd:learning_rate=0.1' or 'adam:learning_rate=0.001,amsgrad=true'")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed of the initial model")
	fs.Float64Var(&cfg.ModelledSecondsPerRecord, "modelled_seconds_per_record", 0,
		"experiments: workers model their compute — a training record takes this long on one CPU (the worker's requested CPUs on Kubernetes, 1 locally), waited instead of computed; the model does not train (0: compute for real)")
	fs.DurationVar(&cfg.PublishInterval, "progress_publish_interval", 0,
		"least time between two publishes of the job's progress for the autoscaler (elasticdl.io/progress on Kubernetes; 0: 30s); a worker count's throughput is measured once it held this long (10s at most): shorter for short jobs")
	fs.Float64Var(&cfg.ModelledPSSecondsPerPush, "modelled_ps_seconds_per_push", 0,
		"experiments: each PS spends this long on every push, one push at a time, so that a job's throughput stops growing with its workers (0: none)")
	fs.StringVar(&cfg.CheckpointDir, "checkpoint_dir", "", "directory of the PS checkpoints: a relaunched PS (or a new job) restores the newest complete one")
	fs.Int64Var(&cfg.CheckpointSteps, "checkpoint_steps", 0, "each PS checkpoints every this many versions (0: never)")
	fs.IntVar(&cfg.KeepCheckpointMax, "keep_checkpoint_max", 0, "complete checkpoint versions to keep (0: all)")
	fs.StringVar(&cfg.CheckpointDirForInit, "checkpoint_dir_for_init", "", "checkpoint directory (e.g. a previous job's OUTPUT/model) to start from when --checkpoint_dir has none")
	fs.BoolVar(&cfg.UseAsync, "use_async", cfg.UseAsync, "asynchronous SGD; false: sync SGD, one averaged update per --grads_to_wait gradient pushes")
	fs.IntVar(&cfg.GradsToWait, "grads_to_wait", cfg.GradsToWait, "sync SGD: gradient pushes averaged into one update (capped by the live workers)")
	fs.Int64Var(&cfg.SyncVersionTolerance, "sync_version_tolerance", cfg.SyncVersionTolerance, "sync SGD: a gradient computed more than this many versions ago is rejected and its minibatch redone")
	fs.BoolVar(&cfg.LRStalenessModulation, "lr_staleness_modulation", cfg.LRStalenessModulation, "async SGD: scale the learning rate of a gradient by 1/staleness")
	fs.StringVar(&cfg.TransportDType, "transport_dtype", cfg.TransportDType, "what dense gradients and parameters travel as between workers and PS: float32, or bfloat16 (half the bytes, each value rounded to 8 significant bits; the PS keep and update float32)")
	fs.StringVar(&cfg.PSTransport, "ps_transport", cfg.PSTransport, "what carries the workers' pushes and pulls to the PS: direct (plain TCP connections on each PS's port: the same messages with a fraction of gRPC's copies) or grpc (elasticdl workers; the Python SDK always uses gRPC)")
	fs.BoolVar(&cfg.OverlapPush, "overlap_push", cfg.OverlapPush, "async SGD: each worker computes its next minibatch while the last one's gradients are pushed; faster when communication is the bottleneck, but each gradient is computed on parameters one of the worker's updates older, which costs accuracy (docs/training.md)")
	fs.StringVar(&cfg.DistributionStrategy, "distribution_strategy", cfg.DistributionStrategy,
		"ParameterServerStrategy (parameter servers; sparse models) or AllreduceStrategy (no PS: workers average gradients in a ring; dense models)")
	fs.Float64Var(&cfg.SlowWorkerFraction, "slow_worker_fraction", cfg.SlowWorkerFraction,
		"a worker whose records/s over its recent tasks stays below this fraction of the other workers' median is marked slow (needs 3 workers; unmarked above 1.4× the fraction; 0: never; docs/faults.md)")
	fs.BoolVar(&cfg.BackupTasks, "backup_tasks", cfg.BackupTasks,
		"PS training: once every task is handed out, an idle worker gets a copy of a task held by a slow worker or running 3× the typical task time; the first report wins, the PS apply each minibatch once (docs/faults.md)")
	fs.BoolVar(&cfg.ParkSlowWorkers, "park_slow_workers", cfg.ParkSlowWorkers,
		"AllReduce: a worker marked slow (--slow_worker_fraction) leaves the ring and is stopped, its tasks go back; a new worker takes its slot on probation after 30 s, doubling each time the slot is parked again (up to 8 min); never below --min_workers or more than a minority of the workers (docs/faults.md)")
	fs.BoolVar(&cfg.ParkTrials, "park_trials", cfg.ParkTrials,
		"AllReduce, with --park_slow_workers: a worker whose part of the steps stays below 0.7 of the others' (not slow enough to be marked) is parked on trial; it stays parked only if the ring then trains at least as fast without it, else its slot gets a worker again at once and is tried again after 30 s, doubling (docs/faults.md)")
	fs.BoolVar(&cfg.ReplaceSlowWorkers, "replace_slow_workers", cfg.ReplaceSlowWorkers,
		"a worker marked slow (--slow_worker_fraction) for --replace_slow_after is stopped, its task goes back, and a new worker takes its slot on another node (Kubernetes: a required node anti-affinity to the nodes the slot was slow on; relaunched anywhere if it stays pending as long); one at a time, only while the slow workers are a minority, each slot after a backoff of 30 s doubling; AllReduce: the worker on probation in a parked slot avoids its node (docs/faults.md)")
	fs.DurationVar(&cfg.ReplaceSlowAfter, "replace_slow_after", cfg.ReplaceSlowAfter,
		"with --replace_slow_workers: how long a worker stays marked slow before it is replaced, and how long its replacement may stay pending on the other nodes")
	addJobFlags(fs, cfg, opts, "records per gradient step")
}

// strategyDefaults: an AllReduce job has no parameter servers unless the
// user asked for some (which Validate then refuses, saying why).
func strategyDefaults(fs *flag.FlagSet, cfg *master.Config) {
	if cfg.DistributionStrategy != roleflags.StrategyAllReduce {
		return
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "num_ps_pods" })
	if !set {
		cfg.NumPS = 0
	}
}

// checkWorkerCommand fails a local job whose --worker_command names a
// program that is not there, before anything starts.
func checkWorkerCommand(command string) error {
	if command == "" {
		return nil
	}
	argv, err := roleflags.SplitCommand(command)
	if err != nil {
		return usageError{fmt.Errorf("--worker_command: %w", err)}
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return usageError{fmt.Errorf("--worker_command: %w", err)}
	}
	return nil
}

// checkDataFile turns a missing file into an error that says how to get it.
func checkDataFile(flag, path string) error {
	if path == "" || strings.Contains(path, "://") { // URIs (synthetic-ctr://, csv://) are checked by data.Open
		return nil
	}
	_, err := os.Stat(path)
	if err == nil {
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) && strings.HasPrefix(path, fashionMNISTDir+"/") {
		return fmt.Errorf("--%s: %s does not exist; Fashion-MNIST comes from Debian's dataset-fashion-mnist package: run `sudo apt-get update && sudo apt-get install dataset-fashion-mnist`", flag, path)
	}
	return fmt.Errorf("--%s: %w", flag, err)
}

func printSummary(env Env, s *master.Summary, output, logDir string) {
	w := env.Stdout
	fmt.Fprintf(w, "\njob %s %s in %.1fs", s.Job, s.Status, s.DurationSeconds)
	if s.Error != "" {
		fmt.Fprintf(w, ": %s", s.Error)
	}
	fmt.Fprintln(w)
	for _, e := range s.Epochs {
		fmt.Fprintf(w, "  epoch %d: %d/%d records trained, %d twice, %d missed\n", e.Epoch, e.RecordsTrained, e.Records, e.RecordsTrainedTwice, e.RecordsMissed)
	}
	if s.Mode != master.ModeTrain && s.ModelVersion >= 0 && s.Status == "succeeded" {
		fmt.Fprintf(w, "  model version %d\n", s.ModelVersion)
	}
	fmt.Fprintf(w, "  workers: %d launched, %d lost (%d preempted), %d relaunched, at most %d running; ps: %d launched, %d lost\n",
		s.Workers.Launched, s.Workers.Lost, s.Workers.Preempted, s.Workers.Relaunched, s.Workers.MaxRunning, s.PS.Launched, s.PS.Lost)
	if s.MasterRestarts > 0 {
		fmt.Fprintf(w, "  master: taken over %d times after it died (failover)\n", s.MasterRestarts)
	}
	if s.CorruptRecords > 0 {
		fmt.Fprintf(w, "  corrupt records skipped: %d (first: %s)\n", s.CorruptRecords, s.FirstCorruptRecord)
	}
	for _, e := range s.Evaluations {
		if !e.Final {
			fmt.Fprintf(w, "  evaluation at version %d (versions used %d-%d): accuracy %.4f%s, loss %.4f on %d records\n",
				e.Version, e.MinVersionUsed, e.MaxVersionUsed, e.Accuracy, aucText(e.AUC), e.Loss, e.Records)
		}
	}
	if s.Eval != nil {
		fmt.Fprintf(w, "  test accuracy %.4f%s, loss %.4f on %d records (model version %d)\n", s.Eval.Accuracy, aucText(s.Eval.AUC), s.Eval.Loss, s.Eval.Records, s.Eval.ModelVersion)
	}
	if s.Predictions != nil {
		fmt.Fprintf(w, "  predictions: %s (%d rows, %d without a prediction: corrupt records)\n", s.Predictions.Path, s.Predictions.Records, s.Predictions.CorruptRecords)
	}
	if s.ModelPath != "" {
		fmt.Fprintf(w, "  model: %s (version %d)\n", s.ModelPath, s.ModelVersion)
	}
	fmt.Fprintf(w, "  summary: %s\n  logs: %s\n", checkpoint.Join(output, "job_summary.json"), logDir)
}

// aucText is ", AUC x" when the model has one.
func aucText(auc *float64) string {
	if auc == nil {
		return ""
	}
	return fmt.Sprintf(", AUC %.4f", *auc)
}
