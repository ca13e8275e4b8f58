package client

import (
	"context"
	"fmt"

	"elasticdl/internal/wire"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

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
