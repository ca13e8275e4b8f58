// Package client is what workers use to talk to all parameter-server
// shards of a job: it routes each parameter to its shard (ShardOf), pushes
// the initial model, pulls parameters and pushes gradients to all shards in
// parallel, and rides out PS restarts.
//
// # Resilience
//
// PS processes get killed and relaunched at the same address. Every call
// retries codes.Unavailable with capped exponential backoff until its
// context ends. A PS relaunched with checkpoints restores the newest one
// before serving and is initialized from the start: the client just pulls
// everything again. Without checkpoints it comes back empty; when a shard
// answers that it is not initialized and this client has held that
// shard's parameters (it pulled them, or its PushModel was the one
// accepted), the client re-initializes the shard by pushing its CURRENT
// parameter values, tagged with the version it last pulled, and carries
// on. So such a PS restarts from the newest parameters some worker holds,
// losing only the optimizer's slots (momentum, Adam moments). If several
// workers race to re-initialize, the shard keeps the first and the others
// re-pull.
//
// A client that never held a shard's parameters (a fresh worker) instead
// waits, with backoff, for some other worker to initialize it.
//
// After a call to a shard has failed with Unavailable, the next Pull from
// it fetches everything: the shard may meanwhile have been restored by
// another worker from older values and reached our version number again.
// A worker that never noticed the outage can keep such stale values until
// the shard's version next changes, i.e. for one step of async training.
//
// Gradient pushes are retried on Unavailable too, so a push whose reply
// was lost after the PS applied it may be applied twice; async SGD
// tolerates that noise.
//
// # Embedding tables
//
// PushModel also registers a model's sparse embedding tables on every
// shard; PullEmbeddings and Push route each id to shard id mod NumShards,
// in parallel, and PullEmbeddings reassembles rows in the caller's order.
// A relaunched empty shard is re-initialized as above, its tables
// registered again; its rows restart from their deterministic initial
// values unless the PS restored a checkpoint.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps/direct"
	"elasticdl/internal/ps/shard"
	"elasticdl/internal/rpc"
	"elasticdl/internal/wire"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

// ShardOf returns the index of the PS shard holding the parameter called
// name: FNV-1a 32 of the name's bytes, modulo numPS. Workers and servers
// must agree on it and it must never change. It panics when numPS < 1.
func ShardOf(name string, numPS int) int { return shard.Of(name, numPS) }

// Option configures Dial.
type Option func(*options)

type options struct {
	log                    *slog.Logger
	dialOpts               []grpc.DialOption
	minBackoff, maxBackoff time.Duration
	dtype                  pserverpb.DType
	grpcOnly               bool
	noSharedMemory         bool // tests: local direct connections without a shared region
}

// WithGRPCOnly makes gradient pushes and parameter pulls go over gRPC
// like every other call, instead of over direct connections (package
// direct: the same messages, with a fraction of gRPC's copies).
func WithGRPCOnly() Option { return func(o *options) { o.grpcOnly = true } }

