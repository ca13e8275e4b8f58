package master

import (
	"errors"
	"fmt"
	"time"

	"elasticdl/internal/master/job"
	"elasticdl/internal/roleflags"
)

// Job modes: what a job does with its model.
const (
	// ModeTrain trains on TrainingData (and evaluates on ValidationData).
	ModeTrain = job.ModeTrain
	// ModeEvaluate evaluates the model restored from CheckpointDirForInit
	// on ValidationData: one evaluation pass, no training.
	ModeEvaluate = job.ModeEvaluate
	// ModePredict writes the predictions of the model restored from
	// CheckpointDirForInit for every record of PredictionData to
	// PredictionOutputs (CSV), in input order.
	ModePredict = job.ModePredict
)

// Config is everything the master of one job needs to know.
type Config struct {
	// Mode is ModeTrain ("" means train), ModeEvaluate or ModePredict.
	Mode     string
	JobName  string
	ModelDef string
	// ModelParams (--model_params) are the model's parameters (model.Params
	// syntax); every worker gets them too.
	ModelParams string
	// WorkerCommand (--worker_command) is a user's own worker program, run
	// instead of `elasticdl worker` (split as SplitCommand says): a PyTorch
	// script using the Python SDK, say. It defines the model, so ModelDef
	// is empty; the job's Optimizer is required (the PS apply the updates)
	// and NumClasses too for a predict job (the columns of its output).
	WorkerCommand  string
	NumClasses     int
	TrainingData   string
	ValidationData string // optional: evaluated at the end of training
	// EvaluationSteps > 0 queues an evaluation pass over ValidationData
	// each time the model version reported by training tasks crosses a
	// multiple of it (0: evaluate only at the end).
	EvaluationSteps int64
	// PredictionData and PredictionOutputs (a CSV file path) are for
	// ModePredict.
	PredictionData    string
	PredictionOutputs string

	MinibatchSize         int
	NumMinibatchesPerTask int
	NumEpochs             int
	NumWorkers            int
	// MinWorkers (0: 1) is the fewest workers the job is scaled down to,
	// and how many must run before training starts; NumWorkers the most.
	MinWorkers int
	NumPS      int
	// Optimizer overrides the model's default optimizer spec when set.
	Optimizer string
	Seed      int64
	// ModelledSecondsPerRecord > 0 makes the workers model their compute
	// (experiments): a training record takes this long on one CPU, waited
	// instead of computed, on the worker's requested CPUs (1 locally).
	ModelledSecondsPerRecord float64
	// ModelledPSSecondsPerPush > 0 makes each PS spend this long on every
	// push, one push at a time (experiments): a job's throughput then
	// stops growing with its workers, as a real PS-bound job's does.
	ModelledPSSecondsPerPush float64

	MaxTaskAttempts int
	TaskTimeout     time.Duration
	// SlowWorkerFraction: a worker whose records/s stays below this
	// fraction of the other workers' median is marked slow (0: never);
	// BackupTasks: PS training, an idle worker gets a copy of a straggling
	// task once nothing is queued; ParkSlowWorkers: AllReduce, a worker
	// marked slow leaves the ring for a while (docs/faults.md);
	// ParkTrials: one that lags is parked on trial (on by default: the
	// ring decides by its own rate without it, and a lost trial is undone).
	SlowWorkerFraction float64
	BackupTasks        bool
	ParkSlowWorkers    bool
	ParkTrials         bool
	// ReplaceSlowWorkers: a worker marked slow for ReplaceSlowAfter is
	// stopped and its slot relaunched on another node (docs/faults.md).
	ReplaceSlowWorkers bool
	ReplaceSlowAfter   time.Duration
	HeartbeatTimeout   time.Duration
	// WorkerMasterTimeout is the workers' --master_timeout: how long one
	// retries a master it cannot reach before it exits with the cause.
	WorkerMasterTimeout     time.Duration
	RelaunchOnWorkerFailure int
	MaxPSRelaunches         int

	// CheckpointDir, CheckpointSteps, KeepCheckpointMax and
	// CheckpointDirForInit are passed to every PS (see ps.Config).
	CheckpointDir        string
	CheckpointSteps      int64
	KeepCheckpointMax    int
	CheckpointDirForInit string
	// ExportFormat, when set ("onnx"), makes a training job also write its
	// final model as OUTPUT/model.onnx (see package export).
	ExportFormat string

	// UseAsync false selects sync SGD on every PS: the average of
	// GradsToWait pushes (capped by the live workers, which the master
	// tells the PS) is applied as one update; a push more than
	// SyncVersionTolerance versions stale is rejected and redone by its
	// worker. LRStalenessModulation (async only) scales the learning rate
	// of a push by 1/max(1, staleness). See ps.Config.
	UseAsync              bool
	GradsToWait           int
	SyncVersionTolerance  int64
	LRStalenessModulation bool
	// TransportDType is what dense gradients and parameters travel as
	// between workers and PS (roleflags.DTypeFloat32 or DTypeBFloat16).
	TransportDType string
	// PSTransport is what carries the workers' pushes and pulls
	// (roleflags.PSTransportDirect or PSTransportGRPC).
	PSTransport string
	// OverlapPush (async SGD) has each worker compute its next minibatch
	// while the last one's gradients are pushed (roleflags.Worker); off by
	// default, since the extra staleness costs accuracy.
	OverlapPush bool

	// DistributionStrategy is roleflags.StrategyPS (the default: parameter
	// servers) or roleflags.StrategyAllReduce (no PS: workers average
	// their gradients in a ring whose rendezvous the master keeps).
	DistributionStrategy string
	// CollectiveAddr is what AllReduce workers listen on for their ring
	// peers (port 0: any); the host is what peers dial.
	CollectiveAddr string

	// Output receives the trained model and job_summary.json.
	Output string
	// KeepSnapshot keeps the snapshots of the job's database tables when
	// it ends (for inspection; the master logs their names) instead of
	// dropping them. `elasticdl sql` sweeps them when old.
	KeepSnapshot bool
	// RunID names this run of the job for failover: a master resumes only
	// the state persisted under the same RunID (Deps.Store), so that a new
	// job writing to the same place starts afresh. The PS get it too (their
	// checkpoints' record of applied minibatches is the run's). New draws
	// one when empty.
	RunID string
	// ListenAddr is where the master's gRPC service listens.
	ListenAddr string
	// AdvertiseAddr is how workers reach the master; defaults to the
	// listener's address.
	AdvertiseAddr string
	// ProgressInterval is how often progress is logged (0 = never).
	ProgressInterval time.Duration
	// PublishInterval is the least time between two publishes of the
	// job's progress for the autoscaler (0: progress.MinInterval); short
	// jobs (experiments) need it shorter to be sized by what they measure.
	PublishInterval time.Duration
	// WorkerArgs are extra arguments passed to every worker.
	WorkerArgs []string
	// MetricsPort > 0 makes PS shard i serve Prometheus metrics on port
	// MetricsPort+1+i (the master's own, on MetricsPort, are served by
	// its caller: see Master.RegisterMetrics).
	MetricsPort int
	// TensorBoardLogDir, when set, is where the master writes the job's
	// scalars as TensorBoard event files (tensorboard.go); on Kubernetes,
	// a directory of the master pod (a volume, to outlive it).
	TensorBoardLogDir string
	// RequestedCPU is what the job's pods request, in CPU cores (0:
	// unknown, as for local processes): the denominator of goodput.
	RequestedCPU RequestedCPU
}

