// Package master is the shell of a job's master: it serves the workers'
// gRPC calls, launches and watches workers and parameter servers through a
// cluster.Backend, and writes the trained model, the predictions and the
// job summary.
//
// It decides nothing: every decision — which task to hand out, what to do
// about a lost instance, when to evaluate, when the job is done — is made
// by the pure core in package job. The shell turns gRPC calls, backend
// events and clock ticks into the core's events, holds one lock around
// each Step, and carries out the Ready that comes back.
package master

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
	"elasticdl/internal/master/policy"
	"elasticdl/internal/master/task"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/storage"
	"elasticdl/internal/tlsid"
	"elasticdl/model"
	"elasticdl/proto/masterpb"
)

// Deps are the master's collaborators.
type Deps struct {
	Backend  cluster.Backend
	Registry *model.Registry
	Logger   *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Notifier, when set, is told what a user would want to see in the
	// cluster's own tools: relaunches, preemptions, epoch ends, job end.
	Notifier Notifier
	// Store, when set, persists the job's state for failover: the master
	// resumes what it holds of Config.RunID, and persists every change
	// before it answers or acts on it.
	Store StateStore
	// Listener, when set, is where the master serves (instead of
	// Config.ListenAddr): a supervisor keeps the port across masters.
	Listener net.Listener
	// HandOver: when Run's context ends, the master does not stop the job
	// but hands it over: it stops serving, persists its last state, leaves
	// the instances running and returns ErrHandedOver; the next master
	// resumes. For a master whose pod something replaces when it is
	// deleted or evicted (a Kubernetes Job); it needs Store.
	HandOver bool
	// Targets, when set, carries the cluster's wishes for the number of
	// workers (an autoscaler, `elasticdl scale`); Run applies each, within
	// the job's bounds, once the job has started or resumed.
	Targets <-chan Target
	// Admit, when set, is asked before a new job launches anything: it
	// blocks until the job may start (all-or-nothing admission, --gang)
	// and returns how long it waited. A job resumed after failover is not
	// asked again; a master stopped while it waits hands over nothing, and
	// the next one asks again.
	Admit func(ctx context.Context) (time.Duration, error)
	// History, when set, keeps the dashboard's history for the next
	// master (HistoryFile); a resumed master restores it.
	History HistoryStore
	// Dashboard, when set, is where Run serves the job's dashboard.
	Dashboard net.Listener
	// CA, when set, is the job's certificate authority: every connection
	// of the job is mutual TLS with certificates it issues, and every call
	// is authorized by the identity they prove. Nil: plaintext.
	CA *tlsid.CA
	// Progress, when set, is where a training job publishes its progress
	// for a cluster scheduler (publish.go).
	Progress ProgressStore
}

// Target is a wish for the number of workers a job runs, and who has it.
type Target struct {
	Workers int
	// PS > 0 makes it a number of PS instead (Workers is then unused).
	PS     int
	Source string
}

// Notifier receives notable job events (Kubernetes Events on the master
// pod). Notify is called with the master's lock held: it must not block
// (queue and return).
type Notifier interface {
	Notify(warning bool, reason, message string)
}

type nopNotifier struct{}

func (nopNotifier) Notify(bool, string, string) {}

// Master runs one job. Build it with New, then call Run once. It holds the
// core and the I/O handles that carry out its decisions, grouped.
type Master struct {
	masterpb.UnimplementedMasterServer

	cfg       Config
	backend   cluster.Backend
	notify    Notifier
	log       *slog.Logger
	now       func() time.Time
	spec      model.Spec
	optimizer string

	// mu serialises the core's Steps and what is carried out under them.
	mu     sync.Mutex
	job    *job.Job
	output jobOutput // under mu
	// ended is closed when the core says the workers are done.
	ended chan struct{}

	routes   jobRoutes
	failover failover
	listener net.Listener
	control  clusterControl

	live *liveSender
	// runCtx is Run's context, for work the shell starts in the background
	// (asking the PS what they applied); set before the first Step.
	runCtx  context.Context
	observe observers
	sql     *sqlData // the snapshots of the job's tables
}