// WithTransportDType makes dense gradients travel to the shards, and
// parameters back, as dtype (default float32). bfloat16 halves the bytes
// of a step; the shards keep and update float32, and the model's initial
// values (PushModel, re-initializations) always travel exactly.
func WithTransportDType(dtype pserverpb.DType) Option { return func(o *options) { o.dtype = dtype } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithDialOptions appends gRPC dial options after the defaults (so they
// win), e.g. for tests or TLS.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithBackoff sets the retry backoff: the first wait and its cap (default
// 50ms and 1s). Waits double and are jittered by ±20%.
func WithBackoff(initial, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = initial, max }
}

// Client talks to every shard of one job. It is safe for concurrent use,
// though a worker normally alternates Pull and Push from one goroutine.
type Client struct {
	shards []*shardConn
	opts   options

	mu     sync.Mutex
	layout *layout // split of the params slice seen last
	// tables are the embedding tables registered by PushModel; every
	// initialization of a shard (re-initializations included) carries them.
	tables []*pserverpb.EmbeddingTableInfo
	dims   map[string]int
}

// shardConn is one shard's connection and what this client knows of it.
type shardConn struct {
	index int
	addr  string
	conn  *grpc.ClientConn
	rpc   pserverpb.PserverClient
	// direct carries pushes and pulls when not nil.
	direct *direct.Client

	mu sync.Mutex
	// version is the shard version the worker's values came from; -1 when
	// unknown, which makes the next pull fetch everything.
	version int64
	// haveValues: the worker's parameters for this shard came from it (or
	// initialized it), so they may re-initialize it after a relaunch.
	haveValues bool
	// refetch makes the next pull ask for everything: after an outage the
	// shard may have been restored by another worker from values that
	// differ from ours under the same version number.
	refetch bool

	// pushMu serializes gradient pushes to this shard so they can reuse
	// pushBuf, avoiding a model-sized allocation per push.
	pushMu  sync.Mutex
	pushBuf []*pserverpb.Tensor
	// rejected: the last push to this shard was declined (sync SGD, too
	// stale); guarded by pushMu.
	rejected bool
}

// Dial creates connections to every shard, addrs[i] being shard i. It does
// not wait for the servers: calls retry until they are up.
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("ps client: no PS addresses")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ps client: dial: %w", err)
	}
	o := options{minBackoff: 50 * time.Millisecond, maxBackoff: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.minBackoff <= 0 || o.maxBackoff < o.minBackoff {
		return nil, fmt.Errorf("ps client: bad backoff %v..%v", o.minBackoff, o.maxBackoff)
	}
	if err := wire.CheckDType(o.dtype); err != nil {
		return nil, fmt.Errorf("ps client: transport: %w", err)
	}
	dialOpts := append(rpc.DialOptions(), o.dialOpts...)
	c := &Client{opts: o}
	for i, addr := range addrs {
		conn, err := grpc.NewClient(addr, dialOpts...)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("ps client: shard %d (%s): %w", i, addr, err)
		}
		conn.Connect() // start connecting now rather than on the first call
		s := &shardConn{index: i, addr: addr, conn: conn, rpc: pserverpb.NewPserverClient(conn), version: -1}
		if _, _, err := net.SplitHostPort(addr); err == nil && !o.grpcOnly {
			s.direct = direct.NewClient(addr)
			if o.noSharedMemory {
				s.direct.NoSharedMemory()
			}
		}
		c.shards = append(c.shards, s)
	}
	return c, nil
}

// Close closes all connections.
func (c *Client) Close() error {
	var errs []error
	for _, s := range c.shards {
		if err := s.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("ps shard %d (%s): close: %w", s.index, s.addr, err))
		}
		if s.direct != nil {
			s.direct.Close()
		}
	}
	return errors.Join(errs...)
}

// NumShards is the number of PS shards.
func (c *Client) NumShards() int { return len(c.shards) }

// Version is the model version of the values this client holds: the
// highest shard version it last pulled (each shard counts its own
// updates), or -1 before the first pull.
func (c *Client) Version() int64 {
	v := int64(-1)
	for _, s := range c.shards {
		s.mu.Lock()
		v = max(v, s.version)
		s.mu.Unlock()
	}
	return v
}

// PushModel sends each shard its parameters' current values as version 0
// and registers the model's embedding tables (none for a dense model) on
// it. Shards already initialized ignore it; this client then has to Pull
// before it holds the shard's values. Every shard is pushed, even one that
// holds none of the parameters, so that it counts as initialized. The
// client remembers the tables and registers them again when it
// re-initializes a relaunched shard; rows of such a shard then restart
// from their deterministic initial values (unless the PS restored a
// checkpoint).
func (c *Client) PushModel(ctx context.Context, params []*nn.Param, tables ...EmbeddingTable) error {
	if err := c.setTables(tables); err != nil {
		return err
	}
	l, err := c.layoutFor(params)
	if err != nil {
		return err
	}
	return c.each(ctx, l, true, func(ctx context.Context, s *shardConn, group []*nn.Param) error {
		_, err := c.pushModel(ctx, s, group, 0, false)
		return err
	})
}

// pushModel initializes s with group's values tagged version, recording
// whether it took them;
// reinit marks a relaunched shard's re-initialization.
func (c *Client) pushModel(ctx context.Context, s *shardConn, group []*nn.Param, version int64, reinit bool) (accepted bool, err error) {
	c.mu.Lock()
	tables := c.tables
	c.mu.Unlock()
	req := &pserverpb.Model{Version: version, DenseParameters: make([]*pserverpb.Tensor, len(group)), EmbeddingTableInfos: tables, Reinit: reinit}
	for i, p := range group {
		if p.Value == nil {
			return false, fmt.Errorf("ps client: parameter %q has no value", p.Name)
		}
		req.DenseParameters[i] = wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data)
	}
	var resp *pserverpb.PushModelResponse
	err = c.call(ctx, s, "push model", func(ctx context.Context) (err error) {
		resp, err = s.rpc.PushModel(ctx, req)
		return err
	})
	if err != nil {
		return false, err
	}
	if resp.GetAccepted() {
		s.mu.Lock()
		s.version, s.haveValues, s.refetch = resp.GetVersion(), true, false
		s.mu.Unlock()
	}
	return resp.GetAccepted(), nil
}

