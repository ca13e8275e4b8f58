package client

import (
	"context"

	"elasticdl/proto/pserverpb"
)

// SaveModel asks every shard to write itself (parameters, optimizer slots,
// embedding tables) as dir/version-N/variables-i-of-n.ckpt labelled
// version, in parallel, and returns the files written by shard index.
func (c *Client) SaveModel(ctx context.Context, dir string, version int64) ([]string, error) {
	paths := make([]string, len(c.shards))
	err := c.eachShard(allShards, func(s *shardConn) error {
		return c.call(ctx, s, "save model", func(ctx context.Context) error {
			r, err := s.rpc.SaveModel(ctx, &pserverpb.SaveModelRequest{Dir: dir, Version: version})
			if err == nil {
				paths[s.index] = r.GetPath()
			}
			return err
		})
	})
	return paths, err
}

// ShardStatus is what GetStatus reports of one shard.
type ShardStatus struct {
	Version     int64
	Initialized bool
	// RestoredVersion is the checkpoint version the shard's current
	// process restored at start, from RestoredDir; -1 when none.
	RestoredVersion int64
	RestoredDir     string
}

// Status asks every shard for its status, in parallel, by shard index.
func (c *Client) Status(ctx context.Context) ([]ShardStatus, error) {
	out := make([]ShardStatus, len(c.shards))
	err := c.eachShard(allShards, func(s *shardConn) error {
		return c.call(ctx, s, "get status", func(ctx context.Context) error {
			r, err := s.rpc.GetStatus(ctx, &pserverpb.GetStatusRequest{})
			if err == nil {
				st := ShardStatus{Version: r.GetVersion(), Initialized: r.GetInitialized(), RestoredVersion: -1}
				if r.GetRestored() {
					st.RestoredVersion, st.RestoredDir = r.GetRestoredVersion(), r.GetRestoredDir()
				}
				out[s.index] = st
			}
			return err
		})
	})
	return out, err
}