// jobOutput is what the job writes out, when and as the core decides.
type jobOutput struct {
	pred *predictionFile // predict jobs, opened by Run
	save *job.Save       // what the core asked to save, carried out by Run
	// uploads are AllReduce workers' final parameters, by worker, until
	// the core says whose to save.
	uploads map[int]*masterpb.UploadModelRequest
	// tb writes TensorBoard events (nil: none); set by Run before the
	// first Step, safe for concurrent use.
	tb *tensorboard
}

// jobRoutes is where the job's processes reach each other (launch flags).
type jobRoutes struct {
	// master is the master's address; set in Run before any launch,
	// read-only after.
	master string
	// ps: where the PS shards are, and how many the layout has.
	ps psRoutes
	// tls: the credentials the job's connections need (nil: --tls=false).
	tls *jobTLS
}

// failover is what lets the next master resume the job from its state.
type failover struct {
	store   StateStore
	persist *persister // nil without a store; started by Run
	seq     uint64     // steps so far (under mu): what the persister covers
	// resuming: the core was rebuilt from persisted state.
	resuming bool
	handOver bool // Deps.HandOver
}

// clusterControl is the cluster's say over when the job starts and its size.
type clusterControl struct {
	admit   func(ctx context.Context) (time.Duration, error)
	targets <-chan Target
	// progress: what the job tells the cluster of its progress.
	progress *progressPublisher
}

// shellMetrics are the histograms the shell observes (nil until RegisterMetrics).
type shellMetrics struct {
	getTaskLatency prometheus.Histogram
	// ringRecovery: AllReduce, from a membership change to the next
	// committed step.
	ringRecovery prometheus.Histogram
	// resizeTime: from a worker lost or a target change to training at
	// the job's new size, by cause.
	resizeTime *prometheus.HistogramVec
	// reshardTime: live re-shards of the PS (kind=total|paused).
	reshardTime *prometheus.HistogramVec
}

// New checks the configuration, the model and the data, so that a bad job
// fails before anything is launched.
func New(cfg Config, deps Deps) (*Master, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RunID == "" {
		cfg.RunID = "run-" + rand.Text()
	}
	if deps.Backend == nil || deps.Registry == nil {
		return nil, errors.New("master: backend and model registry are required")
	}
	spec, err := resolveModel(&cfg, deps.Registry)
	if err != nil {
		return nil, err
	}
	optSpec, err := resolveOptimizer(&cfg, spec)
	if err != nil {
		return nil, err
	}
	if deps.HandOver && deps.Store == nil {
		return nil, errors.New("a master that hands over needs a state store")
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.Default()
	}
	// New has no context: a copy runs to its end, as a count of a file.
	sd, err := prepareSQL(context.Background(), &cfg, logger)
	if err != nil {
		return nil, err
	}
	m, err := build(cfg, deps, spec, optSpec, logger, sd)
	if err != nil {
		sd.dropMade(logger)
		return nil, err
	}
	return m, nil
}

// build builds the master of New's checked job, its tables' snapshots
// made (sd).
func build(cfg Config, deps Deps, spec model.Spec, optSpec string, logger *slog.Logger, sd *sqlData) (*Master, error) {
	jcfg, err := coreConfig(&cfg, spec, sd, logger)
	if err != nil {
		return nil, err
	}
	core, resuming, err := openCore(&cfg, jcfg, deps.Store, logger)
	if err != nil {
		return nil, err
	}
	logDataChecked(logger, spec, jcfg)
	m := &Master{
		cfg:       cfg,
		backend:   deps.Backend,
		notify:    deps.Notifier,
		log:       logger,
		now:       deps.Now,
		spec:      spec,
		optimizer: optSpec,
		job:       core,
		sql:       sd,
		ended:     make(chan struct{}),
		listener:  deps.Listener,
		failover:  failover{store: deps.Store, handOver: deps.HandOver, resuming: resuming},
		control:   clusterControl{admit: deps.Admit, targets: deps.Targets},
	}
	if cfg.training() {
		m.control.progress = newProgressPublisher(deps.Progress, logger, cfg.PublishInterval)
	}
	if m.now == nil {
		m.now = time.Now
	}
	if m.routes.tls, err = newJobTLS(deps.CA, m.now()); err != nil {
		return nil, err
	}
	if m.notify == nil {
		m.notify = nopNotifier{}
	}
	m.live = newLiveSender(logger, m.routes.tls.Creds())
	m.observe.history = openHistory(deps.History, &cfg, resuming, logger)
	m.observe.board = newBoard(deps.Dashboard, logger)
	return m, nil
}

