package client

import (
	"context"
	"fmt"
	"sync"

	"elasticdl/internal/wire"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

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