// Pull fills each parameter's Value.Data in place from its shard (no
// allocation of parameter data). Shards whose version the client already
// holds send nothing; changed reports whether any values were replaced.
// While a shard is uninitialized Pull waits, with backoff, until ctx ends —
// or re-initializes it, see the package comment. A pull that fails part-way
// may leave some parameters updated.
func (c *Client) Pull(ctx context.Context, params []*nn.Param) (changed bool, err error) {
	l, err := c.layoutFor(params)
	if err != nil {
		return false, err
	}
	var mu sync.Mutex
	err = c.each(ctx, l, false, func(ctx context.Context, s *shardConn, group []*nn.Param) error {
		ch, err := c.pullShard(ctx, s, group, l.byName[s.index])
		if ch {
			mu.Lock()
			changed = true
			mu.Unlock()
		}
		return err
	})
	return changed, err
}

func (c *Client) pullShard(ctx context.Context, s *shardConn, group []*nn.Param, byName map[string]*nn.Param) (bool, error) {
	bo := c.newBackoff()
	reinits := 0
	for {
		s.mu.Lock()
		version, have := s.version, s.haveValues
		if s.refetch {
			version = -1
		}
		s.mu.Unlock()
		var (
			resp    *pserverpb.PullDenseParametersResponse
			release func()
		)
		err := c.call(ctx, s, "pull", func(ctx context.Context) (err error) {
			resp, release, err = s.pull(ctx, &pserverpb.PullDenseParametersRequest{Version: version, Dtype: c.opts.dtype})
			return err
		})
		if err != nil {
			return false, err
		}
		changed, err := c.adoptPull(s, resp, version, group, byName)
		release()
		if err != nil || resp.GetInitialized() {
			return changed, err
		}
		if have {
			if err := c.reinit(ctx, s, group, &reinits, bo); err != nil {
				return false, err
			}
			continue
		}
		c.opts.log.Debug("waiting for PS shard to be initialized", "shard", s.index, "addr", s.addr)
		if err := bo.wait(ctx); err != nil {
			return false, fmt.Errorf("ps shard %d (%s): waiting for the model to be pushed: %w", s.index, s.addr, err)
		}
	}
}

// adoptPull writes an initialized shard's pulled parameters into group;
// changed is false when the shard had nothing newer (or is not
// initialized).
func (c *Client) adoptPull(s *shardConn, resp *pserverpb.PullDenseParametersResponse, version int64, group []*nn.Param, byName map[string]*nn.Param) (changed bool, err error) {
	tensors := resp.GetDenseParameters()
	if !resp.GetInitialized() || len(tensors) == 0 && resp.GetVersion() == version {
		return false, nil
	}
	if err := checkPulled(tensors, group, byName); err != nil {
		return false, fmt.Errorf("ps shard %d (%s): pull: %w", s.index, s.addr, err)
	}
	for _, t := range tensors {
		p := byName[t.GetName()]
		// checkPulled validated everything, so this cannot fail half-way.
		if err := wire.DecodeInto(t, p.Value.Data); err != nil {
			return false, fmt.Errorf("ps shard %d (%s): pull %q: %w", s.index, s.addr, p.Name, err)
		}
	}
	s.mu.Lock()
	s.version, s.haveValues, s.refetch = resp.GetVersion(), true, false
	s.mu.Unlock()
	return true, nil
}

// noRelease is the release of an answer that holds no lent buffer.
func noRelease() {}

// pull sends one pull to the shard; see callShard.
func (s *shardConn) pull(ctx context.Context, req *pserverpb.PullDenseParametersRequest) (*pserverpb.PullDenseParametersResponse, func(), error) {
	return callShard(ctx, s, req, (*direct.Client).Pull, s.rpc.PullDenseParameters)
}

// push sends one push to the shard; see callShard.
func (s *shardConn) push(ctx context.Context, req *pserverpb.PushGradientsRequest) (*pserverpb.PushGradientsResponse, func(), error) {
	return callShard(ctx, s, req, (*direct.Client).Push, s.rpc.PushGradients)
}