// RequestedCPU is the CPU cores each kind of the job's pods requests.
type RequestedCPU struct {
	Master, Worker, PS float64
}

// DefaultConfig holds ElasticDL's defaults where it had one.
func DefaultConfig() Config {
	return Config{
		JobName:                 "elasticdl-job",
		MinibatchSize:           64,
		NumMinibatchesPerTask:   8,
		NumEpochs:               1,
		NumWorkers:              2,
		NumPS:                   1,
		MaxTaskAttempts:         3,
		TaskTimeout:             5 * time.Minute,
		SlowWorkerFraction:      0.5,
		BackupTasks:             true,
		ParkSlowWorkers:         true,
		ParkTrials:              true,
		ReplaceSlowAfter:        time.Minute,
		HeartbeatTimeout:        time.Minute,
		WorkerMasterTimeout:     roleflags.DefaultWorkerMasterTimeout,
		RelaunchOnWorkerFailure: 1,
		MaxPSRelaunches:         10,
		UseAsync:                true,
		TransportDType:          roleflags.DTypeFloat32,
		PSTransport:             roleflags.PSTransportDirect,
		GradsToWait:             1,
		DistributionStrategy:    roleflags.StrategyPS,
		CollectiveAddr:          "127.0.0.1:0",
		ListenAddr:              "127.0.0.1:0",
		ProgressInterval:        5 * time.Second,
	}
}

