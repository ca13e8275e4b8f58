// Package master is the job master: it cuts the data into tasks (package
// task), hands them to workers over gRPC, launches and watches workers and
// parameter servers through a cluster.Backend, relaunches what was lost
// (package policy) and writes the trained model and the job summary.
//
// Decisions live in the pure packages task and policy; this package only
// translates gRPC calls, backend events and clock ticks into their inputs
// and carries out what they decide.
package master

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"elasticdl/data"
	"elasticdl/internal/cluster"
	"elasticdl/internal/master/policy"
	"elasticdl/internal/master/task"
	"elasticdl/internal/ps"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/ps/client"
	"elasticdl/internal/ps/optimizer"
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
}

// Notifier receives notable job events (Kubernetes Events on the master
// pod). Notify may be called with the master's lock held: it must not block
// (queue and return).
type Notifier interface {
	Notify(warning bool, reason, message string)
}

type nopNotifier struct{}

func (nopNotifier) Notify(bool, string, string) {}

// Master runs one job. Build it with New, then call Run once.
type Master struct {
	masterpb.UnimplementedMasterServer

	cfg       Config
	backend   cluster.Backend
	notify    Notifier
	log       *slog.Logger
	now       func() time.Time
	spec      model.Spec
	optimizer string

	trainRecords int64
	evalRecords  int64
	predRecords  int64
	// initVersion is the version of the checkpoint the PS start from (-1:
	// none).
	initVersion int64

	mu            sync.Mutex
	disp          *task.Dispatcher
	policy        *policy.Policy
	workers       map[int]*instance // live workers by ID
	ps            map[int]*instance // live PS by shard index
	nextWorkerID  int
	nextPSID      int
	evalScheduled bool
	evalPending   map[int64]evalMetrics // by task ID, until the task succeeds
	// passes are the evaluation passes by dispatcher key (see evalPass).
	passes map[int64]*evalPass
	// finalKey is the key of the final pass (evaluation at the end of
	// training, or the evaluate job's pass); -1 until queued.
	finalKey int64
	// trainVersion is the highest model version training reports carried;
	// nextEvalAt the version whose crossing queues the next pass.
	trainVersion, nextEvalAt int64
	pred                     *predictionWriter
	summary                  Summary
	progress                 progressMeter
	finished                 bool
	jobErr                   error
	done                     chan struct{}
	masterAddr               string
	psAddrs                  []string // what workers and the master dial
	psListen                 []string // what each PS binds
	// liveGen orders the live-worker counts sent to the PS (sync SGD).
	liveGen int64
	// liveSending: the initial workers are launched (the PS started with
	// --live_workers=NumWorkers), so launches and exits update the PS.
	liveSending bool
	// liveMu guards the queue of live-worker updates (never held while
	// taking mu).
	liveMu      sync.Mutex
	livePending []liveUpdate
	liveRunning bool
	// trainingStart/End bound the training phase, for throughput.
	trainingStart, trainingEnd time.Time
	// epochsAnnounced counts the epochs whose end was notified.
	epochsAnnounced int
	// getTaskLatency is nil until RegisterMetrics.
	getTaskLatency prometheus.Histogram
}

type instance struct {
	id, index int
	launched  time.Time
	lastSeen  time.Time
	running   bool
}

type evalMetrics struct {
	records int64
	sums    map[string]float64
	// version is the model version the worker evaluated (what it pulled).
	version int64
	// hist: binary models' score histogram (data.AUCBuckets buckets), for AUC.
	hist *data.ScoreHistogram
}

func (e *evalMetrics) add(o evalMetrics) {
	if e.sums == nil {
		e.sums = map[string]float64{}
	}
	e.records += o.records
	for k, v := range o.sums {
		e.sums[k] += v
	}
	if o.hist != nil {
		if e.hist == nil {
			e.hist = data.NewScoreHistogram()
		}
		_ = e.hist.Merge(o.hist) // sizes checked in ReportEvaluationMetrics
	}
}

