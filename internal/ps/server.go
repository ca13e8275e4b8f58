package ps

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps/direct"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/ps/shard"
	"elasticdl/internal/roleflags"
	"elasticdl/internal/rpc"
	"elasticdl/internal/tlsid"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// gracePeriod is how long Run lets in-flight RPCs finish after its context
// is cancelled before cutting them off.
const gracePeriod = 5 * time.Second

// Config configures one PS shard.
type Config struct {
	// Index is this shard's index in [0, NumPS).
	Index, NumPS int
	// Optimizer applies pushed gradients. Required.
	Optimizer optimizer.Optimizer
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Registry, when set, receives the server's Prometheus metrics,
	// labelled with the shard index. Nil disables metrics.
	Registry *prometheus.Registry

	// CheckpointDir, when set, is restored from at start (its newest
	// complete version, re-sharded if written by another number of PS)
	// and receives a checkpoint every CheckpointSteps versions (0: none).
	CheckpointDir   string
	CheckpointSteps int64
	// KeepCheckpointMax is how many complete versions to keep; 0 keeps
	// all.
	KeepCheckpointMax int
	// CheckpointDirForInit is restored from when CheckpointDir has no
	// complete version (a warm start); it must hold one.
	CheckpointDirForInit string
	// Run names the job run the shard serves. A checkpoint's applied
	// minibatches (named by the run's task IDs) are restored only into the
	// run that wrote them: a new job on the same CheckpointDir, or a warm
	// start, holds none.
	Run string

	// Sync selects sync SGD (--use_async=false; see sync.go): the average
	// of GradsToWait pushes (capped by the live workers) is applied as one
	// update, and a push more than SyncVersionTolerance versions stale is
	// rejected. The zero Config is async.
	Sync                 bool
	GradsToWait          int
	SyncVersionTolerance int64
	// LiveWorkers is the initial live-worker count (sync); < 0: unknown
	// until the master's first SetLiveWorkers.
	LiveWorkers int
	// LRStalenessModulation (async) scales the learning rate of a push by
	// 1/max(1, staleness), staleness being the versions applied since the
	// one the gradients were computed on.
	LRStalenessModulation bool
	// FrozenTables (a predict or evaluate job's PS) answers a pull of an
	// id its embedding tables lack with a zeros row and creates nothing:
	// the row an exported model gives an unseen id (see package export),
	// and no table growth from the ids a served model is asked about.
	FrozenTables bool
	// ModelledPush > 0 (experiments) makes every push take this long,
	// one at a time (see modelled.go).
	ModelledPush time.Duration

	// Creds, when set, make the shard's port (direct connections and
	// gRPC) and its local socket mutual TLS; nil: plaintext.
	Creds *tlsid.Creds
}

// Server is one PS shard. It implements pserverpb.PserverServer.
type Server struct {
	pserverpb.UnimplementedPserverServer

	index int
	// shards is the number of shards of the current layout (it changes
	// when the job re-shards, see reshard.go).
	shards       atomic.Int32
	opt          optimizer.Optimizer
	rule         optimizer.RowOptimizer // opt's row-wise form, for embedding tables; nil if none
	log          *slog.Logger
	metrics      *metrics     // nil when disabled
	saver        *saver       // nil when checkpointing is off
	lrModulation bool         // async: lr scaled by 1/staleness
	frozenTables bool         // pulls of absent ids read zeros (Config.FrozenTables)
	modelled     modelledPush // Config.ModelledPush
	creds        *tlsid.Creds // dials the shards a re-shard gathers from

	// sync is nil in async mode; syncMu guards it and, in sync mode,
	// serializes every version bump.
	sync   *syncState
	syncMu sync.Mutex

	// table is nil until the first PushModel; after that it is never
	// replaced (a relaunched PS is a new Server), so readers need no lock
	// to reach it.
	table atomic.Pointer[table]

	// restored is the checkpoint this process started from (set before
	// serving, read-only after); restored.version is -1 when none.
	restored restoredFrom

	// applied is what the parameters hold, by minibatch. cut makes a
	// checkpoint of async pushes a consistent cut: a push holds it shared
	// from its claim to its commit, a snapshot holds it alone.
	applied *appliedSet
	cut     sync.RWMutex
	// reshard is the layout number and a staged re-shard (reshard.go).
	reshard reshardState
	// run is Config.Run; appliedUnknown is set once a worker's copy of
	// the parameters re-initialized the shard (what they hold is unknown).
	run            string
	appliedUnknown atomic.Bool
}

