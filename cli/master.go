package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
	"elasticdl/internal/storage"
	"elasticdl/internal/tlsid"
)

// runMaster is the command of a job's master pod: it runs the job with the
// Kubernetes backend, then leaves the summary in a ConfigMap, labels its
// own pod status=Finished|Failed, and exits non-zero if the job failed.
// When its pod is deleted or evicted (SIGTERM) it hands the job over to the
// master pod its Job starts next, and exits with k8s.ExitHandedOver.
func runMaster(ctx context.Context, env Env, args []string) error {
	mode, args := jobTypeArg(args)
	cfg, opts, localOpts, err := parseMasterFlags(env, mode, args)
	if err != nil {
		return err
	}
	if localOpts.agent != "" {
		if err := cfg.Validate(); err != nil {
			return usageError{err}
		}
		return runLocalMaster(ctx, env, cfg, opts, localOpts)
	}
	opts.backend = backendK8s
	if err := opts.check(); err != nil {
		return err
	}
	if cfg.Output == "" && mode != master.ModeTrain {
		cfg.Output = "/tmp/elasticdl-" + cfg.JobName
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	pod := podEnv{name: os.Getenv("POD_NAME"), ip: os.Getenv("POD_IP"), namespace: os.Getenv("POD_NAMESPACE")}
	if pod.name == "" || pod.ip == "" || pod.namespace == "" {
		return usageError{errors.New("POD_NAME, POD_NAMESPACE and POD_IP must be set (the downward API of the master pod that `elasticdl train --backend=k8s` creates)")}
	}
	if !localOpts.supervised {
		// The pod's first process keeps the port and restarts the master
		// in place when it dies (kill -9, OOM, a crash).
		childArgs := append(append([]string{"master", "--job_type=" + mode}, args...), "--supervised", "--listen_fd=3")
		return superviseMaster(ctx, env, childArgs, portAddr("", opts.k8s.masterPort), opts.dashboardAddr())
	}
	return runMasterPod(ctx, env, mode, cfg, opts, localOpts, pod)
}

// masterListeners are the sockets a master pod's first process keeps for
// each master: gRPC and the dashboard (nil: none).
type masterListeners struct{ grpc, dashboard net.Listener }

// podEnv is the master pod as its downward API describes it.
type podEnv struct{ name, ip, namespace string }

// parseMasterFlags parses the flags of a master of a --job_type=mode job.
func parseMasterFlags(env Env, mode string, args []string) (master.Config, jobOptions, localMasterOptions, error) {
	cfg := master.DefaultConfig()
	var opts jobOptions
	var localOpts localMasterOptions
	fs := newFlagSet(env, "master")
	localOpts.register(fs)
	switch mode {
	case master.ModeTrain:
		addTrainFlags(fs, &cfg, &opts)
	case master.ModeEvaluate:
		addEvaluateFlags(fs, &cfg, &opts)
	case master.ModePredict:
		addPredictFlags(fs, &cfg, &opts)
	default:
		return cfg, opts, localOpts, usageError{fmt.Errorf("--job_type=%s: want train, evaluate or predict", mode)}
	}
	if err := parse(fs, args); err != nil {
		return cfg, opts, localOpts, err
	}
	strategyDefaults(fs, &cfg)
	return cfg, opts, localOpts, nil
}

// runMasterPod is the supervised master process of a master pod: it runs
// the job with the state persisted on the API server, and says how it
// ended, on the pod and by its exit.
func runMasterPod(ctx context.Context, env Env, mode string, cfg master.Config, opts jobOptions, localOpts localMasterOptions, pod podEnv) error {
	level := slog.LevelInfo
	if opts.verbose {
		level = slog.LevelDebug
	}
	logger := newLogger(env.Stderr, level)
	// The CA Secret the client made, mounted at --tls_ca_dir: every master
	// pod of the job reads the same one.
	ca, err := loadJobCA(opts, localOpts, cfg.JobName, logger)
	if err != nil {
		return err
	}
	o := opts.k8s
	client, err := k8s.Connect(o.kubeconfig, o.apiTimeout)
	if err != nil {
		return err
	}
	self, err := client.MasterPod(ctx, pod.namespace, pod.name)
	if err != nil {
		return err
	}
	rec := self.NewRecorder("elasticdl-master", logger)
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rec.Close(fctx)
	}()
	cfg.RunID = self.RunID()
	holder := fmt.Sprintf("%s/%d/%d", pod.name, os.Getpid(), time.Now().UnixNano())
	store, err := self.OpenStateStore(ctx, cfg.JobName, holder)
	if err != nil {
		return stateError(err)
	}
	lis, err := localOpts.listener()
	if err != nil {
		return err
	}
	summary, runErr := runMasterJob(ctx, self, pod.ip, cfg, opts, rec, env, logger, store, ca, masterListeners{lis, localOpts.dashboardListener(logger)})
	if errors.Is(runErr, master.ErrHandedOver) {
		rec.Notify(true, "MasterHandedOver", fmt.Sprintf("master pod %s was stopped (deleted, evicted or preempted): its state is saved, and the next master pod resumes the job", pod.name))
		return restartable(runErr)
	}
	if errors.Is(runErr, master.ErrStateLost) {
		// Not the job's end: the next master resumes (or, fenced, another
		// one already has).
		return stateError(runErr)
	}
	reportJobEnd(self, rec, logger, cfg, mode, summary, runErr)
	return runErr
}

