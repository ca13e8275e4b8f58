package sqldb_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// checkpointDir makes a directory like a job's OUTPUT/model.
func checkpointDir(t *testing.T, payload string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"version-7/ps-0.ckpt": payload, "version-7/ps-1.ckpt": payload + "1", "model_spec.json": `{"x":1}`}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// sameTree fails unless a and b hold the same files with the same bytes.
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	ta, err := sqldb.TarDir(a)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := sqldb.TarDir(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta, tb) {
		t.Errorf("%s and %s differ", a, b)
	}
}

// TestModelsRoundTrip stores a model, refuses its name again, replaces
// it, and loads it back into a directory equal to the one stored.
func TestModelsRoundTrip(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		ctx := context.Background()
		db.Exec(t, "DROP TABLE IF EXISTS "+sqldb.ModelsTable)
		t.Cleanup(func() { db.SQL.Exec("DROP TABLE IF EXISTS " + sqldb.ModelsTable) })
		if have, err := sqldb.ModelExists(ctx, db.SQL, db.Dialect, "m"); err != nil || have {
			t.Fatalf("no table yet: exists %v, %v", have, err)
		}
		m := sqldb.StoredModel{Name: "m", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Statement: "SELECT 'it''s' TO TRAIN x INTO m",
			ModelDef: "ctr.wide_and_deep", ModelParams: "dense=2; fields=1", Summary: `{"status":"succeeded"}`}
		first := checkpointDir(t, strings.Repeat("a", 100000))
		if _, err := sqldb.StoreModel(ctx, db.SQL, db.Dialect, m, first, false); err != nil {
			t.Fatal(err)
		}
		second := checkpointDir(t, "b")
		if _, err := sqldb.StoreModel(ctx, db.SQL, db.Dialect, m, second, false); !errors.Is(err, sqldb.ErrModelExists) {
			t.Fatalf("stored over an existing model without OR REPLACE: %v", err)
		}
		out := filepath.Join(t.TempDir(), "ckpt")
		got, err := sqldb.LoadModel(ctx, db.SQL, db.Dialect, "m", out)
		if err != nil {
			t.Fatal(err)
		}
		if got != m {
			t.Errorf("loaded %+v, want %+v", got, m)
		}
		sameTree(t, first, out)
		m.ModelParams = "dense=3"
		if _, err := sqldb.StoreModel(ctx, db.SQL, db.Dialect, m, second, true); err != nil {
			t.Fatal(err)
		}
		out2 := filepath.Join(t.TempDir(), "ckpt")
		if got, err = sqldb.LoadModel(ctx, db.SQL, db.Dialect, "m", out2); err != nil || got.ModelParams != "dense=3" {
			t.Fatalf("after OR REPLACE: %+v, %v", got, err)
		}
		sameTree(t, second, out2)
		if _, err := sqldb.LoadModel(ctx, db.SQL, db.Dialect, "nope", out2); err == nil || !strings.Contains(err.Error(), "no model nope") {
			t.Errorf("loading a missing model: %v", err)
		}
	})
}

// TestModelsOlderTable: a models table an older version made, without
// model_text, still loads its models (text ""); storing a model adds the
// column, and its text loads back.
func TestModelsOlderTable(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		ctx := context.Background()
		db.Exec(t, "DROP TABLE IF EXISTS "+sqldb.ModelsTable)
		t.Cleanup(func() { db.SQL.Exec("DROP TABLE IF EXISTS " + sqldb.ModelsTable) })
		old := sqldb.StoredModel{Name: "old", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ModelDef: "ctr.deepfm"}
		if _, err := sqldb.StoreModel(ctx, db.SQL, db.Dialect, old, checkpointDir(t, "o"), false); err != nil {
			t.Fatal(err)
		}
		db.Exec(t, "ALTER TABLE "+sqldb.ModelsTable+" DROP COLUMN model_text")
		if got, err := sqldb.LoadModel(ctx, db.SQL, db.Dialect, "old", t.TempDir()); err != nil || got != old {
			t.Fatalf("from a table without model_text: %+v, %v", got, err)
		}
		yaml := sqldb.StoredModel{Name: "yaml", CreatedAt: old.CreatedAt, ModelDef: "/gone/m.yaml", ModelText: "name: m\nlayers: []\n"}
		for range 2 { // the second finds the column there
			if _, err := sqldb.StoreModel(ctx, db.SQL, db.Dialect, yaml, checkpointDir(t, "y"), true); err != nil {
				t.Fatal(err)
			}
		}
		for _, want := range []sqldb.StoredModel{old, yaml} {
			if got, err := sqldb.LoadModel(ctx, db.SQL, db.Dialect, want.Name, t.TempDir()); err != nil || got != want {
				t.Errorf("after the column was added: %+v, %v; want %+v", got, err, want)
			}
		}
	})
}

// TestTarDirDeterministic: the same files give the same bytes whatever
// their times.
func TestTarDirDeterministic(t *testing.T) {
	a, b := checkpointDir(t, "x"), checkpointDir(t, "x")
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(b, "model_spec.json"), old, old); err != nil {
		t.Fatal(err)
	}
	sameTree(t, a, b)
	if _, err := sqldb.TarDir(filepath.Join(a, "missing")); err == nil {
		t.Error("archived a missing directory")
	}
}

// TestUntarRefuses names outside the directory and links.
func TestUntarRefuses(t *testing.T) {
	for _, h := range []tar.Header{
		{Name: "../evil", Typeflag: tar.TypeReg},
		{Name: "/abs", Typeflag: tar.TypeReg},
		{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Close()
		if err := sqldb.Untar(buf.Bytes(), t.TempDir()); err == nil {
			t.Errorf("%s: extracted", h.Name)
		}
	}
	if err := sqldb.Untar([]byte("not a tar archive at all, but long enough to be read as a header block"), t.TempDir()); err == nil {
		t.Error("extracted garbage")
	}
}