// callShard sends req over the shard's direct connection, or over gRPC
// when it has none or its PS does not speak the direct protocol; release
// (never nil) gives the answer's buffers back once decoded.
func callShard[Req, Resp any](ctx context.Context, s *shardConn, req Req,
	viaDirect func(*direct.Client, context.Context, Req) (Resp, func(), error),
	viaGRPC func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, func(), error) {
	if s.direct != nil {
		resp, release, err := viaDirect(s.direct, ctx, req)
		if !errors.Is(err, direct.ErrUnsupported) {
			if release == nil {
				release = noRelease
			}
			return resp, release, err
		}
	}
	resp, err := viaGRPC(ctx, req)
	return resp, noRelease, err
}

// checkPulled verifies that tensors are exactly the group's parameters,
// each with the worker's shape, before anything is overwritten.
func checkPulled(tensors []*pserverpb.Tensor, group []*nn.Param, byName map[string]*nn.Param) error {
	if len(tensors) != len(group) {
		return fmt.Errorf("got %d tensors, this worker has %d parameters on the shard", len(tensors), len(group))
	}
	// The server sends names in increasing order, which rules out
	// duplicates without allocating; otherwise fall back to a set.
	var seen map[string]bool
	for i, t := range tensors {
		if seen == nil && i > 0 && t.GetName() <= tensors[i-1].GetName() {
			seen = make(map[string]bool, len(tensors))
			for _, u := range tensors[:i] {
				seen[u.GetName()] = true
			}
		}
		if seen != nil {
			if seen[t.GetName()] {
				return fmt.Errorf("parameter %q sent twice", t.GetName())
			}
			seen[t.GetName()] = true
		}
		p := byName[t.GetName()]
		if p == nil {
			return fmt.Errorf("unknown parameter %q", t.GetName())
		}
		if p.Value == nil {
			return fmt.Errorf("parameter %q has no value", p.Name)
		}
		if err := wire.CheckShape(t, p.Value.Shape); err != nil {
			return err
		}
		if n, err := wire.NumElements(p.Value.Shape); err != nil || n != len(p.Value.Data) {
			return fmt.Errorf("parameter %q: shape %v does not match its %d values", p.Name, p.Value.Shape, len(p.Value.Data))
		}
	}
	return nil
}

// reinit pushes the worker's current values to a relaunched, empty shard.
// *attempts counts re-initializations within one call: finding the shard
// empty again right after one means it restarted again (or something is
// off), so from the second on it backs off rather than spin.
func (c *Client) reinit(ctx context.Context, s *shardConn, group []*nn.Param, attempts *int, bo *expBackoff) error {
	if *attempts > 0 {
		if err := bo.wait(ctx); err != nil {
			return fmt.Errorf("ps shard %d (%s): shard still uninitialized after re-initializing it: %w", s.index, s.addr, err)
		}
	}
	*attempts++
	s.mu.Lock()
	version := max(s.version, 0)
	s.mu.Unlock()
	accepted, err := c.pushModel(ctx, s, group, version, true)
	if err != nil {
		return fmt.Errorf("ps shard %d (%s): re-initialize: %w", s.index, s.addr, err)
	}
	if accepted {
		c.opts.log.Warn("re-initialized relaunched PS shard from this worker's parameters; optimizer slots restart from zero",
			"shard", s.index, "addr", s.addr, "version", version)
		return nil
	}
	// Another worker got there first with its values: ours are no longer
	// the shard's, so the next pull must fetch everything.
	s.mu.Lock()
	s.version = -1
	s.mu.Unlock()
	return nil
}

// Shards selects the shards a Push goes to.
type Shards int

const (
	// AllShards: every shard that has gradients of the push.
	AllShards Shards = iota
	// RejectedShards: only the shards that rejected this client's last
	// push. Sync SGD's redo of a minibatch (re-pulled and recomputed) goes
	// there: a shard that accepted the first computation must not count
	// the minibatch twice.
	RejectedShards
)

// Push sends one minibatch's gradients: each parameter's Grad to its shard
// and the rows of sparse (embedding gradients; none for a dense model) to
// shard id mod NumShards, in one PushGradients call per shard, the shards
// in parallel, each tagged with the version of the shard the worker last
// pulled. params may be empty. accepted is false if any shard declined the
// gradients (sync SGD: too stale; re-pull, recompute and push again to
// RejectedShards); async shards accept stale gradients. A shard rejects an
// invalid push as a whole (codes.InvalidArgument, nothing applied), but
// other shards may have applied theirs.
func (c *Client) Push(ctx context.Context, params []*nn.Param, sparse []SparseGrad, workerID int, to Shards) (accepted bool, err error) {
	accepted, _, err = c.PushMinibatch(ctx, params, sparse, workerID, to, nil, nil)
	return accepted, err
}

