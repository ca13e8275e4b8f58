package master

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
	"elasticdl/internal/ps/client"
	"elasticdl/internal/roleflags"
	"elasticdl/internal/tlsid"
)

// step feeds one event to the core and carries out what it decided: under
// the lock what must follow the core's order and cannot block (notices,
// live-worker counts queued, prediction rows written), then, without the
// lock, the backend calls (launch, stop), which can take a while. With a
// state store, the step is durable before it is answered or acted on
// (group commits: one write covers every step before it), except a step
// nothing depends on (a heartbeat, a tick that decided nothing), which is
// persisted lazily.
func (m *Master) step(ctx context.Context, ev job.Event) (job.Reply, error) {
	replies, errs := m.steps(ctx, []job.Event{ev})
	return replies[0], errs[0]
}

// steps is step for several events at once, with one wait for their
// persistence: the event loop hands over every backend event that is
// already queued (a burst of exits relaunches without a write per exit).
func (m *Master) steps(ctx context.Context, evs []job.Event) ([]job.Reply, []error) {
	replies, errs := make([]job.Reply, len(evs)), make([]error, len(evs))
	var todo []job.Ready
	urgent := false
	m.mu.Lock()
	now := m.now()
	for i, ev := range evs {
		replies[i], errs[i] = m.job.Step(now, ev)
		decided := false
		for {
			rd := m.job.Ready()
			if isEmpty(rd) {
				break
			}
			decided = decided || decides(rd)
			if ferr := m.applyLocked(rd); ferr != nil {
				m.job.Step(now, job.Fail{Err: ferr})
			}
			todo = append(todo, rd)
		}
		urgent = urgent || !lazy(ev) || decided
	}
	m.failover.seq++
	seq := m.failover.seq
	m.mu.Unlock()
	if m.failover.persist != nil {
		m.failover.persist.changed(seq, urgent)
		if urgent {
			if perr := m.failover.persist.wait(seq); perr != nil {
				for i := range errs {
					replies[i], errs[i] = job.Reply{}, perr
				}
				return replies, errs
			}
		}
	}
	for _, rd := range todo {
		m.applyInstances(m.jobContext(ctx), rd)
	}
	return replies, errs
}

// jobContext is the context for what a request's answer makes the master
// do to its instances (stop a worker let go by the report it sends,
// launch a replacement): that is the job's work, and must not end when
// the request does — a worker let go hangs up at once.
func (m *Master) jobContext(request context.Context) context.Context {
	if m.runCtx != nil {
		return m.runCtx
	}
	return context.WithoutCancel(request)
}

// lazy events change nothing a restarted master would miss: it restarts
// liveness clocks itself.
func lazy(ev job.Event) bool {
	switch ev.(type) {
	case job.Heartbeat, job.Tick, job.RingStatus:
		return true
	}
	return false
}

// decides reports whether rd asks for more than its occurrences: those
// are a record for the dashboard, no reason to persist a lazy step now.
func decides(rd job.Ready) bool {
	rd.Occurred = nil
	return !isEmpty(rd)
}

func isEmpty(rd job.Ready) bool {
	return len(rd.Launch) == 0 && len(rd.Stop) == 0 && len(rd.LiveWorkers) == 0 && len(rd.Notices) == 0 &&
		len(rd.PredictionRows) == 0 && rd.Save == nil && !rd.Ended && len(rd.RingRecovered) == 0 && rd.CheckApplied == nil &&
		len(rd.Resized) == 0 && rd.Reshard == nil && len(rd.Resharded) == 0 && len(rd.Losses) == 0 && len(rd.Evaluated) == 0 &&
		len(rd.Occurred) == 0
}