// table is the shard's parameters; its map and slices are immutable after
// construction, the values inside each param are guarded by param.mu.
type table struct {
	params  map[string]*param
	ordered []*param // by name, so responses are deterministic
	// emb holds the sparse embedding tables by name; nil when none.
	emb     map[string]*embTable
	version atomic.Int64
}

type param struct {
	name  string
	shape []int
	mu    sync.Mutex
	data  []float32
	grad  []float32 // decode buffer for pushes, reused under mu
}

// numShards is the number of shards of the current layout.
func (s *Server) numShards() int { return int(s.shards.Load()) }

// NewServer validates cfg and returns an uninitialized shard.
func NewServer(cfg Config) (*Server, error) {
	if cfg.NumPS < 1 || cfg.Index < 0 || cfg.Index >= cfg.NumPS {
		return nil, fmt.Errorf("ps: shard index %d out of range for %d shards", cfg.Index, cfg.NumPS)
	}
	if cfg.Optimizer == nil {
		return nil, errors.New("ps: no optimizer configured")
	}
	if err := roleflags.CheckCheckpointFlags(cfg.CheckpointDir, cfg.CheckpointSteps, cfg.KeepCheckpointMax); err != nil {
		return nil, fmt.Errorf("ps: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		index:        cfg.Index,
		opt:          cfg.Optimizer,
		log:          log.With("ps", cfg.Index),
		applied:      newAppliedSet(),
		run:          cfg.Run,
		frozenTables: cfg.FrozenTables,
		modelled:     modelledPush{d: cfg.ModelledPush},
		creds:        cfg.Creds,
	}
	s.restored.version = -1
	s.shards.Store(int32(cfg.NumPS))
	s.rule, _ = optimizer.AsRowOptimizer(cfg.Optimizer)
	if cfg.Sync {
		if err := roleflags.CheckSyncFlags(cfg.GradsToWait, cfg.SyncVersionTolerance); err != nil {
			return nil, fmt.Errorf("ps: %w", err)
		}
	}
	if !cfg.Sync {
		s.lrModulation = cfg.LRStalenessModulation
	} else {
		s.sync = &syncState{
			gradsToWait: cfg.GradsToWait,
			tolerance:   cfg.SyncVersionTolerance,
			live:        max(cfg.LiveWorkers, -1),
			acc:         make(map[*param][]float32),
			sparse:      make(map[*embTable]*sparseAcc),
		}
	}
	if cfg.Registry != nil {
		m, err := newMetrics(cfg.Registry, cfg.Index, s.Version)
		if err != nil {
			return nil, fmt.Errorf("ps shard %d: register metrics: %w", cfg.Index, err)
		}
		s.metrics = m
	}
	if cfg.CheckpointSteps > 0 {
		s.saver = newSaver(s, cfg.CheckpointDir, cfg.CheckpointSteps, cfg.KeepCheckpointMax)
	}
	if err := s.restore(cfg); err != nil {
		s.metrics.unregister()
		return nil, fmt.Errorf("ps shard %d: restore: %w", cfg.Index, err)
	}
	if s.saver != nil {
		s.saver.start()
	}
	return s, nil
}

var _ pserverpb.PserverServer = (*Server)(nil)

// Close writes a final checkpoint when checkpointing is on and the
// version moved since the last one, waits for the checkpoint writer, and
// unregisters the server's metrics, so that a new Server can use the same
// registry (a shard restarted in-process). The server keeps serving, but
// checkpoints no more.
func (s *Server) Close() {
	if s.saver != nil {
		s.saver.close(s.finalSnapshot)
	}
	s.metrics.unregister()
}

// Register adds the Pserver service to g.
func (s *Server) Register(g *grpc.Server) { pserverpb.RegisterPserverServer(g, s) }

// Version is the shard's model version: the version of the initial model
// plus the number of gradient pushes applied since; -1 before the shard is
// initialized.
func (s *Server) Version() int64 {
	t := s.table.Load()
	if t == nil {
		return -1
	}
	return t.version.Load()
}

// Parameters returns a copy of the shard's parameters by name, or nil when
// uninitialized. Each tensor is copied under its own lock, so the result is
// consistent per parameter only (tests).
func (s *Server) Parameters() map[string][]float32 {
	t := s.table.Load()
	if t == nil {
		return nil
	}
	out := make(map[string][]float32, len(t.ordered))
	for _, p := range t.ordered {
		p.mu.Lock()
		out[p.name] = slices.Clone(p.data)
		p.mu.Unlock()
	}
	return out
}

// PushModel initializes the shard from the request; once initialized,
// further pushes are answered accepted=false and change nothing.
func (s *Server) PushModel(_ context.Context, req *pserverpb.Model) (*pserverpb.PushModelResponse, error) {
	if t := s.table.Load(); t != nil {
		s.metrics.pushModel(false)
		return &pserverpb.PushModelResponse{Accepted: false, Version: t.version.Load()}, nil
	}
	t, err := s.newTable(req.GetDenseParameters(), s.numShards())
	if err != nil {
		return nil, err
	}
	if t.emb, err = s.newEmbTables(req.GetEmbeddingTableInfos()); err != nil {
		return nil, err
	}
	t.version.Store(req.GetVersion())
	// Decoding happened outside any lock; the CAS decides which of several
	// concurrent first pushes wins.
	if !s.table.CompareAndSwap(nil, t) {
		s.metrics.pushModel(false)
		return &pserverpb.PushModelResponse{Accepted: false, Version: s.Version()}, nil
	}
	if req.GetReinit() {
		s.appliedUnknown.Store(true)
		s.log.Warn("re-initialized from a worker's copy of the parameters: which minibatches they hold is not known")
	}
	s.metrics.pushModel(true)
	s.log.Info("shard initialized", "params", len(t.ordered), "embedding_tables", len(t.emb), "version", req.GetVersion())
	return &pserverpb.PushModelResponse{Accepted: true, Version: req.GetVersion()}, nil
}

func (s *Server) newTable(tensors []*pserverpb.Tensor, numShards int) (*table, error) {
	t := &table{params: make(map[string]*param, len(tensors))}
	for _, pb := range tensors {
		if pb.GetName() == "" {
			return nil, status.Error(codes.InvalidArgument, "push model: tensor with empty name")
		}
		if _, dup := t.params[pb.GetName()]; dup {
			return nil, status.Errorf(codes.InvalidArgument, "push model: tensor %q given twice", pb.GetName())
		}
		// A misrouted parameter means the worker disagrees about NumPS;
		// accepting it would silently split the model differently.
		if got := shard.Of(pb.GetName(), numShards); got != s.index {
			return nil, status.Errorf(codes.InvalidArgument, "push model: tensor %q belongs to shard %d of %d, this is shard %d", pb.GetName(), got, numShards, s.index)
		}
		shape, data, err := wire.DecodeTensor(pb)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "push model: %v", err)
		}
		p := &param{name: pb.GetName(), shape: shape, data: data}
		t.params[p.name] = p
		t.ordered = append(t.ordered, p)
	}
	slices.SortFunc(t.ordered, func(a, b *param) int { return cmp.Compare(a.name, b.name) })
	return t, nil
}

