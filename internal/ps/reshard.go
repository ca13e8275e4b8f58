package ps

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/rpc"
	"elasticdl/internal/tlsid"
	"elasticdl/proto/pserverpb"
)

// Live re-sharding: the job changes its number of PS without a restart.
// The master first keeps the workers from pushing (they finish their
// tasks and wait), so every shard holds the same applied minibatches and
// nothing moves under the copy. Then each shard of the new layout — the
// old shards it keeps and the new, empty ones — gathers its part from
// every old shard (ExportShard, shard to shard) and stages it (Reshard);
// only once every shard has staged does the master commit them
// (CommitReshard), and workers route by the new layout from their next
// task. A failure before the commit changes nothing: the old layout
// still serves, and the master can stage again. The parts are checkpoint
// messages, re-sharded by the code that restores checkpoints into
// another number of PS, so both paths move parameters, optimizer slots,
// embedding rows and the applied minibatches the same way.

// staged is a layout gathered by Reshard, not yet serving.
type staged struct {
	layout int64
	shards int
	c      *pserverpb.Checkpoint // this shard's part of the new layout
	table  *table
}

// reshardState is the shard's layout number and what is staged.
type reshardState struct {
	mu     sync.Mutex
	layout int64
	staged *staged
}

// ExportShard implements pserverpb.PserverServer: what shard index of
// num_shards takes of this one, at a consistent cut (as a checkpoint).
func (s *Server) ExportShard(_ context.Context, req *pserverpb.ExportShardRequest) (*pserverpb.Checkpoint, error) {
	n, i := int(req.GetNumShards()), int(req.GetIndex())
	if n < 1 || i < 0 || i >= n {
		return nil, status.Errorf(codes.InvalidArgument, "export shard: index %d out of range for %d shards", i, n)
	}
	t := s.table.Load()
	if t == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "ps shard %d is not initialized: nothing to export", s.index)
	}
	s.cut.Lock()
	c := s.snapshot(t, t.version.Load())
	s.cut.Unlock()
	return checkpoint.Part(c, i, n), nil
}

// Reshard implements pserverpb.PserverServer: it stages this shard's part
// of layout req.Layout, gathered from every shard of the current layout.
// Staging the same layout again replaces what was staged.
func (s *Server) Reshard(ctx context.Context, req *pserverpb.ReshardRequest) (*pserverpb.ReshardResponse, error) {
	n := int(req.GetNumShards())
	switch {
	case s.sync != nil:
		return nil, status.Error(codes.FailedPrecondition, "re-sharding a sync-SGD job is not supported: its accumulator holds pushes not yet applied")
	case n < 1 || s.index >= n:
		return nil, status.Errorf(codes.InvalidArgument, "reshard: shard %d has no place in a layout of %d shards", s.index, n)
	case len(req.GetSources()) == 0:
		return nil, status.Error(codes.InvalidArgument, "reshard: no source shards")
	}
	s.reshard.mu.Lock()
	defer s.reshard.mu.Unlock()
	if req.GetLayout() == s.reshard.layout && req.GetLayout() > 0 && n == s.numShards() {
		return nil, status.Errorf(codes.AlreadyExists, "reshard: layout %d is committed here already", req.GetLayout())
	}
	if req.GetLayout() <= s.reshard.layout {
		return nil, status.Errorf(codes.FailedPrecondition, "reshard: layout %d is not newer than this shard's %d", req.GetLayout(), s.reshard.layout)
	}
	parts, err := s.gather(ctx, req.GetSources(), n)
	if err != nil {
		return nil, err
	}
	set := &checkpoint.Set{NumShards: len(parts), Shards: parts, Dir: fmt.Sprintf("layout %d", req.GetLayout())}
	for _, p := range parts {
		set.Version = max(set.Version, p.GetVersion(), p.GetCutVersion())
	}
	c, err := set.ForShard(s.index, n)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reshard: %v", err)
	}
	// Build the table as a restore does, checking routing against the new
	// layout (a parameter or row of another shard is refused).
	t, err := s.newTable(c.GetDenseParameters(), n)
	if err == nil {
		err = s.restoreTables(t, c, set.Dir, n)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reshard: stage layout %d: %v", req.GetLayout(), err)
	}
	t.version.Store(set.Version)
	s.reshard.staged = &staged{layout: req.GetLayout(), shards: n, c: c, table: t}
	rows := int64(0)
	for _, et := range c.GetEmbeddingTables() {
		rows += int64(len(et.GetIds()))
	}
	s.log.Info("re-shard staged", "layout", req.GetLayout(), "shards", n, "from_shards", len(parts), "params", len(t.ordered), "embedding_rows", rows, "version", set.Version)
	return &pserverpb.ReshardResponse{Version: set.Version, DenseParameters: int32(len(t.ordered)), EmbeddingRows: rows}, nil
}