// evalPass is one evaluation pass over the validation data. Workers
// evaluate the parameters they pull when they start each task: in async
// training those may be newer than the version the pass was queued at, so
// the versions actually used are recorded, min and max.
type evalPass struct {
	version          int64 // the version the pass was queued at
	final            bool
	metrics          evalMetrics
	minUsed, maxUsed int64
	haveUsed         bool
}

func (p *evalPass) add(e evalMetrics) {
	p.metrics.add(e)
	if !p.haveUsed || e.version < p.minUsed {
		p.minUsed = e.version
	}
	if !p.haveUsed || e.version > p.maxUsed {
		p.maxUsed = e.version
	}
	p.haveUsed = true
}

// result turns the pass's sums into metrics. The "correct" and "loss" sums
// give accuracy and mean loss; a binary model's AUC comes from the merged
// per-task score histograms.
func (p *evalPass) result() EvalRecord {
	r := EvalRecord{Version: p.version, MinVersionUsed: p.minUsed, MaxVersionUsed: p.maxUsed, Records: p.metrics.records, Final: p.final}
	if n := float64(p.metrics.records); n > 0 {
		r.Accuracy = p.metrics.sums["correct"] / n
		r.Loss = p.metrics.sums["loss"] / n
	}
	r.AUC = aucOf(p.metrics.hist)
	return r
}

