package client

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/ps/optimizer"
)

// TestSaveModelWithTables: SaveModel makes every shard write its dense
// parameters and embedding rows as one complete checkpoint version, which
// a PS (of another count) restores with the same rows; GetStatus reports
// the restore.
func TestSaveModelWithTables(t *testing.T) {
	procs, _, c, ctx, params := pushedCluster(t, 2, 0.5, 10*time.Second, tables...)
	ids := []int64{0, 1, 2, 3, 7}
	rows := make([]float32, len(ids)*3)
	if err := c.PullEmbeddings(ctx, "user", ids, rows); err != nil {
		t.Fatal(err)
	}
	setGrads(params, 0)
	if ok, err := c.Push(ctx, params, []SparseGrad{{Table: "user", IDs: []int64{1, 2}, Values: []float32{1, 1, 1, 2, 2, 2}}}, 0, AllShards); err != nil || !ok {
		t.Fatal(ok, err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if !s.Initialized || s.RestoredVersion != -1 || s.Version != 1 {
			t.Errorf("shard %d status %+v, want initialized at version 1, not restored", i, s)
		}
	}

	dir := filepath.Join(t.TempDir(), "model")
	paths, err := c.SaveModel(ctx, dir, 7)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{checkpoint.Path(dir, 7, 0, 2), checkpoint.Path(dir, 7, 1, 2)}; !slices.Equal(paths, want) {
		t.Fatalf("paths %v, want %v", paths, want)
	}
	set, err := checkpoint.Load(dir, nil)
	if err != nil || set.Version != 7 || set.NumShards != 2 {
		t.Fatalf("saved model: %+v, %v", set, err)
	}
	if _, err := c.SaveModel(ctx, "", 7); err == nil {
		t.Error("SaveModel without a directory: no error")
	}

	// One PS restores both shards' rows from the saved model.
	opt, _ := optimizer.NewSGD("sgd", 0.5, 0, false)
	one, err := ps.NewServer(ps.Config{Index: 0, NumPS: 1, Optimizer: opt, CheckpointDirForInit: dir})
	if err != nil {
		t.Fatal(err)
	}
	got := one.EmbeddingRows("user")
	for _, p := range procs {
		for id, row := range p.srv.EmbeddingRows("user") {
			if !slices.Equal(got[id], row) {
				t.Errorf("row %d restored as %v, want %v", id, got[id], row)
			}
		}
	}
	if len(got) != len(ids) {
		t.Errorf("%d rows restored, want %d", len(got), len(ids))
	}
	wantParams := map[string][]float32{}
	for _, p := range procs {
		for k, v := range p.srv.Parameters() {
			wantParams[k] = v
		}
	}
	wantValues(t, one.Parameters(), wantParams)
	resp, err := one.GetStatus(ctx, nil)
	if err != nil || !resp.GetRestored() || resp.GetRestoredVersion() != 7 || resp.GetRestoredDir() != checkpoint.VersionDir(dir, 7) || resp.GetVersion() != 7 {
		t.Errorf("status after restore: %v, %v", resp, err)
	}
}
