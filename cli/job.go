package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	flag "github.com/spf13/pflag"

	"elasticdl/internal/master"
	"elasticdl/internal/storage"
)

// jobOptions are the command-line settings of how a job runs, shared by
// train, evaluate and predict, beside what they put in master.Config.
type jobOptions struct {
	backend string
	verbose bool
	// dashboardPort: --dashboard_port (-1 none, 0 the default).
	dashboardPort int
	k8s           k8sOptions
	// tls: the job's connections are mutual TLS from a CA made for it at
	// submission, valid for tlsValidity.
	tls         bool
	tlsValidity time.Duration
	// workDir: --work_dir, a local job's own files (logs, the master's
	// state, targets, the TLS bundle); "" is --output when that is local.
	workDir string
}

// localDir is where a local job keeps its own files: --work_dir, else
// --output (which may be on object storage only with --work_dir).
func (o jobOptions) localDir(cfg master.Config) string {
	if o.workDir != "" {
		return o.workDir
	}
	return cfg.Output
}

// The backends a job can run on.
const (
	backendLocal = "local"
	backendK8s   = "k8s"
)

// addJobFlags registers the flags every job-running command shares.
// minibatchHelp says what a minibatch is for this command.
func addJobFlags(fs *flag.FlagSet, cfg *master.Config, o *jobOptions, minibatchHelp string) {
	fs.StringVar(&cfg.JobName, "job_name", cfg.JobName, "name of the job")
	fs.IntVar(&cfg.NumWorkers, "num_workers", cfg.NumWorkers, "number of workers: the most the job runs (`elasticdl scale` and an autoscaler may ask for fewer)")
	fs.IntVar(&cfg.MinWorkers, "min_workers", cfg.MinWorkers, "the fewest workers the job is scaled down to, and how many must run before training starts (0: 1)")
	fs.IntVar(&cfg.NumPS, "num_ps_pods", cfg.NumPS, "number of parameter servers")
	fs.IntVar(&cfg.MinibatchSize, "minibatch_size", cfg.MinibatchSize, minibatchHelp)
	fs.IntVar(&cfg.NumMinibatchesPerTask, "num_minibatches_per_task", cfg.NumMinibatchesPerTask, "minibatches per task")
	fs.IntVar(&cfg.MaxTaskAttempts, "max_task_attempts", cfg.MaxTaskAttempts, "a task that fails this many times fails the job")
	fs.DurationVar(&cfg.TaskTimeout, "task_timeout", cfg.TaskTimeout, "a task held longer than this goes back to the queue (0: never)")
	fs.DurationVar(&cfg.HeartbeatTimeout, "worker_heartbeat_timeout", cfg.HeartbeatTimeout, "a running worker silent for this long is stopped and replaced")
	fs.DurationVar(&cfg.WorkerMasterTimeout, "worker_master_timeout", cfg.WorkerMasterTimeout, "a worker that cannot reach the master retries this long, then exits saying why; a job none of whose workers ever reached the master fails after max(3, --num_workers) such exits")
	fs.IntVar(&cfg.RelaunchOnWorkerFailure, "relaunch_on_worker_failure", cfg.RelaunchOnWorkerFailure, "relaunches of a worker that exited with an error")
	fs.DurationVar(&cfg.ProgressInterval, "log_interval", cfg.ProgressInterval, "how often progress is shown (0: never)")
	fs.IntVar(&cfg.MetricsPort, "metrics_port", 0, "serve Prometheus metrics (/metrics) on this port: the master's, and PS shard i's on metrics_port+1+i (0: none)")
	fs.BoolVar(&o.tls, "tls", true, "authenticate and encrypt every connection of the job (mutual TLS 1.3, certificates from a CA made for the job; docs/security.md); false: plaintext, and anyone who reaches the job's ports can read and change its model: for debugging only")
	fs.DurationVar(&o.tlsValidity, "tls_validity", 90*24*time.Hour, "how long the job's CA and certificates are valid: longer than the job will run")
	fs.StringVar(&cfg.TensorBoardLogDir, "tensorboard_log_dir", "", "write the job's scalars (loss, evaluation metrics, records/s, running workers and PS) as TensorBoard event files into this directory (`tensorboard --logdir DIR`); with --backend=k8s, a directory of the master pod: mount a volume there (docs/metrics.md)")
	fs.StringVar(&cfg.WorkerCommand, "worker_command", "", "run this program as each worker instead of elasticdl's own, e.g. 'python3 train.py' (a PyTorch script using the Python SDK, python/elasticdl; docs/python.md); it defines the model, so --model_def stays empty and --optimizer is required")
	fs.IntVar(&cfg.NumClasses, "num_classes", 0, "--worker_command predict jobs: the classes the model predicts (the output's columns)")
	fs.IntVar(&o.dashboardPort, "dashboard_port", 0, "serve the job's live dashboard (a web page and its JSON API, docs/dashboard.md) on this port: -1 none; 0 a free port on 127.0.0.1 for a local job, which prints its URL, and 8042 in the master pod with --backend=k8s (reached by port-forward)")
	fs.StringVar(&o.backend, "backend", backendLocal, "where the job runs: local (child processes) or k8s (a master pod that creates worker and PS pods)")
	fs.BoolVar(&cfg.KeepSnapshot, "keep_snapshot", false, "database data: keep the snapshot tables of the job's rows when it ends, for inspection (the master logs their names; elasticdl sql drops them once older than its --snapshot_max_age)")
	fs.BoolVar(&o.verbose, "verbose", false, "debug logging")
	fs.StringVar(&o.workDir, "work_dir", "", "local jobs: the directory of the job's logs and its master's state (default: --output; with --output on object storage, a new temporary directory, printed at start)")
	addK8sFlags(fs, &o.k8s)
}