// resolveOptimizer is the job's optimizer spec (--optimizer, else the
// model's), checked, and checks the model fits the distribution strategy.
func resolveOptimizer(cfg *Config, spec model.Spec) (string, error) {
	optSpec := cfg.Optimizer
	if optSpec == "" {
		optSpec = spec.Optimizer
	}
	if optSpec == "" && cfg.external() {
		optSpec = "sgd" // evaluate and predict jobs: the PS apply no update
	}
	if _, err := optimizer.Parse(optSpec); err != nil {
		return "", fmt.Errorf("optimizer %q: %w", optSpec, err)
	}
	if cfg.allReduce() && spec.IsSparse() {
		return "", fmt.Errorf("--distribution_strategy=AllreduceStrategy: model %s has embedding tables, which live on parameter servers: use ParameterServerStrategy", spec.Name)
	}
	return optSpec, nil
}

// openCore builds the core: a new one, or, when store holds state of
// cfg's run (failover), the one that state describes (resuming).
func openCore(cfg *Config, jcfg job.Config, store StateStore, logger *slog.Logger) (core *job.Job, resuming bool, err error) {
	if core, err = job.New(jcfg); err != nil {
		return nil, false, err
	}
	if store == nil || cfg.RunID == "" {
		return core, false, nil
	}
	st, err := loadState(context.Background(), store, cfg.RunID, cfg.JobName)
	if err != nil || st == nil {
		return core, false, err
	}
	if core, err = job.Resume(jcfg, *st); err != nil {
		return nil, false, fmt.Errorf("resume the job from its persisted state: %w", err)
	}
	logger.Info("resuming the job from its persisted state", "run", cfg.RunID, "phase", core.Phase())
	return core, true, nil
}

// logDataChecked logs what coreConfig counted.
func logDataChecked(logger *slog.Logger, spec model.Spec, jcfg job.Config) {
	var trainN int64
	for _, sh := range jcfg.Tasks.Training {
		trainN += sh.Records
	}
	logger.Info("data checked", "model", spec.Name, "training_records", trainN, "validation_records", jcfg.ValidationRecords,
		"prediction_records", jcfg.PredictionRecords, "init_version", jcfg.InitVersion)
}

// coreConfig counts the records of every data set (checking they fit the
// model) and the checkpoint the PS start from, and turns cfg into the
// core's configuration. It may point cfg's --checkpoint_dir_for_init at
// the directory the checkpoint was found in (checkCheckpoints).
func coreConfig(cfg *Config, spec model.Spec, sd *sqlData, logger *slog.Logger) (job.Config, error) {
	jc := job.Config{
		Mode:                cfg.Mode,
		JobName:             cfg.JobName,
		ModelDef:            cfg.ModelDef,
		ModelParams:         cfg.ModelParams,
		WorkerCommand:       cfg.WorkerCommand,
		RecordsPerTask:      cfg.RecordsPerTask(),
		ValidationData:      cfg.ValidationData,
		EvaluationSteps:     cfg.EvaluationSteps,
		NumClasses:          spec.NumClasses,
		NumWorkers:          cfg.NumWorkers,
		MinWorkers:          cfg.MinWorkers,
		NumPS:               cfg.NumPS,
		SyncSGD:             !cfg.UseAsync && !cfg.allReduce(),
		HeartbeatTimeout:    cfg.HeartbeatTimeout,
		WorkerMasterTimeout: cfg.WorkerMasterTimeout,
		AllReduce:           cfg.allReduce(),
		RingGrace:           ringGrace,
		// Workers name every push's minibatch (internal/worker).
		CheckApplied:  !cfg.allReduce(),
		MinibatchSize: cfg.MinibatchSize,
		UploadTimeout: time.Minute,
		// Stragglers (docs/faults.md).
		SlowWorkerFraction: cfg.SlowWorkerFraction, BackupTasks: cfg.BackupTasks, ParkSlowWorkers: cfg.ParkSlowWorkers,
		ParkTrials: cfg.ParkTrials, ReplaceSlowWorkers: cfg.ReplaceSlowWorkers, ReplaceSlowAfter: cfg.ReplaceSlowAfter,
		Policy: policy.Config{
			MaxWorkerFailureRelaunches: cfg.RelaunchOnWorkerFailure,
			MaxPSRelaunches:            cfg.MaxPSRelaunches,
			// A cap on all worker relaunches, against crash loops.
			MaxTotalWorkerRelaunches: 100 * cfg.NumWorkers,
		},
		Tasks: task.Config{
			RecordsPerTask: cfg.RecordsPerTask(),
			MaxAttempts:    cfg.MaxTaskAttempts,
			TaskTimeout:    cfg.TaskTimeout,
			// Tasks in a new order each epoch, as a data loader would shuffle.
			Shuffle: true,
			Seed:    cfg.Seed,
		},
		Logger: logger,
	}
	var err error
	if cfg.training() {
		n, err := countRecords(sd.opened(cfg.TrainingData), spec)
		if err != nil {
			return jc, fmt.Errorf("--training_data: %w", err)
		}
		jc.Tasks.Training = []task.Shard{{Name: cfg.TrainingData, Records: n}}
		jc.Tasks.NumEpochs = cfg.NumEpochs
	}
	if cfg.ValidationData != "" {
		if jc.ValidationRecords, err = countRecords(sd.opened(cfg.ValidationData), spec); err != nil {
			return jc, fmt.Errorf("--validation_data: %w", err)
		}
	}
	if cfg.Mode == ModePredict {
		if jc.PredictionRecords, err = countRecords(sd.opened(cfg.PredictionData), spec); err != nil {
			return jc, fmt.Errorf("--prediction_data: %w", err)
		}
		if err := checkOutputDir(cfg.PredictionOutputs); err != nil {
			return jc, err
		}
		jc.PredictionData, jc.PredictionOutputs = cfg.PredictionData, cfg.PredictionOutputs
	}
	if err := checkExportable(cfg, spec); err != nil {
		return jc, err
	}
	jc.InitDir, jc.InitVersion, err = checkCheckpoints(cfg, spec, logger)
	jc.CheckpointDir = cfg.CheckpointDir
	return jc, err
}

