package ps

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

func parseOpt(t testing.TB, spec string) optimizer.Optimizer {
	t.Helper()
	o, err := optimizer.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

var embInfos = []*pserverpb.EmbeddingTableInfo{
	{Name: "user", Dim: 4, Initializer: "uniform:-0.05,0.05"},
	{Name: "item", Dim: 3, Initializer: "normal:0,0.01"},
	{Name: "zero", Dim: 2, Initializer: "zeros"},
}

// embServer is shard index of numPS with the embedding tables and no
// dense parameters.
func embServer(t testing.TB, index, numPS int, spec string) *Server {
	t.Helper()
	s, err := NewServer(Config{Index: index, NumPS: numPS, Optimizer: parseOpt(t, spec)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PushModel(context.Background(), &pserverpb.Model{EmbeddingTableInfos: embInfos}); err != nil {
		t.Fatal(err)
	}
	return s
}

func pull(t testing.TB, s *Server, table string, ids ...int64) []float32 {
	t.Helper()
	resp, err := s.PullEmbeddingVectors(context.Background(), &pserverpb.PullEmbeddingVectorsRequest{Name: table, Ids: ids})
	if err != nil {
		t.Fatal(err)
	}
	_, rows, err := wire.DecodeTensor(resp.GetRows())
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func slices1(name string, dim int, ids []int64, vals []float32) *pserverpb.IndexedSlices {
	return &pserverpb.IndexedSlices{Ids: ids, Values: wire.EncodeTensor(name, []int{len(ids), dim}, vals)}
}

func pushSparse(s *Server, sl ...*pserverpb.IndexedSlices) error {
	_, err := s.PushGradients(context.Background(), &pserverpb.PushGradientsRequest{EmbeddingGradients: sl})
	return err
}

func TestEmbeddingDeterministicInit(t *testing.T) {
	a := embServer(t, 0, 1, "sgd:learning_rate=0.1")
	b := embServer(t, 0, 1, "adam:learning_rate=0.1")
	// Different order and batch composition: same rows.
	ra := pull(t, a, "user", 7, 1, 1<<40)
	rb := pull(t, b, "user", 1<<40, 7)
	if !slices.Equal(ra[:4], rb[4:]) || !slices.Equal(ra[8:], rb[:4]) {
		t.Fatalf("rows differ across servers: %v vs %v", ra, rb)
	}
	if slices.Equal(ra[:4], ra[4:8]) {
		t.Fatalf("ids 7 and 1 got the same row %v", ra[:4])
	}
	for _, v := range ra {
		if v < -0.05 || v >= 0.05 || v == 0 {
			t.Fatalf("uniform row value %v", v)
		}
	}
	// A row differs between tables of the same dim? (different seeds)
	if n := pull(t, a, "item", 7); slices.Equal(n, pull(t, b, "item", 7)) == false {
		t.Fatalf("normal init differs across servers")
	}
	var sum, sq float64
	ids := make([]int64, 3000)
	for i := range ids {
		ids[i] = int64(i)
	}
	vals := pull(t, a, "item", ids...)
	for _, v := range vals {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	mean, sd := sum/float64(len(vals)), math.Sqrt(sq/float64(len(vals)))
	if math.Abs(mean) > 0.001 || math.Abs(sd-0.01) > 0.001 {
		t.Fatalf("normal:0,0.01 gave mean %v stddev %v", mean, sd)
	}
	if z := pull(t, a, "zero", 5, 6); !slices.Equal(z, make([]float32, 4)) {
		t.Fatalf("zeros: %v", z)
	}
	// Shard 1 of 2 creates id 7 exactly as shard 0 of 1 did.
	c := embServer(t, 1, 2, "sgd:learning_rate=0.1")
	if rc := pull(t, c, "user", 7); !slices.Equal(rc, ra[:4]) {
		t.Fatalf("shard 1 of 2: %v, want %v", rc, ra[:4])
	}
}

func TestEmbeddingSparseOptimizers(t *testing.T) {
	for _, spec := range []string{
		"sgd:learning_rate=0.1", "momentum:learning_rate=0.1,momentum=0.9,nesterov=true",
		"adam:learning_rate=0.01", "adagrad:learning_rate=0.1", "adam:learning_rate=0.01,decay=0.1",
	} {
		t.Run(spec, func(t *testing.T) {
			s := embServer(t, 0, 1, spec)
			ref := parseOpt(t, spec)
			init := pull(t, s, "user", 3, 9)
			r3 := slices.Clone(init[:4])
			grads := [][]float32{{1, 2, 3, 4}, {-1, 0.5, 0, 2}, {0.1, 0.1, 0.1, 0.1}}
			for _, g := range grads {
				// Row 9 is never in a push: lazy semantics leave it alone.
				if err := pushSparse(s, slices1("user", 4, []int64{3}, g)); err != nil {
					t.Fatal(err)
				}
				if err := ref.Apply("r3", r3, g, 1); err != nil {
					t.Fatal(err)
				}
			}
			got := pull(t, s, "user", 3, 9)
			if !slices.Equal(got[:4], r3) {
				t.Fatalf("row 3: %v, dense reference %v", got[:4], r3)
			}
			if !slices.Equal(got[4:], init[4:]) {
				t.Fatalf("row 9 changed without a gradient: %v -> %v", init[4:], got[4:])
			}
		})
	}
}

func TestEmbeddingDuplicatesMerged(t *testing.T) {
	a := embServer(t, 0, 1, "adam:learning_rate=0.01")
	b := embServer(t, 0, 1, "adam:learning_rate=0.01")
	if err := pushSparse(a, slices1("user", 4, []int64{5, 2, 5}, []float32{1, 1, 1, 1, 9, 9, 9, 9, 0.5, -2, 0, 3})); err != nil {
		t.Fatal(err)
	}
	if err := pushSparse(b, slices1("user", 4, []int64{2, 5}, []float32{9, 9, 9, 9, 1.5, -1, 1, 4})); err != nil {
		t.Fatal(err)
	}
	if ga, gb := pull(t, a, "user", 2, 5), pull(t, b, "user", 2, 5); !slices.Equal(ga, gb) {
		t.Fatalf("duplicates not merged: %v vs %v", ga, gb)
	}
}

func TestEmbeddingValidationAppliesNothing(t *testing.T) {
	s := embServer(t, 1, 2, "sgd:learning_rate=0.1")
	before := pull(t, s, "user", 1, 3)
	good := slices1("user", 4, []int64{1, 3}, []float32{1, 1, 1, 1, 1, 1, 1, 1})
	bad := map[string]*pserverpb.IndexedSlices{
		"no such table":      slices1("nope", 4, []int64{1}, make([]float32, 4)),
		"dim":                slices1("user", 3, []int64{1}, make([]float32, 3)),
		"ids":                {Ids: []int64{1, 3}, Values: wire.EncodeTensor("user", []int{1, 4}, make([]float32, 4))},
		"negative id":        slices1("user", 4, []int64{-1}, make([]float32, 4)),
		"belongs to shard 0": slices1("user", 4, []int64{2}, make([]float32, 4)),
		"given twice":        good,
	}
	for want, sl := range bad {
		err := pushSparse(s, sl, good)
		wantCode(t, err, codes.InvalidArgument, "")
		if want != "ids" && want != "dim" {
			wantCode(t, err, codes.InvalidArgument, want)
		}
	}
	if v := s.Version(); v != 0 {
		t.Fatalf("version moved to %d", v)
	}
	if after := pull(t, s, "user", 1, 3); !slices.Equal(before, after) {
		t.Fatalf("rows changed by rejected pushes: %v -> %v", before, after)
	}
	_, err := s.PullEmbeddingVectors(context.Background(), &pserverpb.PullEmbeddingVectorsRequest{Name: "user", Ids: []int64{-3}})
	wantCode(t, err, codes.InvalidArgument, "negative")
	_, err = s.PullEmbeddingVectors(context.Background(), &pserverpb.PullEmbeddingVectorsRequest{Name: "x", Ids: []int64{1}})
	wantCode(t, err, codes.InvalidArgument, "no table")
	u, _ := NewServer(Config{Index: 0, NumPS: 1, Optimizer: parseOpt(t, "sgd:learning_rate=1")})
	_, err = u.PullEmbeddingVectors(context.Background(), &pserverpb.PullEmbeddingVectorsRequest{Name: "user", Ids: []int64{1}})
	wantCode(t, err, codes.FailedPrecondition, "not initialized")
	_, err = u.PushModel(context.Background(), &pserverpb.Model{EmbeddingTableInfos: []*pserverpb.EmbeddingTableInfo{{Name: "a", Dim: 2, Initializer: "bogus:1"}}})
	wantCode(t, err, codes.InvalidArgument, "unknown kind")
}

func TestEmbeddingConcurrentPullPush(t *testing.T) {
	s := embServer(t, 0, 1, "adam:learning_rate=0.001")
	var wg sync.WaitGroup
	const workers, steps = 4, 50
	for w := range workers {
		wg.Go(func() {
			ids := make([]int64, 64)
			vals := make([]float32, 64*4)
			for i := range vals {
				vals[i] = 0.01
			}
			for k := range steps {
				for i := range ids {
					ids[i] = int64((w*7 + k*13 + i*31) % 500)
				}
				pull(t, s, "user", ids...)
				if err := pushSparse(s, slices1("user", 4, ids, vals)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if v := s.Version(); v != workers*steps {
		t.Fatalf("version %d", v)
	}
}

// TestEmbeddingCheckpointReshard: 2 shards with tables and Adam slots are
// checkpointed and restored into 1; the rows and their optimizer state
// (step counts included) carry over, so one more identical push gives the
// same rows as on the originals.
func TestEmbeddingCheckpointReshard(t *testing.T) {
	dir := t.TempDir()
	const spec = "adam:learning_rate=0.01"
	old := []*Server{embServer(t, 0, 2, spec), embServer(t, 1, 2, spec)}
	push := func(servers []*Server, ids []int64, g float32) {
		t.Helper()
		for i, s := range servers {
			var mine []int64
			for _, id := range ids {
				if EmbeddingShardOf(id, len(servers)) == i {
					mine = append(mine, id)
				}
			}
			vals := make([]float32, 0, 4*len(mine))
			for _, id := range mine {
				vals = append(vals, g, g*float32(id), -g, 1)
			}
			if err := pushSparse(s, slices1("user", 4, mine, vals)); err != nil {
				t.Fatal(err)
			}
		}
	}
	push(old, []int64{0, 1, 2, 3, 10, 11}, 0.5)
	push(old, []int64{1, 2, 11}, -1)
	pull(t, old[0], "item", 4) // a pulled, never-updated row: no step
	for _, s := range old {
		if _, err := checkpoint.Write(dir, s.snapshot(s.table.Load(), 2)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := checkpoint.ReadVersion(dir, 2); err != nil {
		t.Fatal(err)
	}
	one, err := NewServer(Config{Index: 0, NumPS: 1, Optimizer: parseOpt(t, spec), CheckpointDir: filepath.Clean(dir)})
	if err != nil {
		t.Fatal(err)
	}
	if v := one.Version(); v != 2 {
		t.Fatalf("restored version %d", v)
	}
	got := one.EmbeddingRows("user")
	if len(got) != 6 {
		t.Fatalf("restored %d user rows, want 6", len(got))
	}
	for _, s := range old {
		for id, row := range s.EmbeddingRows("user") {
			if !slices.Equal(got[id], row) {
				t.Fatalf("row %d: %v, want %v", id, got[id], row)
			}
		}
	}
	if r := one.EmbeddingRows("item"); len(r) != 1 {
		t.Fatalf("item rows %v", r)
	}
	push(old, []int64{1, 2, 3, 10}, 0.25)
	push([]*Server{one}, []int64{1, 2, 3, 10}, 0.25)
	after := one.EmbeddingRows("user")
	for _, s := range old {
		for id, row := range s.EmbeddingRows("user") {
			if !slices.Equal(after[id], row) {
				t.Fatalf("after one more push, row %d: %v, want %v (slots not restored?)", id, after[id], row)
			}
		}
	}
}

// TestEmbeddingRestoreIntoAnotherOptimizer: Adam slots do not fit Adagrad;
// rows are restored, slots restart from Adagrad's initial accumulator.
func TestEmbeddingRestoreIntoAnotherOptimizer(t *testing.T) {
	dir := t.TempDir()
	a := embServer(t, 0, 1, "adam:learning_rate=0.01")
	if err := pushSparse(a, slices1("user", 4, []int64{4, 9}, []float32{1, 2, 3, 4, 5, 6, 7, 8})); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.Write(dir, a.snapshot(a.table.Load(), 1)); err != nil {
		t.Fatal(err)
	}
	const spec = "adagrad:learning_rate=0.1,initial_accumulator_value=0.1"
	logs := &logBuffer{}
	b, err := NewServer(Config{Index: 0, NumPS: 1, Optimizer: parseOpt(t, spec), CheckpointDir: dir, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	rows := a.EmbeddingRows("user")
	if got := b.EmbeddingRows("user"); !slices.Equal(got[4], rows[4]) || !slices.Equal(got[9], rows[9]) {
		t.Fatalf("rows %v, want %v", got, rows)
	}
	if !strings.Contains(logs.String(), "embedding slots do not fit") {
		t.Fatalf("no warning in %s", logs.String())
	}
	g := []float32{1, -1, 0.5, 2}
	if err := pushSparse(b, slices1("user", 4, []int64{4}, g)); err != nil {
		t.Fatal(err)
	}
	ref := slices.Clone(rows[4])
	if err := parseOpt(t, spec).Apply("r", ref, g, 1); err != nil {
		t.Fatal(err)
	}
	if got := b.EmbeddingRows("user")[4]; !slices.Equal(got, ref) {
		t.Fatalf("after push %v, want fresh-slot Adagrad %v", got, ref)
	}
}