// Validate reports every bad value at once, each with its flag name.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	switch {
	case c.WorkerCommand != "":
		c.validateWorkerCommand(bad)
	case c.ModelDef == "":
		bad("model_def", "required (see `elasticdl zoo`), or --worker_command for a worker program of your own")
	case c.NumClasses != 0:
		bad("num_classes", "is for --worker_command jobs: model %s says its own", c.ModelDef)
	}
	c.validateMode(bad)
	c.validateExport(bad)
	if err := roleflags.CheckStrategy(c.DistributionStrategy); err != nil {
		errs = append(errs, err)
	}
	if c.allReduce() {
		c.validateAllReduce(bad)
	}
	if c.JobName == "" {
		bad("job_name", "must not be empty")
	}
	c.validateSizes(bad)
	if err := roleflags.CheckCheckpointFlags(c.CheckpointDir, c.CheckpointSteps, c.KeepCheckpointMax); err != nil {
		errs = append(errs, err)
	}
	if !c.UseAsync {
		if err := roleflags.CheckSyncFlags(c.GradsToWait, c.SyncVersionTolerance); err != nil {
			errs = append(errs, err)
		}
		if c.LRStalenessModulation {
			bad("lr_staleness_modulation", "applies to async SGD only (--use_async=true)")
		}
	}
	if err := roleflags.CheckPSTransport(c.PSTransport); err != nil {
		bad("ps_transport", "%v", err)
	}
	if err := roleflags.CheckTransportDType(c.TransportDType); err != nil {
		errs = append(errs, err)
	}
	if c.MetricsPort < 0 || c.MetricsPort+1+c.NumPS > 65535 {
		bad("metrics_port", "%d leaves no room for the PS metrics ports (metrics_port+1+i)", c.MetricsPort)
	}
	if c.Output == "" {
		bad("output", "required: where the model and job_summary.json go")
	}
	return errors.Join(errs...)
}

// validateMode checks the data and model flags each mode needs.
func (c *Config) validateMode(bad func(flag, format string, args ...any)) {
	switch c.Mode {
	case "", ModeTrain:
		if c.TrainingData == "" {
			bad("training_data", "required")
		}
		if c.EvaluationSteps < 0 {
			bad("evaluation_steps", "must not be negative, got %d", c.EvaluationSteps)
		}
		if c.EvaluationSteps > 0 && c.ValidationData == "" {
			bad("evaluation_steps", "needs --validation_data")
		}
	case ModeEvaluate, ModePredict:
		if c.CheckpointDirForInit == "" {
			bad("checkpoint_dir_for_init", "required: the saved model to %s with (a checkpoint directory, or a training job's OUTPUT/model)", c.Mode)
		}
		if c.Mode == ModeEvaluate && c.ValidationData == "" {
			bad("validation_data", "required: the data to evaluate the model on")
		}
		if c.Mode == ModePredict {
			if c.PredictionData == "" {
				bad("prediction_data", "required: the records to predict")
			}
			if c.PredictionOutputs == "" {
				bad("prediction_outputs", "required: the CSV file to write the predictions to")
			}
		}
	default:
		bad("mode", "unknown job mode %q", c.Mode)
	}
}