// Run launches the job and blocks until it ends; the returned summary is
// also written to the output directory. A cancelled ctx stops the job.
func (m *Master) Run(ctx context.Context) (*Summary, error) {
	start := m.now()
	var stop context.CancelFunc
	m.runCtx, stop = context.WithCancel(ctx)
	defer stop()
	lis, err := m.listen()
	if err != nil {
		m.sql.dropMade(m.log)
		return nil, err
	}
	defer lis.Close()
	if m.cfg.Mode == ModePredict {
		if err := m.openPredictions(); err != nil {
			m.sql.dropMade(m.log)
			return nil, err
		}
	}
	tb := startTensorboard(m.cfg.TensorBoardLogDir, m.now(), m.log)
	defer tb.close()
	m.mu.Lock()
	m.output.tb = tb
	m.mu.Unlock()
	persisted := m.startPersister()
	m.observe.history.start()
	m.serveBoard()
	defer m.observe.board.close(false)
	if err := m.resolveAddresses(lis.Addr().String()); err != nil {
		m.step(ctx, job.Fail{Err: err})
		return m.conclude(start)
	}
	m.startJob(ctx)
	m.control.progress.start(ctx)
	defer m.control.progress.close()
	m.sql.keepFresh(m.runCtx, m.log)
	// Serving only now: a worker's request (one retried from a dead
	// master's time, say) finds the core resumed and the prediction
	// file open. Until then, connections wait in the backlog.
	gs := m.serve(lis)
	defer gs.Stop()
	if err := m.loop(ctx, persisted); err != nil {
		// The state can no longer be persisted (or another master took
		// the store over, or this one handed over): this master must
		// stop acting at once, and leave the instances to the next one.
		return nil, m.leave(ctx, gs, err)
	}
	return m.conclude(start)
}

// startPersister starts writing the job's state to the store, if any; the
// channel (nil without a store) gets the persister's error.
func (m *Master) startPersister() <-chan error {
	if m.failover.store == nil {
		return nil
	}
	m.failover.persist = newPersister(m.failover.store, m.encodeState)
	done := make(chan error, 1)
	go func() { done <- m.failover.persist.run(context.Background()) }()
	return done
}