// applyLocked carries out the part of rd that must happen in the core's
// order; an error is the job's (a prediction file that cannot be written).
// Caller holds m.mu.
func (m *Master) applyLocked(rd job.Ready) error {
	if m.output.tb != nil {
		m.output.tb.addReady(m.now(), rd)
	}
	for _, n := range rd.Notices {
		m.notify.Notify(n.Warning, n.Reason, n.Message)
	}
	m.observe.history.add(rd.Occurred)
	for _, u := range rd.LiveWorkers {
		addrs, _ := m.psAddrs()
		m.live.send(liveUpdate{LiveWorkers: u, addrs: addrs})
	}
	if rd.Save != nil {
		m.output.save = rd.Save
	}
	if rd.CheckApplied != nil && m.runCtx != nil {
		go m.checkApplied(m.runCtx, *rd.CheckApplied)
	}
	if rd.Reshard != nil && m.runCtx != nil {
		go m.reshardPS(m.runCtx, *rd.Reshard)
	}
	if m.observe.metrics.ringRecovery != nil {
		for _, d := range rd.RingRecovered {
			m.observe.metrics.ringRecovery.Observe(d.Seconds())
		}
	}
	if m.observe.metrics.resizeTime != nil {
		for _, r := range rd.Resized {
			m.observe.metrics.resizeTime.WithLabelValues(r.Cause).Observe(r.Duration.Seconds())
		}
	}
	if m.observe.metrics.reshardTime != nil {
		for _, r := range rd.Resharded {
			m.observe.metrics.reshardTime.WithLabelValues("total").Observe(r.Seconds)
			m.observe.metrics.reshardTime.WithLabelValues("paused").Observe(r.PausedSeconds)
		}
	}
	if rd.Ended {
		select {
		case <-m.ended: // a job that failed while saving ends once
		default:
			close(m.ended)
		}
	}
	for _, r := range rd.PredictionRows {
		if m.output.pred == nil {
			break // a core test without a file
		}
		if err := m.output.pred.write(r); err != nil {
			return fmt.Errorf("write predictions: %w", err)
		}
	}
	return nil
}

// applyInstances stops and launches instances; a launch that fails is the
// core's to judge.
func (m *Master) applyInstances(ctx context.Context, rd job.Ready) {
	for _, s := range rd.Stop {
		if err := m.backend.Stop(ctx, s.Role, s.ID); err != nil {
			m.log.Warn("stop instance", "instance", cluster.InstanceName(s.Role, s.ID), "err", err)
		}
	}
	for i := 0; i < len(rd.Launch); {
		l := rd.Launch[i]
		if l.Role == cluster.PS {
			if err := m.resolvePS(l.Index + 1); err != nil {
				m.step(ctx, job.LaunchFailed{Launch: l, Err: err})
				return
			}
			if !m.launch(ctx, []job.Launch{l}) {
				return
			}
			i++
			continue
		}
		j := i + 1
		for j < len(rd.Launch) && rd.Launch[j].Role != cluster.PS {
			j++
		}
		if !m.launch(ctx, rd.Launch[i:j]) {
			return
		}
		i = j
	}
}

// batchLauncher is a backend that launches several instances at once: the
// Kubernetes backend creates a job's pods in parallel, within its client's
// rate limit.
type batchLauncher interface {
	LaunchBatch(ctx context.Context, specs []cluster.InstanceSpec) []error
}

// launch launches ls (all workers, or one PS) and says whether all were
// launched; the first that failed, in order, is the core's to judge.
func (m *Master) launch(ctx context.Context, ls []job.Launch) bool {
	specs := make([]cluster.InstanceSpec, len(ls))
	for i, l := range ls {
		specs[i] = m.instanceSpec(l)
		b, err := m.routes.tls.bundle(l.Role, l.ID, m.now())
		if err != nil {
			m.step(ctx, job.LaunchFailed{Launch: l, Err: err})
			return false
		}
		specs[i].TLS = b
	}
	if bl, ok := m.backend.(batchLauncher); ok && len(specs) > 1 {
		errs := bl.LaunchBatch(ctx, specs)
		first := slices.IndexFunc(errs, func(err error) bool { return err != nil })
		if first < 0 {
			return true
		}
		// The core judges the first failure; the others of the batch were
		// tried too and are logged, not dropped.
		for i := first + 1; i < len(errs); i++ {
			if errs[i] != nil {
				m.log.Warn("launch failed in the same batch", "instance", specs[i].Name(), "err", errs[i])
			}
		}
		m.step(ctx, job.LaunchFailed{Launch: ls[first], Err: fmt.Errorf("launch %s: %w", specs[first].Name(), errs[first])})
		return false
	}
	for i, spec := range specs {
		if err := m.backend.Launch(ctx, spec); err != nil {
			m.step(ctx, job.LaunchFailed{Launch: ls[i], Err: fmt.Errorf("launch %s: %w", spec.Name(), err)})
			return false
		}
	}
	return true
}