// PushMinibatch is Push naming the minibatch (key; nil: unnamed): a shard
// that has applied it already answers without applying it again (then
// duplicate is set), so that a minibatch is in the model once however
// often it is pushed (a retry, a task redone after its worker died).
// Shards for which holds is true are left out (they hold the minibatch:
// see Applied); nil leaves none out.
func (c *Client) PushMinibatch(ctx context.Context, params []*nn.Param, sparse []SparseGrad, workerID int, to Shards,
	key *pserverpb.MinibatchKey, holds func(shard int) bool) (accepted, duplicate bool, err error) {
	r, err := c.StartPush(ctx, PushRequest{Params: params, Sparse: sparse, WorkerID: workerID, To: to, Key: key, Holds: holds}).Wait()
	return r.Accepted, r.Duplicate, err
}

// PushRequest is one gradient push (see StartPush).
type PushRequest struct {
	// Params carry the dense gradients (each one's Grad); may be empty.
	Params []*nn.Param
	// Sparse are embedding gradient rows; none for a dense model.
	Sparse   []SparseGrad
	WorkerID int
	To       Shards
	// Key names the minibatch and Holds leaves out shards that hold it
	// (see PushMinibatch); both may be nil.
	Key   *pserverpb.MinibatchKey
	Holds func(shard int) bool
	// ComputedOn are the shard versions (by shard, as Versions returns)
	// the gradients were computed on; nil: the versions the client holds
	// when the push is sent. A worker that computes while its previous
	// push is in flight names them, since that push's answer moves the
	// client's versions on.
	ComputedOn []int64
	// ReturnParameters asks each shard to answer with its parameters
	// after the push; Wait writes them into Params' values, which saves
	// the next step's pull (async SGD).
	ReturnParameters bool
}

// PushResult is what a push's shards answered.
type PushResult struct {
	// Accepted: no shard declined the gradients (sync SGD: too stale).
	Accepted bool
	// Duplicate: some shard had applied the minibatch already.
	Duplicate bool
	// Fresh: with ReturnParameters, every shard holding some of Params
	// answered with its parameters and they are now in Params' values, so
	// the client holds the newest model without a pull.
	Fresh bool
}

// PendingPush is a push on its way; Wait for its answer.
type PendingPush struct {
	c      *Client
	req    PushRequest
	l      *layout
	wg     sync.WaitGroup
	err    error // from preparing the push
	shards []*shardPush
}

// shardPush is one shard's part of a pending push.
type shardPush struct {
	s *shardConn
	// begun is set once the send has begun: StartPush returns after.
	begun atomic.Bool
	resp  *pserverpb.PushGradientsResponse // nil on error
	// release gives resp's buffers back, once adopted (never nil).
	release func()
	err     error
}

// StartPush encodes a push's gradients and sends them to their shards in
// the background: once it returns, the caller may change the gradients
// (compute the next minibatch) but not the parameters' values until Wait
// has returned. Pushes to one shard are sent one at a time: a StartPush
// while an earlier push is still on its way waits for it.
func (c *Client) StartPush(ctx context.Context, req PushRequest) *PendingPush {
	p := &PendingPush{c: c, req: req, l: &layout{groups: make([][]*nn.Param, len(c.shards))}}
	// No params: an empty layout, not remembered, so that a later
	// re-initialization still pushes the dense values Pull saw.
	if len(req.Params) > 0 {
		if p.l, p.err = c.layoutFor(req.Params); p.err != nil {
			return p
		}
	}
	rows, err := c.splitSparse(req.Sparse)
	if err != nil {
		p.err = err
		return p
	}
	for _, s := range c.shards {
		i := s.index
		group := p.l.groups[i]
		// A keyed minibatch goes to every shard, with no gradients to one
		// that has none of them, so that every shard records it.
		if req.Key == nil && len(group) == 0 && len(rows[i]) == 0 || req.Holds != nil && req.Holds(i) {
			continue
		}
		s.pushMu.Lock() // held until this shard's push is answered
		if req.To == RejectedShards && !s.rejected {
			s.pushMu.Unlock()
			continue
		}
		if err := s.encodeGrads(group, c.opts.dtype); err != nil {
			s.pushMu.Unlock()
			p.err = err
			break
		}
		version := int64(-2) // the client's version when sent
		if req.ComputedOn != nil {
			version = req.ComputedOn[i]
		}
		sp := &shardPush{s: s}
		p.shards = append(p.shards, sp)
		p.wg.Go(func() {
			defer s.pushMu.Unlock()
			sp.begun.Store(true)
			sp.resp, sp.release, sp.err = c.pushShard(ctx, s, group, rows[i], req.WorkerID, req.Key, version, req.ReturnParameters)
		})
	}
	// Let the sends go out now: on one Go processor (a worker's) the
	// caller's compute would otherwise hold them back until it blocks, and
	// an overlapped push would leave only when its answer is due. One
	// yield is not always enough: now and then the scheduler runs the
	// caller again first (it takes from its global queue for fairness).
	for _, sp := range p.shards {
		for !sp.begun.Load() {
			runtime.Gosched()
		}
	}
	return p
}

