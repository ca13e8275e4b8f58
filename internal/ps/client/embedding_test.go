package client

import (
	"slices"
	"sync"
	"testing"
	"time"

	"elasticdl/proto/pserverpb"
)

var tables = []EmbeddingTable{{Name: "user", Dim: 3, Initializer: "uniform:-1,1"}, {Name: "tag", Dim: 2, Initializer: "zeros"}}

// TestEmbeddingsTwoShards: a client against 2 real PS servers splits ids
// by id mod 2, reassembles rows in the caller's order (repeats included),
// and pushes sparse gradients to the right shards.
func TestEmbeddingsTwoShards(t *testing.T) {
	procs, _, c, ctx, params := pushedCluster(t, 2, 0.5, 10*time.Second, tables...)
	ids := []int64{5, 2, 5, 8, 1, 0}
	dst := make([]float32, len(ids)*3)
	if err := c.PullEmbeddings(ctx, "user", ids, dst); err != nil {
		t.Fatal(err)
	}
	for k, id := range ids {
		row := dst[k*3 : (k+1)*3]
		srv := procs[id%2].srv.EmbeddingRows("user")
		if !slices.Equal(row, srv[id]) {
			t.Fatalf("position %d (id %d): %v, shard %d has %v", k, id, row, id%2, srv[id])
		}
	}
	if len(procs[0].srv.EmbeddingRows("user")) != 3 || len(procs[1].srv.EmbeddingRows("user")) != 2 {
		t.Fatalf("rows not sharded by id mod 2")
	}
	setGrads(params, 0)
	if ok, err := c.Push(ctx, params, []SparseGrad{
		{Table: "user", IDs: []int64{5, 2, 5}, Values: []float32{1, 1, 1, 2, 2, 2, 1, 1, 1}},
		{Table: "tag", IDs: []int64{3}, Values: []float32{1, -1}},
	}, 0, AllShards); err != nil || !ok {
		t.Fatal(ok, err)
	}
	got := make([]float32, 9)
	if err := c.PullEmbeddings(ctx, "user", []int64{5, 2, 8}, got); err != nil {
		t.Fatal(err)
	}
	want := []float32{dst[0] - 1, dst[1] - 1, dst[2] - 1, dst[3] - 1, dst[4] - 1, dst[5] - 1, dst[9], dst[10], dst[11]}
	if !slices.Equal(got, want) {
		t.Fatalf("after push: %v, want %v", got, want)
	}
	tag := make([]float32, 2)
	if err := c.PullEmbeddings(ctx, "tag", []int64{3}, tag); err != nil || !slices.Equal(tag, []float32{-0.5, 0.5}) {
		t.Fatalf("tag row %v, %v", tag, err)
	}
	// Sparse-only push (no params) and client-side validation.
	if _, err := c.Push(ctx, nil, []SparseGrad{{Table: "tag", IDs: []int64{3}, Values: []float32{1, -1}}}, 0, AllShards); err != nil {
		t.Fatal(err)
	}
	if err := c.PullEmbeddings(ctx, "nope", []int64{1}, make([]float32, 3)); err == nil {
		t.Fatal("unknown table accepted")
	}
	if err := c.PullEmbeddings(ctx, "user", []int64{-1}, make([]float32, 3)); err == nil {
		t.Fatal("negative id accepted")
	}
	if err := c.PullEmbeddings(ctx, "user", []int64{1}, make([]float32, 2)); err == nil {
		t.Fatal("short dst accepted")
	}
	if _, err := c.Push(ctx, nil, []SparseGrad{{Table: "tag", IDs: []int64{3}, Values: []float32{1}}}, 0, AllShards); err == nil {
		t.Fatal("short values accepted")
	}
}

// TestEmbeddingsRelaunchedShard: a shard killed and relaunched empty is
// re-initialized by the client, tables included; its rows restart from
// their deterministic initial values.
func TestEmbeddingsRelaunchedShard(t *testing.T) {
	procs, addrs, c, ctx, params := pushedCluster(t, 2, 0.5, 10*time.Second, tables...)
	before := make([]float32, 6)
	if err := c.PullEmbeddings(ctx, "user", []int64{1, 3}, before); err != nil {
		t.Fatal(err)
	}
	procs[1].kill()
	procs[1] = startPS(t, 1, 2, addrs[1], 0.5)
	after := make([]float32, 6)
	if err := c.PullEmbeddings(ctx, "user", []int64{1, 3}, after); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Fatalf("relaunched rows %v, want the deterministic init %v", after, before)
	}
	// Dense parameters of the shard came back too.
	got := zeroValues(params)
	if _, err := dial(t, addrs).Pull(ctx, got); err != nil {
		t.Fatal(err)
	}
	wantValues(t, values(got), values(params))
}

func TestEmbeddingsConcurrentClients(t *testing.T) {
	_, addrs := startCluster(t, 2, 0.01)
	ctx := ctxT(t, 20*time.Second)
	var wg sync.WaitGroup
	for w := range 3 {
		c := dial(t, addrs)
		if err := c.PushModel(ctx, testModel(), tables...); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			ids := make([]int64, 32)
			rows := make([]float32, 32*3)
			for k := range 20 {
				for i := range ids {
					ids[i] = int64((w + k*5 + i*3) % 100)
				}
				if err := c.PullEmbeddings(ctx, "user", ids, rows); err != nil {
					t.Error(err)
					return
				}
				if _, err := c.Push(ctx, nil, []SparseGrad{{Table: "user", IDs: ids, Values: rows}}, w, AllShards); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

var _ = pserverpb.EmbeddingTableInfo{}
