package client

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/wire"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

// EmbeddingTable describes a sparse embedding table held by the PS.
type EmbeddingTable struct {
	Name string
	Dim  int
	// Initializer: "uniform:LO,HI" (default uniform:-0.05,0.05),
	// "normal:MEAN,STDDEV", "zeros" or "constant:V". Rows are created on
	// the PS at first use with a generator seeded by (Name, id), so their
	// initial values do not depend on which PS creates them, or when.
	Initializer string
}

// SparseGrad is the gradient of some rows of one embedding table:
// Values[i*dim:(i+1)*dim] is the gradient of row IDs[i]. IDs may repeat;
// the PS sums repeated rows before applying them (nn.Embedding.Grad gives
// them merged already).
type SparseGrad struct {
	Table  string
	IDs    []int64
	Values []float32
}

// EmbeddingShardOf is the PS shard holding row id of every table: id mod
// numPS (ElasticDL's rule). ids must be non-negative.
func EmbeddingShardOf(id int64, numPS int) int { return int(id % int64(numPS)) }

// setTables validates and remembers the tables PushModel registers.
func (c *Client) setTables(tables []EmbeddingTable) error {
	infos := make([]*pserverpb.EmbeddingTableInfo, len(tables))
	dims := make(map[string]int, len(tables))
	for i, t := range tables {
		if t.Name == "" || t.Dim < 1 {
			return fmt.Errorf("ps client: embedding table %q: bad name or dim %d", t.Name, t.Dim)
		}
		if _, dup := dims[t.Name]; dup {
			return fmt.Errorf("ps client: embedding table %q given twice", t.Name)
		}
		dims[t.Name] = t.Dim
		infos[i] = &pserverpb.EmbeddingTableInfo{Name: t.Name, Dim: int64(t.Dim), Initializer: t.Initializer}
	}
	c.mu.Lock()
	c.tables, c.dims = infos, dims
	c.mu.Unlock()
	return nil
}

func (c *Client) tableDim(table string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.dims[table]
	if !ok {
		return 0, fmt.Errorf("ps client: embedding table %q not registered (PushModel)", table)
	}
	return d, nil
}

// split groups positions of ids by shard, deduplicated: uniq[s] are shard
// s's distinct ids and pos[k] is ids[k]'s index in uniq[shardOf(ids[k])].
func (c *Client) split(ids []int64) (uniq [][]int64, pos []int32, err error) {
	n := len(c.shards)
	uniq = make([][]int64, n)
	pos = make([]int32, len(ids))
	seen := make(map[int64]int32, len(ids))
	for k, id := range ids {
		if id < 0 {
			return nil, nil, fmt.Errorf("ps client: negative embedding id %d", id)
		}
		j, ok := seen[id]
		if !ok {
			s := EmbeddingShardOf(id, n)
			j = int32(len(uniq[s]))
			uniq[s] = append(uniq[s], id)
			seen[id] = j
		}
		pos[k] = j
	}
	return uniq, pos, nil
}

// PullEmbeddings fills dst (len(ids)*dim) with the rows of ids of table,
// in the caller's order; ids may repeat. Each shard is asked once for its
// distinct ids, all shards in parallel. Rows never seen before are created
// by the PS from the table's initializer.
func (c *Client) PullEmbeddings(ctx context.Context, table string, ids []int64, dst []float32) error {
	dim, err := c.tableDim(table)
	if err != nil {
		return err
	}
	if len(dst) != len(ids)*dim {
		return fmt.Errorf("ps client: pull embeddings %q: dst has %d values, want %d ids × dim %d", table, len(dst), len(ids), dim)
	}
	uniq, pos, err := c.split(ids)
	if err != nil {
		return err
	}
	rows := make([][]float32, len(c.shards))
	err = c.eachShard(func(i int) bool { return len(uniq[i]) > 0 }, func(s *shardConn) error {
		r, err := c.pullRows(ctx, s, table, uniq[s.index], dim)
		rows[s.index] = r
		return err
	})
	if err != nil {
		return err
	}
	n := len(c.shards)
	for k, id := range ids {
		r := rows[EmbeddingShardOf(id, n)]
		j := int(pos[k])
		copy(dst[k*dim:(k+1)*dim], r[j*dim:(j+1)*dim])
	}
	return nil
}