// Wait waits for every shard's answer. With ReturnParameters it then
// writes the shards' parameters into the request's Params (a shard whose
// answer does not match them is left for the next pull). A shard
// rejects an invalid push as a whole (codes.InvalidArgument, nothing
// applied), but other shards may have applied theirs.
func (p *PendingPush) Wait() (PushResult, error) {
	p.wg.Wait()
	if p.err != nil {
		return PushResult{}, p.err
	}
	r := PushResult{Accepted: true, Fresh: p.req.ReturnParameters}
	answered := make(map[int]bool, len(p.shards))
	var errs []error
	for _, sp := range p.shards {
		if sp.err != nil {
			errs = append(errs, sp.err)
			continue
		}
		r.Accepted, r.Duplicate = r.Accepted && sp.resp.GetAccepted(), r.Duplicate || sp.resp.GetDuplicate()
		if p.req.ReturnParameters && p.c.adopt(sp.s, sp.resp, p.l) {
			answered[sp.s.index] = true
		}
		sp.release()
	}
	if err := errors.Join(errs...); err != nil {
		return PushResult{}, err
	}
	for i, group := range p.l.groups {
		r.Fresh = r.Fresh && (len(group) == 0 || answered[i])
	}
	return r, nil
}

// adopt writes the parameters a push's answer carries into the worker's
// values and records their version, as a pull does; false when the
// answer has none or they are not exactly this worker's (the next pull
// then fetches everything).
func (c *Client) adopt(s *shardConn, resp *pserverpb.PushGradientsResponse, l *layout) bool {
	tensors := resp.GetDenseParameters()
	group := l.groups[s.index]
	if len(tensors) == 0 || len(group) == 0 {
		return false
	}
	if err := checkPulled(tensors, group, l.byName[s.index]); err != nil {
		c.opts.log.Debug("parameters returned by a push do not match this worker's; pulling instead", "shard", s.index, "err", err)
		s.mu.Lock()
		s.refetch = true
		s.mu.Unlock()
		return false
	}
	for _, t := range tensors {
		// checkPulled validated everything, so this cannot fail.
		_ = wire.DecodeInto(t, l.byName[s.index][t.GetName()].Value.Data)
	}
	s.mu.Lock()
	s.version, s.haveValues, s.refetch = resp.GetVersion(), true, false
	s.mu.Unlock()
	return true
}

// Versions returns, by shard, the version of the values this client holds
// (-1: unknown), to name what gradients are computed on (PushRequest).
func (c *Client) Versions() []int64 {
	out := make([]int64, len(c.shards))
	for i, s := range c.shards {
		s.mu.Lock()
		out[i] = s.version
		s.mu.Unlock()
	}
	return out
}

// Applied returns, by shard, which minibatches of task the shard holds, as
// sorted [start, end) index pairs.
func (c *Client) Applied(ctx context.Context, task int64) ([][]int32, error) {
	out := make([][]int32, len(c.shards))
	err := c.eachShard(allShards, func(s *shardConn) error {
		return c.call(ctx, s, "get applied minibatches", func(ctx context.Context) error {
			r, err := s.rpc.GetApplied(ctx, &pserverpb.GetAppliedRequest{TaskIds: []int64{task}})
			if err != nil {
				return err
			}
			for _, m := range r.GetApplied() {
				if m.GetTaskId() == task {
					out[s.index] = m.GetSpans()
				}
			}
			return nil
		})
	})
	return out, err
}

// ShardApplied is what one shard's model holds, by minibatch (see
// AppliedAll).
type ShardApplied struct {
	// Tasks maps a task ID to its applied minibatches, as sorted
	// [start, end) spans.
	Tasks map[int64][][2]int32
	// Unknown: the shard was re-initialized from a worker's copy of its
	// parameters, which hold an unknown mix of minibatches; Tasks lists
	// only what it applied since.
	Unknown bool
}