// New checks the configuration, the model and the data, so that a bad job
// fails before anything is launched.
func New(cfg Config, deps Deps) (*Master, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Backend == nil || deps.Registry == nil {
		return nil, errors.New("master: backend and model registry are required")
	}
	spec, err := deps.Registry.Lookup(cfg.ModelDef)
	if err != nil {
		return nil, fmt.Errorf("--model_def: %w", err)
	}
	optSpec := cfg.Optimizer
	if optSpec == "" {
		optSpec = spec.Optimizer
	}
	if _, err := optimizer.Parse(optSpec); err != nil {
		return nil, fmt.Errorf("optimizer %q: %w", optSpec, err)
	}
	var trainN, evalN, predN int64
	if cfg.training() {
		if trainN, err = countRecords(cfg.TrainingData, spec); err != nil {
			return nil, fmt.Errorf("--training_data: %w", err)
		}
	}
	if cfg.ValidationData != "" {
		if evalN, err = countRecords(cfg.ValidationData, spec); err != nil {
			return nil, fmt.Errorf("--validation_data: %w", err)
		}
	}
	if cfg.Mode == ModePredict {
		if predN, err = countRecords(cfg.PredictionData, spec); err != nil {
			return nil, fmt.Errorf("--prediction_data: %w", err)
		}
		if err := checkOutputDir(cfg.PredictionOutputs); err != nil {
			return nil, err
		}
	}
	tcfg := task.Config{
		RecordsPerTask: cfg.RecordsPerTask(),
		NumEpochs:      0,
		MaxAttempts:    cfg.MaxTaskAttempts,
		TaskTimeout:    cfg.TaskTimeout,
		// Tasks in a new order each epoch, as a data loader would shuffle.
		Shuffle: true,
		Seed:    cfg.Seed,
	}
	if cfg.training() {
		tcfg.Training = []task.Shard{{Name: cfg.TrainingData, Records: trainN}}
		tcfg.NumEpochs = cfg.NumEpochs
	}
	disp, err := task.New(tcfg)
	if err != nil {
		return nil, fmt.Errorf("task dispatcher: %w", err)
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.Default()
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	var notifier Notifier = nopNotifier{}
	if deps.Notifier != nil {
		notifier = deps.Notifier
	}
	initVersion, err := checkCheckpoints(cfg, spec, logger)
	if err != nil {
		return nil, err
	}
	m := &Master{
		cfg:          cfg,
		backend:      deps.Backend,
		notify:       notifier,
		log:          logger,
		now:          now,
		spec:         spec,
		optimizer:    optSpec,
		trainRecords: trainN,
		evalRecords:  evalN,
		predRecords:  predN,
		initVersion:  initVersion,
		disp:         disp,
		policy: policy.New(policy.Config{
			MaxWorkerFailureRelaunches: cfg.RelaunchOnWorkerFailure,
			MaxPSRelaunches:            cfg.MaxPSRelaunches,
			MaxTotalWorkerRelaunches:   100 * cfg.NumWorkers,
		}),
		workers:     map[int]*instance{},
		ps:          map[int]*instance{},
		evalPending: map[int64]evalMetrics{},
		passes:      map[int64]*evalPass{},
		finalKey:    -1,
		nextEvalAt:  cfg.EvaluationSteps,
		done:        make(chan struct{}),
		summary:     Summary{Job: cfg.JobName, ModelDef: cfg.ModelDef, Mode: cfg.Mode},
	}
	if m.summary.Mode == "" {
		m.summary.Mode = ModeTrain
	}
	switch cfg.Mode {
	case ModeEvaluate:
		// One pass over the restored model: its key is the checkpoint's
		// version.
		m.evalScheduled = true
		if err := m.queueEvalLocked(initVersion, true); err != nil {
			return nil, err
		}
	case ModePredict:
		if _, err := disp.AddPrediction([]task.Shard{{Name: cfg.PredictionData, Records: predN}}, cfg.RecordsPerTask()); err != nil {
			return nil, fmt.Errorf("schedule prediction: %w", err)
		}
	}
	return m, nil
}

// queueEvalLocked queues an evaluation pass over the validation data
// requested at model version v. Dispatcher passes are keyed by version;
// the final pass may be requested at a version a periodic pass already
// used, so it takes the next free key (keys only name passes).
func (m *Master) queueEvalLocked(v int64, final bool) error {
	key := v
	for m.passes[key] != nil {
		key++
	}
	err := m.disp.AddEvaluation([]task.Shard{{Name: m.cfg.ValidationData, Records: m.evalRecords}}, m.cfg.RecordsPerTask(), key)
	if err != nil {
		return fmt.Errorf("schedule evaluation: %w", err)
	}
	m.passes[key] = &evalPass{version: v, final: final}
	if final {
		m.finalKey = key
	}
	return nil
}

// checkOutputDir fails when the directory a file is to be written to does
// not exist.
func checkOutputDir(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--prediction_outputs: directory %s does not exist: create it first", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--prediction_outputs: %s is not a directory", dir)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("--prediction_outputs: %s is a directory; give a file name", path)
	}
	return nil
}

// countRecords opens a data source to learn its size and check that it
// fits the model, then closes it: workers read the records themselves.
func countRecords(uri string, spec model.Spec) (int64, error) {
	src, err := data.Open(uri)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	if !sameShape(src.FeatureShape(), spec.InputShape) {
		return 0, fmt.Errorf("%s: records have shape %v, model %s expects %v", uri, src.FeatureShape(), spec.Name, spec.InputShape)
	}
	if spec.Sparse != nil {
		cs, ok := src.(data.CategoricalSource)
		if !ok {
			return 0, fmt.Errorf("%s: records have no categorical ids, model %s expects %d", uri, spec.Name, spec.Sparse.NumCategorical)
		}
		if cs.NumCategorical() != spec.Sparse.NumCategorical {
			return 0, fmt.Errorf("%s: records have %d categorical ids, model %s expects %d",
				uri, cs.NumCategorical(), spec.Name, spec.Sparse.NumCategorical)
		}
	}
	if src.Len() == 0 {
		return 0, fmt.Errorf("%s: no records", uri)
	}
	return src.Len(), nil
}

