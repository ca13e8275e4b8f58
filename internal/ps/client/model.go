package client

import (
	"context"
	"errors"
	"sync"

	"elasticdl/proto/pserverpb"
)

// SaveModel asks every shard to write itself (parameters, optimizer slots,
// embedding tables) as dir/version-N/variables-i-of-n.ckpt labelled
// version, in parallel, and returns the files written by shard index.
func (c *Client) SaveModel(ctx context.Context, dir string, version int64) ([]string, error) {
	paths := make([]string, len(c.shards))
	errs := make([]error, len(c.shards))
	var wg sync.WaitGroup
	for i, s := range c.shards {
		wg.Go(func() {
			errs[i] = c.call(ctx, s, "save model", func(ctx context.Context) error {
				r, err := s.rpc.SaveModel(ctx, &pserverpb.SaveModelRequest{Dir: dir, Version: version})
				if err == nil {
					paths[i] = r.GetPath()
				}
				return err
			})
		})
	}
	wg.Wait()
	return paths, errors.Join(errs...)
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
	errs := make([]error, len(c.shards))
	var wg sync.WaitGroup
	for i, s := range c.shards {
		wg.Go(func() {
			errs[i] = c.call(ctx, s, "get status", func(ctx context.Context) error {
				r, err := s.rpc.GetStatus(ctx, &pserverpb.GetStatusRequest{})
				if err == nil {
					out[i] = ShardStatus{Version: r.GetVersion(), Initialized: r.GetInitialized(), RestoredVersion: -1}
					if r.GetRestored() {
						out[i].RestoredVersion, out[i].RestoredDir = r.GetRestoredVersion(), r.GetRestoredDir()
					}
				}
				return err
			})
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