// PullDenseParameters returns every parameter, or none when the caller
// already holds the current version; initialized=false (not an error) while
// the shard waits for its first PushModel.
func (s *Server) PullDenseParameters(_ context.Context, req *pserverpb.PullDenseParametersRequest) (*pserverpb.PullDenseParametersResponse, error) {
	return s.pullDense(req, nil)
}

// pullDense is PullDenseParameters; the parameters are encoded into
// *block when block is not nil (see table.encode).
func (s *Server) pullDense(req *pserverpb.PullDenseParametersRequest, block *[]byte) (*pserverpb.PullDenseParametersResponse, error) {
	if err := checkDType(req.GetDtype()); err != nil {
		return nil, err
	}
	t := s.table.Load()
	if t == nil {
		s.metrics.pull(pullUninitialized)
		return &pserverpb.PullDenseParametersResponse{Initialized: false, Version: -1}, nil
	}
	// Read the version before copying: the copy may then include newer
	// updates, which only makes the caller re-pull sooner, never miss one.
	v := t.version.Load()
	resp := &pserverpb.PullDenseParametersResponse{Initialized: true, Version: v}
	if req.GetVersion() == v {
		s.metrics.pull(pullCurrent)
		return resp, nil
	}
	resp.DenseParameters = t.encode(req.GetDtype(), block)
	s.metrics.pull(pullFull)
	return resp, nil
}