// startJob resumes the job (failover) or starts it, once admitted.
func (m *Master) startJob(ctx context.Context) {
	m.log.Info("job starting", "job", m.cfg.JobName, "mode", m.cfg.Mode, "model", m.spec.Name, "optimizer", m.optimizer,
		"evaluation_steps", m.cfg.EvaluationSteps,
		"epochs", m.cfg.NumEpochs, "workers", m.cfg.NumWorkers, "ps", m.cfg.NumPS, "master", m.routes.master, "resuming", m.failover.resuming)
	if m.failover.resuming {
		m.resume(ctx)
	} else if m.control.admit == nil {
		m.step(ctx, job.Start{})
	} else if waited, err := m.control.admit(ctx); err != nil {
		// Stopped while waiting: the loop stops the job or, for a master
		// that hands over, leaves it (not started, nothing persisted) to
		// the next master, which asks again.
		if ctx.Err() == nil {
			m.step(ctx, job.Fail{Err: fmt.Errorf("admission: %w", err)})
		}
	} else {
		m.log.Info("job admitted: every pod fits at once", "waited", waited.Round(time.Millisecond))
		m.notify.Notify(false, "GangAdmitted", fmt.Sprintf("all the job's pods fit at once after %.1fs: launching them", waited.Seconds()))
		m.step(ctx, job.Start{AdmissionWait: waited})
	}
}

// leave stops a master that must stop acting (loop's err): one handing
// over answers the requests under way and persists its last state first.
func (m *Master) leave(ctx context.Context, gs *grpc.Server, err error) error {
	m.closeHistory(errors.Is(err, ErrHandedOver), false)
	m.observe.board.close(false) // browsers reconnect, to the next master
	if !errors.Is(err, ErrHandedOver) {
		return err
	}
	// Requests under way are answered (a worker whose report is lost in
	// between has it refused as done by the next master); nothing is
	// answered after the last state written.
	stopGracefully(gs, handOverGrace)
	m.failover.persist.close()
	if perr := m.failover.persist.failed(); perr != nil {
		return errors.Join(err, perr)
	}
	m.log.Info("handed the job over to the next master", "why", context.Cause(ctx))
	return err
}

// conclude ends the job begun at start: carries out what the core asked,
// stops what remains, and writes the summary.
func (m *Master) conclude(start time.Time) (*Summary, error) {
	m.finish()
	m.sampleTensorBoard()
	s, runErr := m.summary(m.now().Sub(start))
	m.notifyEnd(s)
	m.closeHistory(true, true)
	m.endBoard(s)
	if m.failover.persist != nil {
		m.failover.persist.close()
	}
	if m.output.pred != nil && runErr == nil && (m.failover.persist == nil || m.failover.persist.failed() == nil) {
		// The state that says the predictions are committed is durable.
		if err := m.output.pred.release(); err != nil {
			m.log.Warn("removing the predictions' temp file", "err", err)
		}
	}
	m.sql.dropAll(m.log)
	if _, err := WriteSummary(m.cfg.Output, s); err != nil {
		return s, errors.Join(runErr, err)
	}
	return s, runErr
}

// openPredictions opens a predict job's output: a new one, the dead
// master's temp file for a job it left unfinished, or none for a job that
// had ended (its output committed or given up).
func (m *Master) openPredictions() error {
	resume := int64(-1)
	if m.failover.resuming {
		if p := m.job.Phase(); p == job.Succeeded || p == job.Failed {
			return removeLeftoverPredictions(m.predictionsPath(), m.cfg.RunID)
		}
		resume = m.job.PredictionRowsReleased()
	}
	pf, err := newPredictionFile(m.predictionsPath(), m.spec.NumClasses, m.cfg.RunID, resume)
	if err != nil {
		return err
	}
	if storage.IsRemote(m.cfg.PredictionOutputs) {
		pf.remote = m.cfg.PredictionOutputs
	}
	m.mu.Lock()
	m.output.pred = pf
	m.mu.Unlock()
	return nil
}

// ErrStateLost: the master could not persist the job's state and stopped
// acting; a master that starts next resumes from what was persisted.
var ErrStateLost = errors.New("job state store lost")

// handOverGrace bounds how long a master handing over waits for the
// requests under way.
const handOverGrace = 2 * time.Second

// stopGracefully stops gs once its requests under way are answered, or
// after grace.
func stopGracefully(gs *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		gs.Stop()
		<-done
	}
}