// check rejects settings this build cannot honour.
func (o jobOptions) check() error {
	if err := checkDashboardPort(o.dashboardPort); err != nil {
		return err
	}
	switch o.backend {
	case backendLocal:
		if o.k8s.gang {
			return usageError{errors.New("--gang: all-or-nothing admission is for --backend=k8s (a local job has no cluster to wait for)")}
		}
		return nil
	case backendK8s:
		return o.k8s.check()
	}
	return usageError{fmt.Errorf("--backend=%s: unknown (local or k8s)", o.backend)}
}

// runJob runs cfg's job on the chosen backend and prints its summary.
// notStarted is called when the job failed before anything was launched.
func runJob(ctx context.Context, env Env, fs *flag.FlagSet, cfg master.Config, o jobOptions, notStarted func()) error {
	return superviseLocal(ctx, env, fs, cfg, o, notStarted)
}

// prepareOutput makes a local job's --output and --work_dir. An --output
// on object storage is checked (the bucket answers, the credentials are
// taken) before anything runs, and the job's own files go to --work_dir
// or a new temporary directory.
func prepareOutput(ctx context.Context, env Env, cfg master.Config, o *jobOptions) error {
	if storage.IsRemote(cfg.Output) {
		s, err := storage.Open(ctx, cfg.Output, os.Getenv)
		if err != nil {
			return usageError{fmt.Errorf("--output: %w", err)}
		}
		if _, err := s.List(ctx, "job_summary.json"); err != nil {
			return fmt.Errorf("--output: %w", err)
		}
		if o.workDir == "" {
			dir, err := os.MkdirTemp("", "elasticdl-"+cfg.JobName+"-")
			if err != nil {
				return fmt.Errorf("--work_dir: %w", err)
			}
			o.workDir = dir
			fmt.Fprintf(env.Stderr, "the job's logs and state (--work_dir): %s\n", dir)
		}
	} else if err := os.MkdirAll(cfg.Output, 0o755); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	if err := os.MkdirAll(o.localDir(cfg), 0o755); err != nil {
		return fmt.Errorf("--work_dir: %w", err)
	}
	return nil
}
