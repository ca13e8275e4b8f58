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
)

// runMaster is the command of a job's master pod: it runs the job with the
// Kubernetes backend, then leaves the summary in a ConfigMap, labels its
// own pod status=Finished|Failed, and exits non-zero if the job failed.
// When its pod is deleted or evicted (SIGTERM) it hands the job over to the
// master pod its Job starts next, and exits with k8s.ExitHandedOver.
func runMaster(ctx context.Context, env Env, args []string) error {
	mode, args := jobTypeArg(args)
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
		return usageError{fmt.Errorf("--job_type=%s: want train, evaluate or predict", mode)}
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	strategyDefaults(fs, &cfg)
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
	podName, podIP := os.Getenv("POD_NAME"), os.Getenv("POD_IP")
	ns := os.Getenv("POD_NAMESPACE")
	if podName == "" || podIP == "" || ns == "" {
		return usageError{errors.New("POD_NAME, POD_NAMESPACE and POD_IP must be set (the downward API of the master pod that `elasticdl train --backend=k8s` creates)")}
	}
	if !localOpts.supervised {
		// The pod's first process keeps the port and restarts the master
		// in place when it dies (kill -9, OOM, a crash).
		childArgs := append(append([]string{"master", "--job_type=" + mode}, args...), "--supervised", "--listen_fd=3")
		return superviseMaster(ctx, env, childArgs, portAddr("", opts.k8s.masterPort))
	}
	level := slog.LevelInfo
	if opts.verbose {
		level = slog.LevelDebug
	}
	logger := newLogger(env.Stderr, level)
	o := opts.k8s
	client, err := k8s.Connect(o.kubeconfig, o.apiTimeout)
	if err != nil {
		return err
	}
	self, err := client.MasterPod(ctx, ns, podName)
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
	holder := fmt.Sprintf("%s/%d/%d", podName, os.Getpid(), time.Now().UnixNano())
	store, err := self.OpenStateStore(ctx, cfg.JobName, holder)
	if err != nil {
		return stateError(err)
	}
	lis, err := localOpts.listener()
	if err != nil {
		return err
	}
	summary, runErr := runMasterJob(ctx, self, podIP, cfg, opts, rec, env, logger, store, lis)
	if errors.Is(runErr, master.ErrHandedOver) {
		rec.Notify(true, "MasterHandedOver", fmt.Sprintf("master pod %s was stopped (deleted, evicted or preempted): its state is saved, and the next master pod resumes the job", podName))
		return restartable(runErr)
	}
	if errors.Is(runErr, master.ErrStateLost) {
		// Not the job's end: the next master resumes (or, fenced, another
		// one already has).
		return stateError(runErr)
	}
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
	return runErr
}

// runMasterJob builds the backend and the master and runs the job.
func runMasterJob(ctx context.Context, self *k8s.MasterPod, podIP string, cfg master.Config, opts jobOptions,
	rec *k8s.Recorder, env Env, logger *slog.Logger, store master.StateStore, lis net.Listener) (*master.Summary, error) {
	o := opts.k8s
	workerPods, err := o.podSettings("", o.workerRequest, o.workerLimit)
	if err != nil {
		return nil, err
	}
	workerPriorities, err := k8s.WorkerPriorities(o.workerPriority, cfg.NumWorkers, o.highClass, o.lowClass)
	if err != nil {
		return nil, err
	}
	psPods, err := o.podSettings(o.psPriority, o.psRequest, o.psLimit)
	if err != nil {
		return nil, err
	}
	masterReq, err := k8s.ParseResources(o.masterRequest)
	if err != nil {
		return nil, err
	}
	cfg.RequestedCPU = master.RequestedCPU{Master: masterReq.Cpu().AsApproximateFloat64(),
		Worker: workerPods.Resources.Requests.Cpu().AsApproximateFloat64(), PS: psPods.Resources.Requests.Cpu().AsApproximateFloat64()}
	masterHost := podIP
	if self.Replaced() {
		// Master pods come and go; the job's pods reach whichever runs,
		// through its Service (or --master_host).
		if masterHost, err = self.EnsureService(ctx, cfg.JobName, o.masterPort); err != nil {
			return nil, err
		}
		if o.masterHost != "" {
			masterHost = o.masterHost
		}
	}
	k8sAddrs(&cfg, o, masterHost)
	if err := os.MkdirAll(cfg.Output, 0o755); err != nil {
		return nil, fmt.Errorf("--output: %w", err)
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
	targets := make(chan master.Target, 16)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		err := self.WatchTarget(wctx, map[string]k8s.TargetWatch{
			k8s.AnnotationTargetWorkers: {Set: sendTarget(wctx, targets, "annotation "+k8s.AnnotationTargetWorkers), Bad: func(v string) {
				logger.Warn("ignoring a target that is not a number of workers", "annotation", k8s.AnnotationTargetWorkers, "value", v)
				rec.Notify(true, "TargetInvalid", fmt.Sprintf("annotation %s=%q is not a number of workers: ignored", k8s.AnnotationTargetWorkers, v))
			}},
			k8s.AnnotationTargetPS: {Set: sendPSTarget(wctx, targets, "annotation "+k8s.AnnotationTargetPS), Bad: func(v string) {
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
	deps := master.Deps{Backend: be, Registry: env.Registry, Logger: logger, Notifier: rec, Store: store, Listener: lis,
		HandOver: self.Replaced(), Targets: targets}
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

// gangAdmission is --gang's Deps.Admit: wait until all the job's workers
// and PS fit at once.
func gangAdmission(self *k8s.MasterPod, cfg master.Config, worker, ps k8s.PodSettings, logger *slog.Logger) func(context.Context) (time.Duration, error) {
	g := k8s.Gang{Priority: self.Priority(), Logger: logger}
	g.Add(cfg.NumWorkers, worker)
	g.Add(cfg.NumPS, ps)
	return func(ctx context.Context) (time.Duration, error) { return self.WaitAdmitted(ctx, g) }
}