// gather asks every source shard for this shard's part of a layout of n
// shards, in parallel; this shard's own part, when it is a source, is
// taken locally.
func (s *Server) gather(ctx context.Context, sources []string, n int) ([]*pserverpb.Checkpoint, error) {
	parts := make([]*pserverpb.Checkpoint, len(sources))
	errs := make([]error, len(sources))
	req := &pserverpb.ExportShardRequest{Index: int32(s.index), NumShards: int32(n)}
	var wg sync.WaitGroup
	for i, addr := range sources {
		if i == s.index && s.table.Load() != nil && s.numShards() == len(sources) {
			parts[i], errs[i] = s.ExportShard(ctx, req)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[i], errs[i] = exportFrom(ctx, addr, req, s.creds)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "reshard: export from shard %d (%s): %v", i, sources[i], err)
		}
		if int(parts[i].GetShard()) != i || int(parts[i].GetNumShards()) != len(sources) {
			return nil, status.Errorf(codes.FailedPrecondition, "reshard: %s is shard %d of %d, expected shard %d of %d",
				sources[i], parts[i].GetShard(), parts[i].GetNumShards(), i, len(sources))
		}
	}
	return parts, nil
}

// exportFrom asks the shard at addr for a part.
func exportFrom(ctx context.Context, addr string, req *pserverpb.ExportShardRequest, creds *tlsid.Creds) (*pserverpb.Checkpoint, error) {
	if addr == "" {
		return nil, errors.New("no address")
	}
	conn, err := grpc.NewClient(addr, rpc.DialOptions(creds, tlsid.PS)...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return pserverpb.NewPserverClient(conn).ExportShard(ctx, req)
}

// CommitReshard implements pserverpb.PserverServer: the staged layout
// starts serving — its parameters, optimizer slots, embedding rows and
// applied minibatches replace the old ones at once (no push is in flight
// across the switch) — and this shard checks routing by the new number of
// shards. Committing the current layout again is a no-op.
func (s *Server) CommitReshard(_ context.Context, req *pserverpb.CommitReshardRequest) (*pserverpb.CommitReshardResponse, error) {
	s.reshard.mu.Lock()
	defer s.reshard.mu.Unlock()
	if req.GetLayout() == s.reshard.layout && s.reshard.staged == nil {
		return &pserverpb.CommitReshardResponse{Version: s.Version()}, nil
	}
	st := s.reshard.staged
	if st == nil || st.layout != req.GetLayout() {
		return nil, status.Errorf(codes.FailedPrecondition, "commit reshard: layout %d is not staged", req.GetLayout())
	}
	s.cut.Lock()
	defer s.cut.Unlock()
	if _, err := s.restoreSlots(st.c, fmt.Sprintf("layout %d", st.layout)); err != nil {
		return nil, status.Errorf(codes.Internal, "commit reshard: %v", err)
	}
	if st.c.GetRun() == s.run {
		s.applied.restore(st.c.GetApplied())
	} else {
		s.applied.restore(nil)
	}
	s.shards.Store(int32(st.shards))
	s.table.Store(st.table)
	s.reshard.layout, s.reshard.staged = st.layout, nil
	v := st.table.version.Load()
	s.log.Info("re-shard committed", "layout", st.layout, "shards", st.shards, "params", len(st.table.ordered), "version", v)
	return &pserverpb.CommitReshardResponse{Version: v}, nil
}