func (c *Client) pullRows(ctx context.Context, s *shardConn, table string, ids []int64, dim int) ([]float32, error) {
	bo := c.newBackoff()
	reinits := 0
	req := &pserverpb.PullEmbeddingVectorsRequest{Name: table, Ids: ids}
	for {
		var resp *pserverpb.PullEmbeddingVectorsResponse
		err := c.call(ctx, s, "pull embeddings", func(ctx context.Context) (err error) {
			resp, err = s.rpc.PullEmbeddingVectors(ctx, req)
			return err
		})
		if status.Code(err) == codes.FailedPrecondition {
			if err := c.initEmpty(ctx, s, &reinits, bo); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(ids)*dim)
		if err := wire.DecodeIntoShape(resp.GetRows(), []int{len(ids), dim}, out); err != nil {
			return nil, fmt.Errorf("ps shard %d (%s): pull embeddings %q: %w", s.index, s.addr, table, err)
		}
		return out, nil
	}
}

// initEmpty handles an uninitialized shard met by an embedding call: it
// re-initializes it when this client may (it held the shard's dense
// values, or the shard has none), else waits for another worker to.
func (c *Client) initEmpty(ctx context.Context, s *shardConn, reinits *int, bo *expBackoff) error {
	c.mu.Lock()
	l := c.layout
	c.mu.Unlock()
	var group []*nn.Param
	if l != nil {
		group = l.groups[s.index]
	}
	s.mu.Lock()
	have := s.haveValues
	s.mu.Unlock()
	if l != nil && (have || len(group) == 0) {
		return c.reinit(ctx, s, group, reinits, bo)
	}
	c.opts.log.Debug("waiting for PS shard to be initialized", "shard", s.index, "addr", s.addr)
	if err := bo.wait(ctx); err != nil {
		return fmt.Errorf("ps shard %d (%s): waiting for the model to be pushed: %w", s.index, s.addr, err)
	}
	return nil
}

// splitSparse validates embedding gradients and splits their rows by
// shard (id mod NumShards), encoded for PushGradients.
func (c *Client) splitSparse(sparse []SparseGrad) ([][]*pserverpb.IndexedSlices, error) {
	n := len(c.shards)
	perShard := make([][]*pserverpb.IndexedSlices, n)
	for _, g := range sparse {
		dim, err := c.tableDim(g.Table)
		if err != nil {
			return nil, err
		}
		if len(g.Values) != len(g.IDs)*dim {
			return nil, fmt.Errorf("ps client: sparse gradient %q: %d values for %d ids of dim %d", g.Table, len(g.Values), len(g.IDs), dim)
		}
		if n == 1 { // no split needed
			for _, id := range g.IDs {
				if id < 0 {
					return nil, fmt.Errorf("ps client: sparse gradient %q: negative id %d", g.Table, id)
				}
			}
			if len(g.IDs) > 0 {
				// A copy of the ids, as of the values: the caller may reuse
				// both while the push is on its way (StartPush).
				perShard[0] = append(perShard[0], &pserverpb.IndexedSlices{Values: wire.EncodeTensor(g.Table, []int{len(g.IDs), dim}, g.Values), Ids: slices.Clone(g.IDs)})
			}
			continue
		}
		counts := make([]int, n)
		for _, id := range g.IDs {
			if id < 0 {
				return nil, fmt.Errorf("ps client: sparse gradient %q: negative id %d", g.Table, id)
			}
			counts[EmbeddingShardOf(id, n)]++
		}
		ids := make([][]int64, n)
		vals := make([][]float32, n)
		for s := range n {
			ids[s] = make([]int64, 0, counts[s])
			vals[s] = make([]float32, 0, counts[s]*dim)
		}
		for k, id := range g.IDs {
			s := EmbeddingShardOf(id, n)
			ids[s] = append(ids[s], id)
			vals[s] = append(vals[s], g.Values[k*dim:(k+1)*dim]...)
		}
		for s := range n {
			if len(ids[s]) > 0 {
				perShard[s] = append(perShard[s], &pserverpb.IndexedSlices{
					Values: wire.EncodeTensor(g.Table, []int{len(ids[s]), dim}, vals[s]),
					Ids:    ids[s],
				})
			}
		}
	}
	return perShard, nil
}