// AppliedAll returns, by shard, every minibatch the shard's model holds.
func (c *Client) AppliedAll(ctx context.Context) ([]ShardApplied, error) {
	out := make([]ShardApplied, len(c.shards))
	err := c.eachShard(allShards, func(s *shardConn) error {
		return c.call(ctx, s, "get applied minibatches", func(ctx context.Context) error {
			r, err := s.rpc.GetApplied(ctx, &pserverpb.GetAppliedRequest{})
			if err != nil {
				return err
			}
			a := ShardApplied{Tasks: make(map[int64][][2]int32, len(r.GetApplied())), Unknown: r.GetUnknown()}
			for _, m := range r.GetApplied() {
				var pairs [][2]int32
				for sp := m.GetSpans(); len(sp) >= 2; sp = sp[2:] {
					pairs = append(pairs, [2]int32{sp[0], sp[1]})
				}
				a.Tasks[m.GetTaskId()] = pairs
			}
			out[s.index] = a
			return nil
		})
	})
	return out, err
}

// HoldsMinibatch reports whether spans (as Applied returns them) hold
// minibatch index.
func HoldsMinibatch(spans []int32, index int32) bool {
	for i := 0; i+1 < len(spans); i += 2 {
		if spans[i] <= index && index < spans[i+1] {
			return true
		}
	}
	return false
}

// encodeGrads encodes group's gradients into s.pushBuf as dtype; the
// caller holds s.pushMu.
func (s *shardConn) encodeGrads(group []*nn.Param, dtype pserverpb.DType) error {
	for len(s.pushBuf) < len(group) {
		s.pushBuf = append(s.pushBuf, &pserverpb.Tensor{})
	}
	for i, p := range group {
		if p.Grad == nil {
			return fmt.Errorf("ps client: parameter %q has no gradient", p.Name)
		}
		if n, err := wire.NumElements(p.Grad.Shape); err != nil || n != len(p.Grad.Data) {
			return fmt.Errorf("ps client: gradient of %q: shape %v does not match %d values", p.Name, p.Grad.Shape, len(p.Grad.Data))
		}
		wire.EncodeTensorAs(s.pushBuf[i], p.Name, p.Grad.Shape, p.Grad.Data, dtype)
	}
	return nil
}

// pushShard sends the gradients encodeGrads left in s.pushBuf (the
// caller holds s.pushMu), tagged with computedOn (-2: the version the
// client holds when sending).
func (c *Client) pushShard(ctx context.Context, s *shardConn, group []*nn.Param, sparse []*pserverpb.IndexedSlices, workerID int,
	key *pserverpb.MinibatchKey, computedOn int64, returnParams bool) (resp *pserverpb.PushGradientsResponse, release func(), err error) {
	grads := s.pushBuf[:len(group)]
	bo := c.newBackoff()
	reinits := 0
	for {
		s.mu.Lock()
		version, have := s.version, s.haveValues
		s.mu.Unlock()
		if computedOn != -2 {
			version = computedOn
		}
		err := c.call(ctx, s, "push gradients", func(ctx context.Context) (err error) {
			resp, release, err = s.push(ctx, &pserverpb.PushGradientsRequest{WorkerId: int32(workerID), Version: version, Gradients: grads,
				EmbeddingGradients: sparse, Minibatch: key, ReturnParameters: returnParams, ParametersDtype: c.opts.dtype})
			return err
		})
		if status.Code(err) == codes.FailedPrecondition {
			// An empty, relaunched shard: restore it from our values, which
			// are what these gradients were computed on, then push again.
			if len(group) == 0 { // a sparse-only push
				if err := c.initEmpty(ctx, s, &reinits, bo); err != nil {
					return nil, nil, err
				}
				continue
			}
			if !have {
				return nil, nil, fmt.Errorf("%w (this worker holds no parameters to re-initialize it with)", err)
			}
			if err := c.reinit(ctx, s, group, &reinits, bo); err != nil {
				return nil, nil, err
			}
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		s.rejected = !resp.GetAccepted()
		return resp, release, nil
	}
}

// call runs one RPC, retrying codes.Unavailable (PS down or restarting)
// with backoff until ctx ends. Errors name the shard and its address and
// keep the gRPC status for status.Code.
func (c *Client) call(ctx context.Context, s *shardConn, op string, rpc func(context.Context) error) error {
	bo := c.newBackoff()
	for {
		err := rpc(ctx)
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			// The caller's deadline or cancellation ended the call: say so
			// in a way errors.Is sees, whatever status gRPC reported.
			return fmt.Errorf("ps shard %d (%s): %s: %w (%w)", s.index, s.addr, op, cerr, err)
		}
		if status.Code(err) != codes.Unavailable {
			return fmt.Errorf("ps shard %d (%s): %s: %w", s.index, s.addr, op, err)
		}
		c.opts.log.Debug("PS shard unavailable; retrying", "shard", s.index, "addr", s.addr, "op", op, "err", err)
		s.mu.Lock()
		s.refetch = true
		s.mu.Unlock()
		if werr := bo.wait(ctx); werr != nil {
			return fmt.Errorf("ps shard %d (%s): %s: gave up retrying: %w (last error: %w)", s.index, s.addr, op, werr, err)
		}
	}
}