// ErrHandedOver: the master was stopped (Deps.HandOver) and left the job,
// its state persisted, to the next master.
var ErrHandedOver = errors.New("job handed over to the next master")

// resume adopts what the backend still has of the job (a master that took
// over from one that died).
func (m *Master) resume(ctx context.Context) {
	existing, err := m.backend.Existing(ctx)
	if err != nil {
		m.step(ctx, job.Fail{Err: fmt.Errorf("list the job's instances: %w", err)})
		return
	}
	m.log.Info("adopting the job's instances", "instances", len(existing))
	m.step(ctx, job.Resumed{Instances: existing})
	m.reconcileHistory()
}

// encodeState is the persister's snapshot: the core's state and the last
// step it covers, with the prediction rows written so far made durable
// first (the state counts them as written).
func (m *Master) encodeState() ([]byte, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.output.pred != nil {
		if err := m.output.pred.sync(); err != nil {
			return nil, 0, fmt.Errorf("write predictions: %w", err)
		}
	}
	data, err := json.Marshal(persistedState{Format: stateFormat, RunID: m.cfg.RunID, Job: m.cfg.JobName, SavedAt: m.now().UTC(), State: m.job.State()})
	return data, m.failover.seq, err
}

// finish carries out the core's Save, gives workers told DONE a moment to
// exit, and stops what remains.
func (m *Master) finish() {
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.mu.Lock()
	save, pf := m.output.save, m.output.pred
	m.mu.Unlock()
	if save != nil {
		m.step(stopCtx, m.carryOutSave(stopCtx, save))
	}
	m.mu.Lock()
	succeeded := m.job.Phase() == job.Succeeded
	m.mu.Unlock()
	if pf != nil && !succeeded {
		pf.abort()
	}
	if succeeded {
		m.awaitWorkersExit(5 * time.Second)
	}
	if err := m.backend.Close(stopCtx); err != nil {
		m.log.Warn("stopping instances", "err", err)
	}
	m.drainEvents()
}

// carryOutSave saves the model or commits the predictions, as the core
// asked, and says how it went.
func (m *Master) carryOutSave(ctx context.Context, s *job.Save) job.Saved {
	if s.Predictions {
		if err := m.output.pred.commit(s.Records); err != nil {
			return job.Saved{Err: fmt.Errorf("write predictions: %w", err)}
		}
		return job.Saved{}
	}
	var saved job.Saved
	if m.cfg.allReduce() {
		m.mu.Lock()
		up := m.output.uploads[s.Uploaded]
		m.output.uploads = nil
		m.mu.Unlock()
		saved = m.saveUploadedModel(up)
	} else {
		saved = m.saveModel(ctx, s)
	}
	if saved.Err != nil {
		saved.Err = fmt.Errorf("save model: %w", saved.Err)
	} else {
		saved.Err = m.exportModel()
	}
	return saved
}

// summary returns the job's summary after d, and its error.
func (m *Master) summary(d time.Duration) (*Summary, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.job.Summary(d), m.job.Err()
}

// notifyEnd tells the notifier how the job ended, in one line.
func (m *Master) notifyEnd(s *Summary) {
	if s.Status != "succeeded" {
		m.notify.Notify(true, "JobFailed", fmt.Sprintf("job %s failed after %.1fs: %s", s.Job, s.DurationSeconds, s.Error))
		return
	}
	msg := fmt.Sprintf("job %s succeeded in %.1fs; workers %d launched, %d lost (%d preempted); ps %d launched, %d lost",
		s.Job, s.DurationSeconds, s.Workers.Launched, s.Workers.Lost, s.Workers.Preempted, s.PS.Launched, s.PS.Lost)
	if s.Eval != nil {
		msg += fmt.Sprintf("; accuracy %.4f on %d records", s.Eval.Accuracy, s.Eval.Records)
	}
	m.notify.Notify(false, "JobSucceeded", msg)
}

// resolveAddresses learns where the master and each PS shard are reached.
func (m *Master) resolveAddresses(listenAddr string) error {
	m.routes.master = m.cfg.AdvertiseAddr
	if m.routes.master == "" {
		m.routes.master = listenAddr
	}
	m.mu.Lock()
	n, layout := m.job.NumPS() // a resumed core may have re-sharded
	m.mu.Unlock()
	return m.setPSLayout(n, layout)
}
