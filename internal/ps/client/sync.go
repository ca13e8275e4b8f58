package client

import (
	"context"

	"elasticdl/proto/pserverpb"
)

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