// reportJobEnd leaves how the job ended where users look for it: the log,
// the pod's events, and its result (publishResult).
func reportJobEnd(self *k8s.MasterPod, rec *k8s.Recorder, logger *slog.Logger, cfg master.Config, mode string, summary *master.Summary, runErr error) {
	if summary == nil && runErr != nil {
		// Failed before the job started (bad data, forbidden, ...): the
		// summary still says why, where users look for it.
		summary = &master.Summary{Job: cfg.JobName, Mode: mode, Status: "failed", Error: runErr.Error(), ModelDef: cfg.ModelDef, ModelParams: cfg.ModelParams}
	}
	if summary != nil {
		if b, err := json.Marshal(summary); err == nil {
			logger.Info("job summary", "json", string(b))
		}
	} else if runErr != nil {
		rec.Notify(true, "JobFailed", runErr.Error())
	}
	if err := publishResult(self, cfg.JobName, summary, runErr); err != nil {
		logger.Warn("publishing the job result", "err", err)
	}
}

// runMasterJob builds the backend and the master and runs the job.
func runMasterJob(ctx context.Context, self *k8s.MasterPod, podIP string, cfg master.Config, opts jobOptions,
	rec *k8s.Recorder, env Env, logger *slog.Logger, store master.StateStore, ca *tlsid.CA, lis masterListeners) (*master.Summary, error) {
	o := opts.k8s
	workerPods, psPods, workerPriorities, err := jobPodSettings(o, &cfg)
	if err != nil {
		return nil, err
	}
	host, err := masterHost(ctx, self, podIP, cfg.JobName, o)
	if err != nil {
		return nil, err
	}
	k8sAddrs(&cfg, o, host)
	if !storage.IsRemote(cfg.Output) {
		if err := os.MkdirAll(cfg.Output, 0o755); err != nil {
			return nil, fmt.Errorf("--output: %w", err)
		}
	}
	be, err := self.NewBackend(ctx, k8s.Config{
		JobName:        cfg.JobName,
		Worker:         workerPods,
		PS:             psPods,
		WorkerPriority: workerPriorities,
		MasterAddr:     cfg.AdvertiseAddr,
		MetricsPort:    cfg.MetricsPort,
		PSPort:         o.psPort,
		PSHost:         o.psHost,
		GracePeriod:    o.workerGracePeriod,
		SyncTimeout:    o.apiTimeout,
		Logger:         logger,
	})
	if err != nil {
		return nil, err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	deps := master.Deps{Backend: be, Registry: env.Registry, Logger: logger, Notifier: rec, Store: store, Listener: lis.grpc, Dashboard: lis.dashboard,
		HandOver: self.Replaced(), Targets: watchTargets(wctx, self, rec, logger), History: self.HistoryStore(cfg.JobName), CA: ca, Progress: progressStore(self)}
	if o.gang {
		deps.Admit = gangAdmission(self, cfg, workerPods, psPods, logger)
	}
	m, err := master.New(cfg, deps)
	if err == nil && cfg.MetricsPort > 0 {
		var stop func()
		if stop, err = startMasterMetrics(m, portAddr("", cfg.MetricsPort), logger); err == nil {
			defer stop()
		}
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), o.apiTimeout)
		defer cancel()
		be.Close(cctx)
		return nil, err
	}
	return m.Run(ctx)
}

// jobPodSettings are the settings of the job's worker and PS pods, and the
// workers' priority classes; cfg learns the CPU the job's pods request.
func jobPodSettings(o k8sOptions, cfg *master.Config) (worker, ps k8s.PodSettings, workerPriorities []string, err error) {
	if worker, err = o.podSettings("", o.workerRequest, o.workerLimit); err != nil {
		return
	}
	if workerPriorities, err = k8s.WorkerPriorities(o.workerPriority, cfg.NumWorkers, o.highClass, o.lowClass); err != nil {
		return
	}
	if ps, err = o.podSettings(o.psPriority, o.psRequest, o.psLimit); err != nil {
		return
	}
	masterReq, err := k8s.ParseResources(o.masterRequest)
	if err != nil {
		return
	}
	cfg.RequestedCPU = master.RequestedCPU{Master: masterReq.Cpu().AsApproximateFloat64(),
		Worker: worker.Resources.Requests.Cpu().AsApproximateFloat64(), PS: ps.Resources.Requests.Cpu().AsApproximateFloat64()}
	return
}