// checkCheckpoints fails the job before anything is launched when the
// checkpoint the PS would start from does not fit the model, or when
// --checkpoint_dir_for_init holds none; otherwise every PS would fail at
// start, or every worker at its first pull.
func checkCheckpoints(cfg Config, spec model.Spec, log *slog.Logger) (int64, error) {
	if cfg.CheckpointDir == "" && cfg.CheckpointDirForInit == "" {
		return -1, nil
	}
	var set *checkpoint.Set
	flagName := "checkpoint_dir"
	if cfg.CheckpointDir != "" {
		var err error
		set, err = checkpoint.Load(cfg.CheckpointDir, log)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, checkpoint.ErrNoCheckpoint) {
			return -1, fmt.Errorf("--checkpoint_dir: %w", err)
		}
	}
	if set == nil && cfg.CheckpointDirForInit != "" {
		var err error
		flagName = "checkpoint_dir_for_init"
		if set, err = checkpoint.Load(cfg.CheckpointDirForInit, log); err != nil {
			return -1, fmt.Errorf("--checkpoint_dir_for_init: %w", err)
		}
	}
	if set == nil {
		return -1, nil
	}
	// Only the names and shapes matter.
	params := spec.Build(rand.New(rand.NewSource(cfg.Seed))).Params()
	dims := map[string][]int64{}
	for _, c := range set.Shards {
		for _, t := range c.GetDenseParameters() {
			dims[t.GetName()] = t.GetDims()
		}
	}
	for _, p := range params {
		d, ok := dims[p.Name]
		if !ok {
			return -1, fmt.Errorf("--%s: %s does not fit model %s: no parameter %q", flagName, set.Dir, spec.Name, p.Name)
		}
		if !slices.Equal(d, intsToInt64(p.Value.Shape)) {
			return -1, fmt.Errorf("--%s: %s does not fit model %s: parameter %q has shape %v, the model %v", flagName, set.Dir, spec.Name, p.Name, d, p.Value.Shape)
		}
	}
	if len(dims) != len(params) {
		return -1, fmt.Errorf("--%s: %s does not fit model %s: %d parameters, the model has %d", flagName, set.Dir, spec.Name, len(dims), len(params))
	}
	if err := checkTables(set, spec); err != nil {
		return -1, fmt.Errorf("--%s: %s does not fit model %s: %w", flagName, set.Dir, spec.Name, err)
	}
	log.Info("parameter servers will start from a checkpoint", "dir", set.Dir, "version", set.Version, "shards", set.NumShards)
	return set.Version, nil
}

// checkTables checks the checkpoint's embedding tables against the model's:
// each must be one of the model's, with its dimension. A table of the model
// that the checkpoint lacks is fine (its rows are created on first use).
func checkTables(set *checkpoint.Set, spec model.Spec) error {
	want := map[string]int{}
	if spec.Sparse != nil {
		for _, t := range spec.Sparse.Tables() {
			want[t.Table] = t.Dim
		}
	}
	for _, c := range set.Shards {
		for _, et := range c.GetEmbeddingTables() {
			name, dim := et.GetInfo().GetName(), et.GetInfo().GetDim()
			d, ok := want[name]
			if !ok {
				return fmt.Errorf("embedding table %q is not one of the model's", name)
			}
			if int64(d) != dim {
				return fmt.Errorf("embedding table %q has dimension %d, the model %d", name, dim, d)
			}
		}
	}
	return nil
}

func intsToInt64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}

func sameShape(a, b []int) bool {
	prod := func(s []int) int {
		p := 1
		for _, d := range s {
			p *= d
		}
		return p
	}
	// A flat record fits a model whose input has the same number of values.
	return prod(a) == prod(b)
}