// each runs fn for every shard with parameters (every shard when
// includeEmpty), in parallel, and joins the errors.
func (c *Client) each(ctx context.Context, l *layout, includeEmpty bool, fn func(context.Context, *shardConn, []*nn.Param) error) error {
	return c.eachShard(func(i int) bool { return includeEmpty || len(l.groups[i]) > 0 },
		func(s *shardConn) error { return fn(ctx, s, l.groups[s.index]) })
}

// eachShard runs fn for the shards that want(index), in parallel (no
// goroutine for a single one), and joins the errors.
func (c *Client) eachShard(want func(int) bool, fn func(*shardConn) error) error {
	var work []*shardConn
	for _, s := range c.shards {
		if want(s.index) {
			work = append(work, s)
		}
	}
	if len(work) == 1 {
		return fn(work[0])
	}
	errs := make([]error, len(work))
	var wg sync.WaitGroup
	for i, s := range work {
		wg.Go(func() { errs[i] = fn(s) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// allShards is eachShard's want for calls that go to every shard.
func allShards(int) bool { return true }

// layout is params split by shard; immutable once built.
type layout struct {
	params []*nn.Param
	groups [][]*nn.Param
	byName []map[string]*nn.Param
}

// layoutFor returns the split of params, reusing the last one when called
// with the same parameters again (the usual case: a worker passes its
// model's parameter list every step).
func (c *Client) layoutFor(params []*nn.Param) (*layout, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.layout; l != nil && len(l.params) == len(params) {
		same := true
		for i, p := range params {
			if l.params[i] != p {
				same = false
				break
			}
		}
		if same {
			return l, nil
		}
	}
	l := &layout{
		params: append([]*nn.Param(nil), params...),
		groups: make([][]*nn.Param, len(c.shards)),
		byName: make([]map[string]*nn.Param, len(c.shards)),
	}
	for i := range l.byName {
		l.byName[i] = map[string]*nn.Param{}
	}
	for _, p := range params {
		if p == nil || p.Name == "" {
			return nil, errors.New("ps client: nil or unnamed parameter")
		}
		i := ShardOf(p.Name, len(c.shards))
		if _, dup := l.byName[i][p.Name]; dup {
			return nil, fmt.Errorf("ps client: parameter %q given twice", p.Name)
		}
		l.byName[i][p.Name] = p
		l.groups[i] = append(l.groups[i], p)
	}
	c.layout = l
	return l, nil
}

// expBackoff is capped exponential backoff with ±20% jitter, so workers
// retrying against one relaunched PS do not arrive in lockstep.
type expBackoff struct {
	next, max time.Duration
}

func (c *Client) newBackoff() *expBackoff {
	return &expBackoff{next: c.opts.minBackoff, max: c.opts.maxBackoff}
}

func (b *expBackoff) wait(ctx context.Context) error {
	d := time.Duration(float64(b.next) * (0.8 + 0.4*rand.Float64()))
	b.next = min(2*b.next, b.max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// SetLiveWorkers tells every shard how many workers are alive (sync SGD;
// see ps.Server.SetLiveWorkers), retrying unavailable shards until ctx
// ends. generation orders the calls of one caller; flush makes each shard
// apply what it has accumulated.
func (c *Client) SetLiveWorkers(ctx context.Context, live int, generation int64, flush bool) error {
	return c.eachShard(allShards, func(s *shardConn) error {
		return c.call(ctx, s, "set live workers", func(ctx context.Context) error {
			_, err := s.rpc.SetLiveWorkers(ctx, &pserverpb.SetLiveWorkersRequest{LiveWorkers: int32(live), Generation: generation, Flush: flush})
			return err
		})
	})
}
