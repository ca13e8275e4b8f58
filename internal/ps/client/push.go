package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/wire"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

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