// Run launches the job and blocks until it ends; the returned summary is
// also written to the output directory. A cancelled ctx stops the job.
func (m *Master) Run(ctx context.Context) (*Summary, error) {
	start := m.now()
	gs, lis, err := m.serve()
	if err != nil {
		return nil, err
	}
	defer gs.Stop()

	var runErr error
	if m.cfg.Mode == ModePredict {
		pw, err := newPredictionWriter(m.cfg.PredictionOutputs, m.predRecords, m.spec.NumClasses)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.pred = pw
		m.mu.Unlock()
	}
	runErr = m.run(ctx, lis.Addr().String())

	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	modelPath, version, modelErr := "", int64(0), error(nil)
	switch {
	case runErr == nil && m.cfg.training():
		modelPath, version, modelErr = m.saveModel(stopCtx)
		if modelErr != nil {
			runErr = fmt.Errorf("save model: %w", modelErr)
		}
	case !m.cfg.training():
		version = m.initVersion
	}
	if m.pred != nil {
		m.mu.Lock()
		pw := m.pred
		m.mu.Unlock()
		if runErr == nil {
			if err := pw.commit(); err != nil {
				runErr = fmt.Errorf("write predictions: %w", err)
			}
		} else {
			pw.abort()
		}
	}
	m.mu.Lock()
	m.endLocked(runErr)
	m.mu.Unlock()
	if runErr == nil {
		m.awaitWorkersExit(5 * time.Second)
	}
	if err := m.backend.Close(stopCtx); err != nil {
		m.log.Warn("stopping instances", "err", err)
	}
	m.drainEvents()

	m.mu.Lock()
	s := m.buildSummary(runErr, m.now().Sub(start))
	s.ModelPath, s.ModelVersion = modelPath, version
	if m.pred != nil && runErr == nil {
		s.Predictions = &PredictionSummary{Path: m.cfg.PredictionOutputs, Records: m.pred.total, CorruptRecords: m.pred.corrupt}
	}
	m.mu.Unlock()
	m.notifyEnd(s)
	if _, err := WriteSummary(m.cfg.Output, s); err != nil {
		return s, errors.Join(runErr, err)
	}
	return s, runErr
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

func (m *Master) serve() (*grpc.Server, net.Listener, error) {
	lis, err := net.Listen("tcp", m.cfg.ListenAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("master listen on %s: %w", m.cfg.ListenAddr, err)
	}
	// The PS's options: large messages and a keepalive policy for the
	// clients' pings.
	gs := grpc.NewServer(ps.ServerOptions()...)
	masterpb.RegisterMasterServer(gs, m)
	go func() {
		if err := gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			m.log.Error("master gRPC server", "err", err)
		}
	}()
	return gs, lis, nil
}

func (m *Master) run(ctx context.Context, listenAddr string) error {
	m.mu.Lock()
	m.masterAddr = m.cfg.AdvertiseAddr
	if m.masterAddr == "" {
		m.masterAddr = listenAddr
	}
	for i := 0; i < m.cfg.NumPS; i++ {
		addr, err := m.backend.PSAddress(i)
		if err != nil {
			m.mu.Unlock()
			return fmt.Errorf("address of PS %d: %w", i, err)
		}
		m.psAddrs = append(m.psAddrs, addr.Dial)
		m.psListen = append(m.psListen, addr.Listen)
	}
	m.mu.Unlock()

	m.log.Info("job starting", "job", m.cfg.JobName, "mode", m.summary.Mode, "model", m.spec.Name, "optimizer", m.optimizer,
		"training_records", m.trainRecords, "validation_records", m.evalRecords, "prediction_records", m.predRecords,
		"evaluation_steps", m.cfg.EvaluationSteps,
		"epochs", m.cfg.NumEpochs, "workers", m.cfg.NumWorkers, "ps", m.cfg.NumPS, "master", m.masterAddr)
	for i := 0; i < m.cfg.NumPS; i++ {
		if err := m.launchPS(ctx, i); err != nil {
			return err
		}
	}
	for i := 0; i < m.cfg.NumWorkers; i++ {
		if err := m.launchWorker(ctx, i); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.liveSending = true
	m.sendLiveWorkersLocked(false)
	m.mu.Unlock()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var progressC <-chan time.Time
	if m.cfg.ProgressInterval > 0 {
		pt := time.NewTicker(m.cfg.ProgressInterval)
		defer pt.Stop()
		progressC = pt.C
	}
	for {
		select {
		case ev, ok := <-m.backend.Events():
			if !ok {
				return errors.New("cluster backend closed its event stream")
			}
			m.handleEvent(ctx, ev)
		case <-tick.C:
			m.tick(ctx)
		case <-progressC:
			m.logProgress()
		case <-m.done:
			m.mu.Lock()
			err := m.jobErr
			m.mu.Unlock()
			if err == nil {
				m.logProgress()
			}
			return err
		case <-ctx.Done():
			err := fmt.Errorf("job stopped: %w", context.Cause(ctx))
			m.fail(err)
			return err
		}
	}
}

// awaitWorkersExit gives running workers, told DONE by their next request,
// a moment to exit on their own before the backend stops whatever remains
// (pending pods never ran: nothing to wait for).
func (m *Master) awaitWorkersExit(limit time.Duration) {
	timeout := time.After(limit)
	for {
		m.mu.Lock()
		n := m.runningWorkersLocked()
		m.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case ev, ok := <-m.backend.Events():
			if !ok {
				return
			}
			if ev.Role == cluster.Worker && ev.Phase == cluster.Exited {
				m.mu.Lock()
				delete(m.workers, ev.ID)
				m.mu.Unlock()
			}
		case <-timeout:
			return
		}
	}
}