// instanceSpec is what the backend launches for l: the role's flags.
func (m *Master) instanceSpec(l job.Launch) cluster.InstanceSpec {
	if l.Role == cluster.PS {
		return cluster.InstanceSpec{Role: cluster.PS, ID: l.ID, Index: l.Index, Args: m.psFlags(l).Args()}
	}
	w := roleflags.DefaultWorker()
	w.WorkerID, w.MasterAddr = l.ID, m.routes.master
	w.PSAddrs, _ = m.psAddrs()
	w.ModelDef, w.ModelParams, w.MinibatchSize, w.Seed = m.cfg.ModelDef, m.cfg.ModelParams, m.cfg.MinibatchSize, m.cfg.Seed
	w.UseAsync, w.OverlapPush, w.TransportDType, w.PSTransport = m.cfg.UseAsync, m.cfg.OverlapPush, m.cfg.TransportDType, m.cfg.PSTransport
	w.PreloadData, w.MasterTimeout = m.cfg.dataSources(), m.cfg.WorkerMasterTimeout
	if m.cfg.ModelledSecondsPerRecord > 0 {
		w.ModelledSecondsPerRecord, w.ModelledCPUs = m.cfg.ModelledSecondsPerRecord, 1
		if req := m.cfg.RequestedCPU.Worker; req > 0 {
			w.ModelledCPUs = req
		}
	}
	if m.cfg.allReduce() {
		w.DistributionStrategy, w.CollectiveAddr, w.Optimizer = roleflags.StrategyAllReduce, m.cfg.CollectiveAddr, m.optimizer
		// A step means the same batch at any world size (docs/design.md).
		w.GlobalBatchSize = m.cfg.MinibatchSize * m.cfg.NumWorkers
		w.CheckpointDir, w.CheckpointSteps, w.KeepCheckpointMax = m.cfg.CheckpointDir, m.cfg.CheckpointSteps, m.cfg.KeepCheckpointMax
	}
	if m.cfg.external() {
		argv, _ := roleflags.SplitCommand(m.cfg.WorkerCommand) // checked by Validate
		return cluster.InstanceSpec{
			Role:       cluster.Worker,
			ID:         l.ID,
			Index:      l.Index,
			AvoidNodes: l.AvoidNodes,
			Command:    argv,
			// One thread each (torch, OpenMP, BLAS): the job's parallelism
			// is its workers.
			Env: append(append(w.CommandEnv(m.cfg.JobName, m.commandOptimizer(), m.cfg.UseAsync),
				"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "MKL_NUM_THREADS=1", "PYTHONUNBUFFERED=1"), m.sql.workerEnv()...),
		}
	}
	return cluster.InstanceSpec{
		Role:       cluster.Worker,
		ID:         l.ID,
		Index:      l.Index,
		AvoidNodes: l.AvoidNodes,
		Args:       append(w.Args(), m.cfg.WorkerArgs...),
		// One BLAS thread per worker, and one Go processor: the job's
		// parallelism is its workers, whose compute is one thread. With
		// more, idle processors spin for work at every wake-up (a push's
		// answer, a task), which on a shared host costs its neighbours:
		// 2 mlp workers on 2 cores trained 6-15% faster with one.
		Env: append([]string{"OPENBLAS_NUM_THREADS=1", "GOMAXPROCS=1"}, m.sql.workerEnv()...),
	}
}

// commandOptimizer is the optimizer a worker program is told: the job's;
// with AllReduce only the one --optimizer names (the program's own may
// stand in for it).
func (m *Master) commandOptimizer() string {
	if m.cfg.allReduce() {
		return m.cfg.Optimizer
	}
	return m.optimizer
}

// psFlags are the flags of PS shard l.Index.
func (m *Master) psFlags(l job.Launch) roleflags.PS {
	p := roleflags.DefaultPS()
	p.PSID, p.NumPS, p.Addr = l.Index, l.Shards, m.psListen(l.Index)
	if p.NumPS == 0 {
		p.NumPS = m.cfg.NumPS
	}
	p.Optimizer, p.MasterAddr = m.optimizer, m.routes.master
	p.UseAsync, p.LRStalenessModulation = m.cfg.UseAsync, m.cfg.LRStalenessModulation
	if !m.cfg.UseAsync {
		p.GradsToWait, p.SyncVersionTolerance, p.LiveWorkers = m.cfg.GradsToWait, m.cfg.SyncVersionTolerance, l.LiveWorkers
	}
	if m.cfg.MetricsPort > 0 {
		host, _, _ := net.SplitHostPort(p.Addr)
		p.MetricsAddr = net.JoinHostPort(host, strconv.Itoa(m.cfg.MetricsPort+1+l.Index))
	}
	p.CheckpointDir, p.CheckpointSteps = m.cfg.CheckpointDir, m.cfg.CheckpointSteps
	p.KeepCheckpointMax, p.CheckpointDirForInit = m.cfg.KeepCheckpointMax, m.cfg.CheckpointDirForInit
	p.Run = m.cfg.RunID
	p.ModelledSecondsPerPush = m.cfg.ModelledPSSecondsPerPush
	// A saved model's job reads ids its tables lack as zeros, as its
	// exports (ONNX, and a PyTorch state_dict) do (docs/design-export.md).
	p.FrozenTables = m.cfg.Mode == ModeEvaluate || m.cfg.Mode == ModePredict
	return p
}

// checkAppliedTimeout bounds one round of asking the PS what they hold
// (retries of a PS being relaunched included); the core asks again.
const checkAppliedTimeout = time.Minute

// checkApplied asks every PS shard which minibatches it holds and steps
// the answer.
func (m *Master) checkApplied(ctx context.Context, c job.CheckApplied) {
	found := job.AppliedFound{Gen: c.Gen, Reshard: c.Reshard}
	start := time.Now()
	addrs, _ := m.psAddrs()
	found.Shards, found.Err = appliedMinibatches(ctx, addrs, c, m.routes.tls.Creds())
	if ctx.Err() != nil {
		return // the master is stopping
	}
	tasks := 0
	for _, sh := range found.Shards {
		tasks += len(sh.Tasks)
	}
	m.log.Info("asked the PS which minibatches they hold", "took", time.Since(start).Round(time.Microsecond), "tasks", tasks, "err", found.Err)
	if found.Err != nil {
		found.Err = fmt.Errorf("ask the PS which minibatches they hold: %w", found.Err)
	}
	m.step(ctx, found)
}

func appliedMinibatches(ctx context.Context, addrs []string, c job.CheckApplied, creds *tlsid.Creds) ([]job.ShardMinibatches, error) {
	ctx, cancel := context.WithTimeout(ctx, checkAppliedTimeout)
	defer cancel()
	cl, err := client.Dial(ctx, addrs, client.WithCreds(creds))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if c.FlushGen > 0 {
		// Sync SGD: a minibatch waiting in an accumulator is not applied.
		if err := cl.SetLiveWorkers(ctx, c.FlushLive, c.FlushGen, true); err != nil {
			return nil, err
		}
	}
	all, err := cl.AppliedAll(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]job.ShardMinibatches, len(all))
	for i, a := range all {
		out[i] = job.ShardMinibatches{Tasks: a.Tasks, Unknown: a.Unknown}
	}
	return out, nil
}

// liveWorkersTimeout bounds one SetLiveWorkers round (retries of an
// unavailable PS included); a PS relaunched meanwhile gets the count from
// its --live_workers flag.
const liveWorkersTimeout = 30 * time.Second

type liveUpdate struct {
	job.LiveWorkers
	addrs []string
}

// liveSender tells the PS the live-worker counts in the background, in the
// order the core decided them (each carries a higher generation anyway).
type liveSender struct {
	log     *slog.Logger
	creds   *tlsid.Creds
	mu      sync.Mutex
	pending []liveUpdate
	running bool
}

func newLiveSender(log *slog.Logger, creds *tlsid.Creds) *liveSender {
	return &liveSender{log: log, creds: creds}
}

func (s *liveSender) send(u liveUpdate) {
	u.addrs = slices.Clone(u.addrs)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, u)
	if !s.running {
		s.running = true
		go s.drain()
	}
}

func (s *liveSender) drain() {
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		u := s.pending[0]
		s.pending = s.pending[1:]
		s.mu.Unlock()
		if err := setLiveWorkers(context.Background(), u.addrs, u.Live, u.Gen, u.Flush, s.creds); err != nil {
			s.log.Warn("telling the PS the live workers", "live", u.Live, "flush", u.Flush, "err", err)
		}
	}
}

func setLiveWorkers(ctx context.Context, addrs []string, live int, gen int64, flush bool, creds *tlsid.Creds) error {
	ctx, cancel := context.WithTimeout(ctx, liveWorkersTimeout)
	defer cancel()
	c, err := client.Dial(ctx, addrs, client.WithCreds(creds))
	if err != nil {
		return err
	}
	defer c.Close()
	return c.SetLiveWorkers(ctx, live, gen, flush)
}