// masterHost is where the job's pods reach the master: its pod IP, or,
// since master pods come and go when something replaces them, its Service
// (or --master_host).
func masterHost(ctx context.Context, self *k8s.MasterPod, podIP, job string, o k8sOptions) (string, error) {
	if !self.Replaced() {
		return podIP, nil
	}
	host, err := self.EnsureService(ctx, job, o.masterPort)
	if err != nil {
		return "", err
	}
	if o.masterHost != "" {
		host = o.masterHost
	}
	return host, nil
}

// watchTargets passes on the targets users set on the master pod's
// annotations (elasticdl scale, an autoscaler) until ctx ends.
func watchTargets(ctx context.Context, self *k8s.MasterPod, rec *k8s.Recorder, logger *slog.Logger) <-chan master.Target {
	targets := make(chan master.Target, 16)
	go func() {
		err := self.WatchTarget(ctx, map[string]k8s.TargetWatch{
			k8s.AnnotationTargetWorkers: {Set: sendTarget(ctx, targets, "annotation "+k8s.AnnotationTargetWorkers), Bad: func(v string) {
				logger.Warn("ignoring a target that is not a number of workers", "annotation", k8s.AnnotationTargetWorkers, "value", v)
				rec.Notify(true, "TargetInvalid", fmt.Sprintf("annotation %s=%q is not a number of workers: ignored", k8s.AnnotationTargetWorkers, v))
			}},
			k8s.AnnotationTargetPS: {Set: sendPSTarget(ctx, targets, "annotation "+k8s.AnnotationTargetPS), Bad: func(v string) {
				logger.Warn("ignoring a target that is not a number of PS", "annotation", k8s.AnnotationTargetPS, "value", v)
				rec.Notify(true, "TargetInvalid", fmt.Sprintf("annotation %s=%q is not a number of PS: ignored", k8s.AnnotationTargetPS, v))
			}},
		})
		if err != nil {
			// The job runs on, at the target it has.
			logger.Warn("the job cannot be scaled", "err", err)
			rec.Notify(true, "TargetUnwatched", err.Error()+": the job keeps its worker target")
		}
	}()
	return targets
}

// k8sAddrs sets where the master pod listens and how the job's pods reach
// it and each other: the master at masterHost (its Service, or its pod IP
// when nothing replaces its pod); an AllReduce worker at its own pod IP,
// which the kubelet puts in place of k8s.PodIPRef in its args.
func k8sAddrs(cfg *master.Config, o k8sOptions, masterHost string) {
	cfg.ListenAddr = portAddr("", o.masterPort)
	cfg.AdvertiseAddr = portAddr(masterHost, o.masterPort)
	cfg.CollectiveAddr = portAddr(k8s.PodIPRef, o.collectivePort)
}

// publishResult leaves the job's summary and result on the master pod,
// where `elasticdl status` and the user's tools look for them.
func publishResult(self *k8s.MasterPod, job string, s *master.Summary, runErr error) error {
	var b []byte
	if s != nil {
		var err error
		if b, err = json.MarshalIndent(s, "", "  "); err != nil {
			return fmt.Errorf("summary: %w", err)
		}
	}
	// Not the job's context: the result is published after a stop too.
	return self.PublishResult(context.Background(), job, b, runErr != nil)
}

// progressStore is where the master publishes the job's progress for an
// autoscaler: its Job's annotation (none for a pod no Job runs; a nil
// *k8s.ProgressStore must not become a non-nil interface).
func progressStore(self *k8s.MasterPod) master.ProgressStore {
	if s := self.ProgressStore(); s != nil {
		return s
	}
	return nil
}

// gangAdmission is --gang's Deps.Admit: wait until all the job's workers
// and PS fit at once.
func gangAdmission(self *k8s.MasterPod, cfg master.Config, worker, ps k8s.PodSettings, logger *slog.Logger) func(context.Context) (time.Duration, error) {
	g := k8s.Gang{Priority: self.Priority(), Logger: logger}
	g.Add(cfg.NumWorkers, worker)
	g.Add(cfg.NumPS, ps)
	return func(ctx context.Context) (time.Duration, error) { return self.WaitAdmitted(ctx, g) }
}