// drainEvents consumes what the backend reports while it stops everything,
// so the counts in the summary are complete.
func (m *Master) drainEvents() {
	for ev := range m.backend.Events() {
		if ev.Phase == cluster.Exited {
			m.log.Debug("instance ended", "instance", cluster.InstanceName(ev.Role, ev.ID), "reason", ev.Reason)
		}
	}
}

func (m *Master) launchPS(ctx context.Context, index int) error {
	m.mu.Lock()
	id := m.nextPSID
	m.nextPSID++
	spec := cluster.InstanceSpec{
		Role:  cluster.PS,
		ID:    id,
		Index: index,
		Args: []string{
			"--ps_id=" + strconv.Itoa(index),
			"--num_ps_pods=" + strconv.Itoa(m.cfg.NumPS),
			"--addr=" + m.psListen[index],
			"--optimizer=" + m.optimizer,
			"--master_addr=" + m.masterAddr,
		},
	}
	if !m.cfg.UseAsync {
		live := m.runningWorkersLocked()
		if m.nextWorkerID == 0 {
			live = m.cfg.NumWorkers // the first PS start before the workers
		}
		spec.Args = append(spec.Args, "--use_async=false",
			"--grads_to_wait="+strconv.Itoa(m.cfg.GradsToWait),
			"--sync_version_tolerance="+strconv.FormatInt(m.cfg.SyncVersionTolerance, 10),
			"--live_workers="+strconv.Itoa(live))
	} else if m.cfg.LRStalenessModulation {
		spec.Args = append(spec.Args, "--lr_staleness_modulation")
	}
	if m.cfg.MetricsPort > 0 {
		host, _, _ := net.SplitHostPort(m.psListen[index])
		spec.Args = append(spec.Args, "--metrics_addr="+net.JoinHostPort(host, strconv.Itoa(m.cfg.MetricsPort+1+index)))
	}
	for _, f := range []struct{ flag, value string }{
		{"checkpoint_dir", m.cfg.CheckpointDir},
		{"checkpoint_steps", strconv.FormatInt(m.cfg.CheckpointSteps, 10)},
		{"keep_checkpoint_max", strconv.Itoa(m.cfg.KeepCheckpointMax)},
		{"checkpoint_dir_for_init", m.cfg.CheckpointDirForInit},
	} {
		if f.value != "" && f.value != "0" {
			spec.Args = append(spec.Args, "--"+f.flag+"="+f.value)
		}
	}
	now := m.now()
	m.ps[index] = &instance{id: id, index: index, launched: now, lastSeen: now}
	m.summary.PS.Launched++
	m.mu.Unlock()
	if err := m.backend.Launch(ctx, spec); err != nil {
		return fmt.Errorf("launch %s: %w", spec.Name(), err)
	}
	return nil
}

