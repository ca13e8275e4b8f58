package ps

import (
	"context"
	"maps"
	"net"
	"reflect"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps/shard"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// serveShard serves s on a loopback port and returns its address.
func serveShard(t *testing.T, s *Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// reshardShard is an uninitialized shard index of n of run "r".
func reshardShard(t *testing.T, index, n int) *Server {
	t.Helper()
	s, err := NewServer(Config{Index: index, NumPS: n, Optimizer: adam(t), Run: "r"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// reshardModel is shard index of n's part of ckptParams, with the
// embedding tables.
func reshardModel(index, n int) *pserverpb.Model {
	m := &pserverpb.Model{EmbeddingTableInfos: embInfos}
	for _, name := range slices.Sorted(maps.Keys(ckptParams)) {
		if shard.Of(name, n) == index {
			v := make([]float32, ckptParams[name])
			for j := range v {
				v[j] = float32(len(name) + j)
			}
			m.DenseParameters = append(m.DenseParameters, wire.EncodeTensor(name, []int{len(v)}, v))
		}
	}
	return m
}

// reshardStep pushes minibatch (task, index) to every shard of a layout:
// a gradient for each of its parameters and for user rows 0..9.
func reshardStep(t *testing.T, shards []*Server, task int64, index int32) {
	t.Helper()
	n := len(shards)
	for i, s := range shards {
		req := &pserverpb.PushGradientsRequest{Minibatch: &pserverpb.MinibatchKey{TaskId: task, Index: index}}
		for _, name := range slices.Sorted(maps.Keys(ckptParams)) {
			if shard.Of(name, n) != i {
				continue
			}
			g := make([]float32, ckptParams[name])
			for j := range g {
				g[j] = float32((int(index)+j)%5) - 2
			}
			req.Gradients = append(req.Gradients, wire.EncodeTensor(name, []int{len(g)}, g))
		}
		var ids []int64
		var vals []float32
		for id := int64(0); id < 10; id++ {
			if EmbeddingShardOf(id, n) == i {
				ids = append(ids, id)
				vals = append(vals, float32(id)*0.1, -0.2, 0.3, float32(index))
			}
		}
		req.EmbeddingGradients = []*pserverpb.IndexedSlices{slices1("user", 4, ids, vals)}
		if _, err := s.PushGradients(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
}

// rowsOf pulls user rows 0..9 from the layout's shards.
func rowsOf(t *testing.T, shards []*Server) map[int64][]float32 {
	out := map[int64][]float32{}
	for id := int64(0); id < 10; id++ {
		out[id] = pull(t, shards[EmbeddingShardOf(id, len(shards))], "user", id)
	}
	return out
}

func reshardTo(t *testing.T, layout int64, sources []string, to []*Server) {
	t.Helper()
	ctx := context.Background()
	for _, s := range to {
		if _, err := s.Reshard(ctx, &pserverpb.ReshardRequest{Layout: layout, NumShards: int32(len(to)), Sources: sources}); err != nil {
			t.Fatalf("reshard shard %d to layout %d: %v", s.index, layout, err)
		}
	}
	for _, s := range to {
		if _, err := s.CommitReshard(ctx, &pserverpb.CommitReshardRequest{Layout: layout}); err != nil {
			t.Fatalf("commit shard %d: %v", s.index, err)
		}
	}
}

func wantSameState(t *testing.T, what string, got, want map[string]paramState, n int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d parameters, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		if g.shard != shard.Of(name, n) {
			t.Errorf("%s: %s on shard %d, want %d", what, name, g.shard, shard.Of(name, n))
		}
		if !slices.Equal(g.data, w.data) || !reflect.DeepEqual(g.slots, w.slots) || g.step != w.step {
			t.Errorf("%s: %s is %+v, want %+v", what, name, g, w)
		}
	}
}

// TestReshardLive: one shard re-sharded into two and back while it
// serves: parameters, Adam slots, embedding rows (with their slots: the
// next update proves it) and the applied minibatches move to the shards
// of the new layout; training continues on the new layout; a minibatch
// applied before the move is still applied once.
func TestReshardLive(t *testing.T) {
	ctx := context.Background()
	s0 := reshardShard(t, 0, 1)
	if _, err := s0.PushModel(ctx, reshardModel(0, 1)); err != nil {
		t.Fatal(err)
	}
	a0 := serveShard(t, s0)
	for i := range int32(3) {
		reshardStep(t, []*Server{s0}, 1, i)
	}
	before, rowsBefore := stateOf([]*Server{s0}), rowsOf(t, []*Server{s0})

	// 1 → 2: shard 0 keeps its index, shard 1 starts empty.
	s1 := reshardShard(t, 1, 2)
	a1 := serveShard(t, s1)
	reshardTo(t, 1, []string{a0}, []*Server{s0, s1})
	two := []*Server{s0, s1}
	wantSameState(t, "1→2", stateOf(two), before, 2)
	if got := rowsOf(t, two); !reflect.DeepEqual(got, rowsBefore) {
		t.Fatalf("rows after 1→2: %v, want %v", got, rowsBefore)
	}
	for _, s := range two {
		if got := appliedOf(t, s, 1); !slices.Equal(got[1], []int32{0, 3}) {
			t.Fatalf("shard %d holds %v of task 1, want [0 3]", s.index, got)
		}
		if s.Version() != 3 {
			t.Fatalf("shard %d at version %d, want 3", s.index, s.Version())
		}
	}
	// A push routed by the old layout is refused: the parameter moved.
	moved := slices.Sorted(maps.Keys(ckptParams))[slices.IndexFunc(slices.Sorted(maps.Keys(ckptParams)), func(n string) bool { return shard.Of(n, 2) == 1 })]
	g := wire.EncodeTensor(moved, []int{ckptParams[moved]}, make([]float32, ckptParams[moved]))
	if _, err := s0.PushGradients(ctx, &pserverpb.PushGradientsRequest{Gradients: []*pserverpb.Tensor{g}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("push of a moved parameter to its old shard: %v, want InvalidArgument", err)
	}
	// A minibatch applied before the move stays applied once.
	reshardStep(t, two, 1, 2)
	wantSameState(t, "duplicate after 1→2", stateOf(two), before, 2)
	// Training goes on with the new layout: the same updates as a single
	// shard gets.
	reshardStep(t, two, 2, 0)
	ref := reshardShard(t, 0, 1)
	if _, err := ref.PushModel(ctx, reshardModel(0, 1)); err != nil {
		t.Fatal(err)
	}
	for i := range int32(3) {
		reshardStep(t, []*Server{ref}, 1, i)
	}
	reshardStep(t, []*Server{ref}, 2, 0)
	wantSameState(t, "trained on 2 shards", stateOf(two), stateOf([]*Server{ref}), 2)
	if got, want := rowsOf(t, two), rowsOf(t, []*Server{ref}); !reflect.DeepEqual(got, want) {
		t.Fatalf("rows trained on 2 shards: %v, want %v", got, want)
	}

	// 2 → 1: shard 1's part comes back.
	reshardTo(t, 2, []string{a0, a1}, []*Server{s0})
	wantSameState(t, "2→1", stateOf([]*Server{s0}), stateOf([]*Server{ref}), 1)
	if got, want := rowsOf(t, []*Server{s0}), rowsOf(t, []*Server{ref}); !reflect.DeepEqual(got, want) {
		t.Fatalf("rows after 2→1: %v, want %v", got, want)
	}
	if got := appliedOf(t, s0, 1, 2); !slices.Equal(got[1], []int32{0, 3}) || !slices.Equal(got[2], []int32{0, 1}) {
		t.Fatalf("applied after 2→1: %v", got)
	}
}

// TestReshardFailuresChangeNothing: a source that cannot be reached, a
// stale layout, a commit of what was not staged, a bad export request and
// a sync-SGD shard are refused, and the shard serves its old layout.
func TestReshardFailuresChangeNothing(t *testing.T) {
	ctx := context.Background()
	s0 := reshardShard(t, 0, 1)
	if _, err := s0.PushModel(ctx, reshardModel(0, 1)); err != nil {
		t.Fatal(err)
	}
	a0 := serveShard(t, s0)
	reshardStep(t, []*Server{s0}, 1, 0)
	before := stateOf([]*Server{s0})
	s1 := reshardShard(t, 1, 2)
	gone := "127.0.0.1:1"
	short, cancel := context.WithTimeout(ctx, 500*1e6)
	defer cancel()
	if _, err := s1.Reshard(short, &pserverpb.ReshardRequest{Layout: 1, NumShards: 2, Sources: []string{gone}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("reshard from an unreachable shard: %v, want Unavailable", err)
	}
	for _, c := range []struct {
		what string
		err  error
		want codes.Code
	}{
		{"commit of nothing staged", func() error {
			_, err := s0.CommitReshard(ctx, &pserverpb.CommitReshardRequest{Layout: 1})
			return err
		}(), codes.FailedPrecondition},
		{"layout 0 (not newer)", func() error {
			_, err := s0.Reshard(ctx, &pserverpb.ReshardRequest{Layout: 0, NumShards: 2, Sources: []string{a0}})
			return err
		}(), codes.FailedPrecondition},
		{"no place for the shard", func() error {
			_, err := s1.Reshard(ctx, &pserverpb.ReshardRequest{Layout: 1, NumShards: 1, Sources: []string{a0}})
			return err
		}(), codes.InvalidArgument},
		{"no sources", func() error {
			_, err := s0.Reshard(ctx, &pserverpb.ReshardRequest{Layout: 1, NumShards: 2})
			return err
		}(), codes.InvalidArgument},
		{"a source that is another shard", func() error {
			_, err := s1.Reshard(ctx, &pserverpb.ReshardRequest{Layout: 1, NumShards: 2, Sources: []string{a0, a0}})
			return err
		}(), codes.FailedPrecondition},
		{"export to no shard", func() error {
			_, err := s0.ExportShard(ctx, &pserverpb.ExportShardRequest{Index: 2, NumShards: 2})
			return err
		}(), codes.InvalidArgument},
		{"export from an empty shard", func() error {
			_, err := s1.ExportShard(ctx, &pserverpb.ExportShardRequest{Index: 0, NumShards: 1})
			return err
		}(), codes.FailedPrecondition},
	} {
		if status.Code(c.err) != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
	}
	// Staged but not committed: still the old layout.
	if _, err := s0.Reshard(ctx, &pserverpb.ReshardRequest{Layout: 1, NumShards: 2, Sources: []string{a0}}); err != nil {
		t.Fatal(err)
	}
	wantSameState(t, "staged only", stateOf([]*Server{s0}), before, 1)
	reshardStep(t, []*Server{s0}, 1, 1)
	if s0.numShards() != 1 {
		t.Fatalf("%d shards before the commit, want 1", s0.numShards())
	}

	sync, err := NewServer(Config{Index: 0, NumPS: 1, Optimizer: adam(t), Sync: true, GradsToWait: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sync.Close()
	if _, err := sync.Reshard(ctx, &pserverpb.ReshardRequest{Layout: 1, NumShards: 2, Sources: []string{a0}}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("reshard of a sync shard: %v, want FailedPrecondition", err)
	}
}
