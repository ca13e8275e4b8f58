package master

import (
	"errors"
	"fmt"
	"time"

	"elasticdl/internal/ps"
)

// Config is everything the master of one job needs to know.
type Config struct {
	JobName        string
	ModelDef       string
	TrainingData   string
	ValidationData string // optional: evaluated at the end of training

	MinibatchSize         int
	NumMinibatchesPerTask int
	NumEpochs             int
	NumWorkers            int
	NumPS                 int
	// Optimizer overrides the model's default optimizer spec when set.
	Optimizer string
	Seed      int64

	MaxTaskAttempts         int
	TaskTimeout             time.Duration
	HeartbeatTimeout        time.Duration
	RelaunchOnWorkerFailure int
	MaxPSRelaunches         int

	// CheckpointDir, CheckpointSteps, KeepCheckpointMax and
	// CheckpointDirForInit are passed to every PS (see ps.Config).
	CheckpointDir        string
	CheckpointSteps      int64
	KeepCheckpointMax    int
	CheckpointDirForInit string

	// Output receives the trained model and job_summary.json.
	Output string
	// ListenAddr is where the master's gRPC service listens.
	ListenAddr string
	// AdvertiseAddr is how workers reach the master; defaults to the
	// listener's address.
	AdvertiseAddr string
	// ProgressInterval is how often progress is logged (0 = never).
	ProgressInterval time.Duration
	// WorkerArgs are extra arguments passed to every worker.
	WorkerArgs []string
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
		HeartbeatTimeout:        time.Minute,
		RelaunchOnWorkerFailure: 1,
		MaxPSRelaunches:         10,
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
	if c.ModelDef == "" {
		bad("model_def", "required (see `elasticdl zoo`)")
	}
	if c.TrainingData == "" {
		bad("training_data", "required")
	}
	if c.JobName == "" {
		bad("job_name", "must not be empty")
	}
	positive := []struct {
		flag string
		v    int
	}{
		{"minibatch_size", c.MinibatchSize},
		{"num_minibatches_per_task", c.NumMinibatchesPerTask},
		{"num_epochs", c.NumEpochs},
		{"num_workers", c.NumWorkers},
		{"num_ps_pods", c.NumPS},
		{"max_task_attempts", c.MaxTaskAttempts},
	}
	for _, p := range positive {
		if p.v < 1 {
			bad(p.flag, "must be at least 1, got %d", p.v)
		}
	}
	if c.RelaunchOnWorkerFailure < 0 {
		bad("relaunch_on_worker_failure", "must not be negative, got %d", c.RelaunchOnWorkerFailure)
	}
	if c.TaskTimeout < 0 {
		bad("task_timeout", "must not be negative, got %s", c.TaskTimeout)
	}
	if c.HeartbeatTimeout <= 0 {
		bad("worker_heartbeat_timeout", "must be positive, got %s", c.HeartbeatTimeout)
	}
	if err := ps.CheckCheckpointFlags(c.CheckpointDir, c.CheckpointSteps, c.KeepCheckpointMax); err != nil {
		errs = append(errs, err)
	}
	if c.Output == "" {
		bad("output", "required: where the model and job_summary.json go")
	}
	return errors.Join(errs...)
}

// RecordsPerTask is the size of one training task.
func (c *Config) RecordsPerTask() int64 {
	return int64(c.MinibatchSize) * int64(c.NumMinibatchesPerTask)
}