// checkDType refuses an element type this server cannot send.
func checkDType(d pserverpb.DType) error {
	if err := wire.CheckDType(d); err != nil {
		return status.Errorf(codes.InvalidArgument, "%v (this PS knows FLOAT32 and BFLOAT16)", err)
	}
	return nil
}

// encode copies every parameter into a new message in dtype, each under
// its lock. With block, the contents are slices of *block (grown when too
// small), which the caller reuses once the message is sent; without, they
// are allocated.
func (t *table) encode(dtype pserverpb.DType, block *[]byte) []*pserverpb.Tensor {
	out := make([]*pserverpb.Tensor, len(t.ordered))
	size, _ := wire.ElementSize(dtype) // checked by the callers
	var buf []byte
	if block != nil {
		n := 0
		for _, p := range t.ordered {
			n += size * len(p.data)
		}
		if cap(*block) < n {
			*block = make([]byte, n)
		}
		buf = (*block)[:n]
	}
	for i, p := range t.ordered {
		out[i] = &pserverpb.Tensor{}
		if buf != nil {
			// EncodeTensorAs fills a content with room in place.
			nb := size * len(p.data)
			out[i].Content, buf = buf[:0:nb], buf[nb:]
		}
		p.mu.Lock()
		wire.EncodeTensorAs(out[i], p.name, p.shape, p.data, dtype)
		p.mu.Unlock()
	}
	return out
}

// PushGradients validates every gradient, then applies them all (async
// SGD) and bumps the version. Any invalid gradient rejects the whole push
// with InvalidArgument before anything is applied. With return_parameters
// the answer carries the shard's parameters after the push, so that a
// worker's step costs one round trip (push and pull) instead of two.
func (s *Server) PushGradients(ctx context.Context, req *pserverpb.PushGradientsRequest) (*pserverpb.PushGradientsResponse, error) {
	return s.push(ctx, req, nil)
}

// push is PushGradients; returned parameters are encoded into *block when
// block is not nil (see table.encode).
func (s *Server) push(ctx context.Context, req *pserverpb.PushGradientsRequest, block *[]byte) (*pserverpb.PushGradientsResponse, error) {
	if err := checkDType(req.GetParametersDtype()); err != nil {
		return nil, err
	}
	if err := s.modelled.wait(ctx); err != nil {
		return nil, err
	}
	resp, err := s.pushGradients(ctx, req)
	if err != nil || !req.GetReturnParameters() {
		return resp, err
	}
	// The version was read when the push was answered; the copy may hold
	// later updates too, which only makes the caller's next pull sooner.
	resp.DenseParameters = s.table.Load().encode(req.GetParametersDtype(), block)
	s.metrics.pull(pullFull)
	return resp, nil
}

func (s *Server) pushGradients(_ context.Context, req *pserverpb.PushGradientsRequest) (*pserverpb.PushGradientsResponse, error) {
	t := s.table.Load()
	if t == nil {
		s.metrics.push(pushUninitialized)
		return nil, status.Errorf(codes.FailedPrecondition, "ps shard %d is not initialized: push the model first", s.index)
	}
	targets, err := t.validate(req.GetGradients())
	if err != nil {
		s.metrics.push(pushInvalid)
		return nil, err
	}
	sparse, err := t.validateSparse(req.GetEmbeddingGradients(), s.index, s.numShards())
	if err != nil {
		s.metrics.push(pushInvalid)
		return nil, err
	}
	var key *minibatch
	if k := req.GetMinibatch(); k != nil {
		key = &minibatch{task: k.GetTaskId(), index: k.GetIndex()}
		if len(targets) == 0 && len(sparse) == 0 {
			return s.markApplied(t, *key)
		}
	}
	if s.sync != nil {
		return s.pushSync(t, req, targets, sparse)
	}
	s.cut.RLock()
	if s.table.Load() != t {
		// The shard re-sharded since this push was validated: the client
		// retries against the new layout's table.
		s.cut.RUnlock()
		return nil, status.Errorf(codes.Unavailable, "ps shard %d re-sharded during the push: retry", s.index)
	}
	if key != nil {
		if resp, err := s.claim(t, *key); resp != nil || err != nil {
			s.cut.RUnlock()
			return resp, err
		}
	}
	lrScale := float32(1)
	if s.lrModulation {
		// Staleness as seen now; a concurrent push may still land first.
		if stale := t.version.Load() - req.GetVersion(); stale > 1 {
			lrScale = 1 / float32(stale)
		}
	}
	v, err := s.applyAsync(t, targets, req.GetGradients(), sparse, lrScale)
	if key != nil {
		if err != nil {
			s.applied.release(*key)
		} else {
			s.applied.commit(*key)
		}
	}
	s.cut.RUnlock()
	if err != nil {
		s.metrics.push(pushFailed)
		return nil, err
	}
	if s.saver.due(v) {
		s.offerCheckpoint(t, v)
	}
	s.metrics.push(pushApplied)
	s.metrics.staleness(v - 1 - req.GetVersion())
	return &pserverpb.PushGradientsResponse{Accepted: true, Version: v}, nil
}