// validateSizes checks the job's sizes, counts and timeouts.
func (c *Config) validateSizes(bad func(flag, format string, args ...any)) {
	positive := []struct {
		flag string
		v    int
	}{
		{"minibatch_size", c.MinibatchSize},
		{"num_minibatches_per_task", c.NumMinibatchesPerTask},
		{"num_workers", c.NumWorkers},
		{"max_task_attempts", c.MaxTaskAttempts},
	}
	if !c.allReduce() {
		positive = append(positive, struct {
			flag string
			v    int
		}{"num_ps_pods", c.NumPS})
	}
	if c.training() && c.NumEpochs < 1 {
		bad("num_epochs", "must be at least 1, got %d", c.NumEpochs)
	}
	for _, p := range positive {
		if p.v < 1 {
			bad(p.flag, "must be at least 1, got %d", p.v)
		}
	}
	if c.MinWorkers < 0 || c.MinWorkers > c.NumWorkers {
		bad("min_workers", "must be between 0 and --num_workers (%d), got %d", c.NumWorkers, c.MinWorkers)
	}
	if c.RelaunchOnWorkerFailure < 0 {
		bad("relaunch_on_worker_failure", "must not be negative, got %d", c.RelaunchOnWorkerFailure)
	}
	if c.TaskTimeout < 0 {
		bad("task_timeout", "must not be negative, got %s", c.TaskTimeout)
	}
	if !(c.SlowWorkerFraction >= 0 && c.SlowWorkerFraction < 1) {
		bad("slow_worker_fraction", "must be in [0, 1), got %v", c.SlowWorkerFraction)
	}
	if c.ReplaceSlowAfter <= 0 {
		bad("replace_slow_after", "must be positive, got %s", c.ReplaceSlowAfter)
	}
	if c.ReplaceSlowWorkers && c.SlowWorkerFraction == 0 {
		bad("replace_slow_workers", "needs slow workers marked: --slow_worker_fraction is 0")
	}
	if c.HeartbeatTimeout <= 0 {
		bad("worker_heartbeat_timeout", "must be positive, got %s", c.HeartbeatTimeout)
	}
	if c.WorkerMasterTimeout <= 0 {
		bad("worker_master_timeout", "must be positive, got %s", c.WorkerMasterTimeout)
	}
	if roleflags.CheckModelled(c.ModelledSecondsPerRecord) != nil {
		bad("modelled_seconds_per_record", "must be 0 (compute for real) or a positive time, got %v", c.ModelledSecondsPerRecord)
	}
	if c.PublishInterval < 0 {
		bad("progress_publish_interval", "must not be negative, got %s", c.PublishInterval)
	}
	if roleflags.CheckModelled(c.ModelledPSSecondsPerPush) != nil {
		bad("modelled_ps_seconds_per_push", "must be 0 (none) or a positive time, got %v", c.ModelledPSSecondsPerPush)
	}
}

// validateAllReduce rejects what an AllReduce job cannot honour (yet).
func (c *Config) validateAllReduce(bad func(flag, format string, args ...any)) {
	const why = "with --distribution_strategy=AllreduceStrategy"
	if c.NumPS != 0 {
		bad("num_ps_pods", "must be 0 %s: the workers average their gradients among themselves (got %d)", why, c.NumPS)
	}
	if !c.training() {
		bad("distribution_strategy", "AllreduceStrategy trains: evaluate and predict jobs serve the saved model from parameter servers")
	}
	if !c.UseAsync || c.LRStalenessModulation {
		bad("use_async", "sync and async SGD are parameter-server settings; AllreduceStrategy applies one averaged update per step on every worker")
	}
	if c.TransportDType != roleflags.DTypeFloat32 || c.OverlapPush {
		bad("transport_dtype", "--transport_dtype and --overlap_push are parameter-server settings; the ring moves float32")
	}
	if c.PSTransport != roleflags.PSTransportDirect {
		bad("ps_transport", "is a parameter-server setting; the ring has connections of its own")
	}
}

