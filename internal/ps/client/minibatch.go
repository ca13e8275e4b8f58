package client

import (
	"context"

	"elasticdl/proto/pserverpb"
)

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