// validate resolves each gradient to its parameter, checking name, shape
// and content length, and that no parameter appears twice.
func (t *table) validate(grads []*pserverpb.Tensor) ([]*param, error) {
	targets := make([]*param, len(grads))
	// Duplicates are found by scanning for small pushes and with a set for
	// large ones, to keep the common case allocation-free.
	var seen map[*param]bool
	if len(grads) > 32 {
		seen = make(map[*param]bool, len(grads))
	}
	for i, g := range grads {
		p := t.params[g.GetName()]
		if p == nil {
			return nil, status.Errorf(codes.InvalidArgument, "gradient %q: no such parameter on this shard", g.GetName())
		}
		if err := wire.CheckShape(g, p.shape); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "gradient %q: %v", g.GetName(), err)
		}
		if seen != nil && seen[p] || seen == nil && slices.Contains(targets[:i], p) {
			return nil, status.Errorf(codes.InvalidArgument, "gradient %q given twice", g.GetName())
		}
		if seen != nil {
			seen[p] = true
		}
		targets[i] = p
	}
	return targets, nil
}

// applyAsync applies each validated gradient under its parameter's lock and
// returns the new version.
func (s *Server) applyAsync(t *table, targets []*param, grads []*pserverpb.Tensor, sparse []sparseGrad, lrScale float32) (int64, error) {
	for i, p := range targets {
		if err := p.apply(s.opt, grads[i], lrScale); err != nil {
			// Validation makes this unreachable short of an optimizer bug;
			// earlier gradients of this push are already applied.
			return 0, status.Errorf(codes.Internal, "apply gradient %q: %v", p.name, err)
		}
	}
	for _, g := range sparse {
		if lrScale != 1 {
			// Row optimizers take no learning-rate scale: scale the
			// gradient instead (the same for SGD).
			for j := range g.grads {
				g.grads[j] *= lrScale
			}
		}
		g.t.apply(s.rule, g.ids, g.grads)
	}
	return t.version.Add(1), nil
}

// markApplied records a minibatch without gradients for this shard as
// applied (there is nothing to apply), so that the shard's applied set
// says what the model holds; the version does not move.
func (s *Server) markApplied(t *table, key minibatch) (*pserverpb.PushGradientsResponse, error) {
	if s.sync != nil {
		// Sync checkpoints are taken under syncMu.
		s.syncMu.Lock()
		defer s.syncMu.Unlock()
	}
	s.cut.RLock()
	defer s.cut.RUnlock()
	if resp, err := s.claim(t, key); resp != nil || err != nil {
		return resp, err
	}
	s.applied.commit(key)
	s.metrics.push(pushEmpty)
	return &pserverpb.PushGradientsResponse{Accepted: true, Version: t.version.Load()}, nil
}

// claim reserves key for this push; a non-nil answer (a duplicate) or
// error means the push is not to be applied.
func (s *Server) claim(t *table, key minibatch) (*pserverpb.PushGradientsResponse, error) {
	switch s.applied.claim(key) {
	case alreadyApplied:
		s.metrics.push(pushDuplicate)
		return &pserverpb.PushGradientsResponse{Accepted: true, Version: t.version.Load(), Duplicate: true}, nil
	case heldByAnother:
		if s.sync != nil {
			// In the accumulator: applied with the version.
			s.metrics.push(pushDuplicate)
			return &pserverpb.PushGradientsResponse{Accepted: true, Version: t.version.Load(), Duplicate: true}, nil
		}
		// Its outcome is not known yet: the client retries.
		return nil, status.Errorf(codes.Unavailable, "minibatch %d of task %d is being applied by another push", key.index, key.task)
	}
	return nil, nil
}