// validateWorkerCommand checks a job whose workers are a user's program.
func (c *Config) validateWorkerCommand(bad func(flag, format string, args ...any)) {
	if _, err := roleflags.SplitCommand(c.WorkerCommand); err != nil {
		bad("worker_command", "%v", err)
	}
	if c.ModelDef != "" {
		bad("model_def", "must be empty with --worker_command: the worker program defines the model (got %q)", c.ModelDef)
	}
	if c.Optimizer == "" && c.training() && !c.allReduce() {
		// With AllReduce the program may pass its own torch optimizer.
		bad("optimizer", "required with --worker_command: the parameter servers apply the updates, e.g. --optimizer='adam:learning_rate=0.001'")
	}
	if c.allReduce() && (c.CheckpointSteps > 0 || c.CheckpointDirForInit != "") {
		bad("checkpoint_steps", "--checkpoint_steps and --checkpoint_dir_for_init are not supported yet for worker programs with %s; "+
			"a lost ring restarts from the initial model", roleflags.StrategyAllReduce)
	}
	if c.TransportDType != roleflags.DTypeFloat32 {
		bad("transport_dtype", "the Python SDK sends and takes float32; %s is for elasticdl workers", c.TransportDType)
	}
	if c.ModelledSecondsPerRecord > 0 {
		bad("modelled_seconds_per_record", "is for elasticdl's own workers, not --worker_command")
	}
	switch {
	case c.NumClasses < 0:
		bad("num_classes", "must not be negative, got %d", c.NumClasses)
	case c.Mode == ModePredict && c.NumClasses == 0:
		bad("num_classes", "required for a predict job with --worker_command: the classes the model predicts (the output's columns)")
	}
}

// external reports whether the workers are a user's program: the master
// knows the model only by what the workers push to the PS.
func (c *Config) external() bool { return c.WorkerCommand != "" }

// allReduce reports whether workers average gradients in a ring (no PS).
func (c *Config) allReduce() bool { return c.DistributionStrategy == roleflags.StrategyAllReduce }

// training reports whether the job trains.
func (c *Config) training() bool { return c.Mode == "" || c.Mode == ModeTrain }

// RecordsPerTask is the size of one training task.
func (c *Config) RecordsPerTask() int64 {
	return int64(c.MinibatchSize) * int64(c.NumMinibatchesPerTask)
}

// dataSources is the data the job's workers read for its main tasks
// (training, evaluation or prediction), which they open as they start.
func (c *Config) dataSources() []string {
	var s string
	switch c.Mode {
	case ModeEvaluate:
		s = c.ValidationData
	case ModePredict:
		s = c.PredictionData
	default:
		s = c.TrainingData
	}
	if s == "" {
		return nil
	}
	return []string{s}
}

// validateExport checks --export_format: onnx, on a training job of one of
// elasticdl's models (a worker program's model is known only to it).
func (c *Config) validateExport(bad func(flag, format string, args ...any)) {
	switch {
	case c.ExportFormat == "":
	case c.ExportFormat != "onnx":
		bad("export_format", "%q: want onnx", c.ExportFormat)
	case c.Mode != "" && c.Mode != ModeTrain:
		bad("export_format", "is for training jobs (elasticdl export writes a saved model)")
	case c.WorkerCommand != "":
		bad("export_format", "applies to elasticdl's own models, not a --worker_command program's")
	}
}