func (m *Master) launchWorker(ctx context.Context, index int) error {
	m.mu.Lock()
	id := m.nextWorkerID
	m.nextWorkerID++
	spec := cluster.InstanceSpec{
		Role:  cluster.Worker,
		ID:    id,
		Index: index,
		Args: append([]string{
			"--worker_id=" + strconv.Itoa(id),
			"--master_addr=" + m.masterAddr,
			"--ps_addrs=" + strings.Join(m.psAddrs, ","),
			"--model_def=" + m.cfg.ModelDef,
			"--minibatch_size=" + strconv.Itoa(m.cfg.MinibatchSize),
			"--seed=" + strconv.FormatInt(m.cfg.Seed, 10),
		}, m.cfg.WorkerArgs...),
		// One BLAS thread per worker: the job's parallelism is its workers.
		Env: []string{"OPENBLAS_NUM_THREADS=1"},
	}
	now := m.now()
	m.workers[id] = &instance{id: id, index: index, launched: now, lastSeen: now}
	m.summary.Workers.Launched++
	m.mu.Unlock()
	if err := m.backend.Launch(ctx, spec); err != nil {
		m.mu.Lock()
		delete(m.workers, id)
		m.mu.Unlock()
		return fmt.Errorf("launch %s: %w", spec.Name(), err)
	}
	m.mu.Lock()
	m.sendLiveWorkersLocked(false)
	m.mu.Unlock()
	return nil
}

// liveWorkersTimeout bounds one SetLiveWorkers round (retries of an
// unavailable PS included); a PS relaunched meanwhile gets the count from
// its --live_workers flag.
const liveWorkersTimeout = 30 * time.Second

// sendLiveWorkersLocked tells every PS, in the background and in call
// order, how many workers are alive now (sync SGD only), so that no
// version waits for a gone worker; flush also makes them apply what they
// have accumulated (end of training). Called on every worker launch and
// exit; each call carries a higher generation, so that a PS never takes an
// older count over a newer one. Caller holds m.mu.
func (m *Master) sendLiveWorkersLocked(flush bool) {
	if m.cfg.UseAsync || !m.liveSending {
		return
	}
	m.liveGen++
	u := liveUpdate{live: m.runningWorkersLocked(), gen: m.liveGen, flush: flush, addrs: slices.Clone(m.psAddrs)}
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	m.livePending = append(m.livePending, u)
	if !m.liveRunning {
		m.liveRunning = true
		go m.drainLiveUpdates()
	}
}

// runningWorkersLocked counts the workers that run (a pending pod is not a
// worker a sync version may wait for). Caller holds m.mu.
func (m *Master) runningWorkersLocked() int {
	n := 0
	for _, w := range m.workers {
		if w.running {
			n++
		}
	}
	return n
}

type liveUpdate struct {
	live  int
	gen   int64
	flush bool
	addrs []string
}

func (m *Master) drainLiveUpdates() {
	for {
		m.liveMu.Lock()
		if len(m.livePending) == 0 {
			m.liveRunning = false
			m.liveMu.Unlock()
			return
		}
		u := m.livePending[0]
		m.livePending = m.livePending[1:]
		m.liveMu.Unlock()
		if err := m.setLiveWorkers(context.Background(), u.addrs, u.live, u.gen, u.flush); err != nil {
			m.log.Warn("telling the PS the live workers", "live", u.live, "flush", u.flush, "err", err)
		}
	}
}

func (m *Master) setLiveWorkers(ctx context.Context, addrs []string, live int, gen int64, flush bool) error {
	ctx, cancel := context.WithTimeout(ctx, liveWorkersTimeout)
	defer cancel()
	c, err := client.Dial(ctx, addrs)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.SetLiveWorkers(ctx, live, gen, flush)
}