// offerCheckpoint copies the shard for the checkpoint of version v, which
// is due, as a consistent cut of the async pushes (each one's parameters
// and applied minibatch together). Copying here, not in the writer, labels
// the snapshot with the version that triggered it (pushes that landed
// since are in it too, and in its applied minibatches); only the file I/O
// is deferred.
func (s *Server) offerCheckpoint(t *table, v int64) {
	s.cut.Lock()
	c := s.snapshot(t, v)
	s.cut.Unlock()
	s.saver.offer(c)
}

func (p *param) apply(opt optimizer.Optimizer, g *pserverpb.Tensor, lrScale float32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.grad) != len(p.data) {
		p.grad = make([]float32, len(p.data))
	}
	// The gradient is read in place when it can be: on a local connection
	// it is in the shared region, and a copy of it cost as much as Adam.
	grad, err := wire.View(g, len(p.data), p.grad)
	if err != nil {
		return err
	}
	return opt.Apply(p.name, p.data, grad, lrScale)
}

// DirectHandler answers pushes and pulls on direct connections
// (direct.Mux) as their gRPC methods do, encoding the parameters they
// return into the buffer the connection lends (its shared region, when it
// has one).
func (s *Server) DirectHandler() direct.Handler {
	return direct.Handler{Push: s.push, Pull: func(_ context.Context, req *pserverpb.PullDenseParametersRequest, out *[]byte) (*pserverpb.PullDenseParametersResponse, error) {
		return s.pullDense(req, out)
	}}
}

// Run listens on addr and serves the shard until ctx is cancelled.
func Run(ctx context.Context, addr string, cfg Config) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("ps shard %d: listen on %s: %w", cfg.Index, addr, err)
	}
	return Serve(ctx, lis, cfg)
}

// Serve is Run on an existing listener, which it closes. It returns nil
// after a cancellation-triggered shutdown: in-flight RPCs get gracePeriod
// to finish, then are cut off.
func Serve(ctx context.Context, lis net.Listener, cfg Config) error {
	s, err := NewServer(cfg)
	if err != nil {
		lis.Close()
		return err
	}
	defer s.Close()
	g := grpc.NewServer(append(rpc.ServerOptions(), tlsid.HandshakenServerOptions(cfg.Creds, Policy(), s.log)...)...)
	s.Register(g)
	s.log.Info("serving", "addr", lis.Addr().String(), "shards", s.numShards(), "optimizer", s.opt.String(),
		"version", s.Version(), "checkpoint_dir", cfg.CheckpointDir, "checkpoint_steps", cfg.CheckpointSteps,
		"use_async", !cfg.Sync, "grads_to_wait", cfg.GradsToWait, "sync_version_tolerance", cfg.SyncVersionTolerance,
		"live_workers", cfg.LiveWorkers, "lr_staleness_modulation", cfg.LRStalenessModulation)

	// Workers push and pull over direct connections on the same port;
	// everything else (and workers that ask for it) over gRPC.
	mux := direct.NewMuxTLS(lis, s.DirectHandler(), s.log, cfg.Creds)
	// Workers on this host connect to a Unix socket instead (half TCP's
	// per-byte cost on loopback); the name is this process's alone.
	local := fmt.Sprintf("elasticdl-ps-%d-%d-%016x", cfg.Index, os.Getpid(), rand.Uint64())
	if err := mux.ServeLocal(local); err != nil {
		s.log.Warn("no local socket: workers on this host connect over TCP", "err", err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		graceful := make(chan struct{})
		go func() { g.GracefulStop(); close(graceful) }()
		select {
		case <-graceful:
		case <-time.After(gracePeriod):
			s.log.Warn("graceful stop timed out; stopping", "after", gracePeriod)
			g.Stop()
		}
	}()
	err = g.Serve(mux)
	close(done)
	<-stopped
	mux.Stop(gracePeriod)
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		g.Stop() // Serve failed on its own: drop any open connections

		return fmt.Errorf("ps shard %d: serve on %s: %w", cfg.Index, lis.Addr(), err)
	}
	s.log.Info("stopped", "version", s.Version())
	return nil
}
