package local

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/sqldb/sqldbtest"
)

// runSQLIn runs elasticdl sql args in directory dir ("": this one).
func runSQLIn(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"sql"}, args...)...)
	cmd.Dir = dir
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("elasticdl sql: %v", err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// TestSQLCategoryHash trains ctr.deepfm on CATEGORY_HASH columns, a text
// one in an EMBEDDING and an integer one; TO PREDICT and TO EVALUATE
// hash them as training did (SQLite).
func TestSQLCategoryHash(t *testing.T) {
	db := sqldbtest.Open(t, "sqlite")
	table := db.NewTable(t, "n0 INTEGER", "c TEXT", "k INTEGER", "y INTEGER")
	var rows [][]any
	for r := range 200 {
		rows = append(rows, []any{r % 7, fmt.Sprintf("v%d", r%13), r % 5, r % 2})
	}
	db.Insert(t, table, "n0, c, k, y", rows...)
	name := modelName(t, db)
	ds := "--datasource=" + db.URI
	stmt := "SELECT n0, c, k, y FROM " + table + " TO TRAIN ctr.deepfm WITH train.epoch = 1 " +
		"COLUMN n0, EMBEDDING(CATEGORY_HASH(c, 50), 4), CATEGORY_HASH(k, 7) LABEL y INTO " + name
	code, out, errOut := runSQL(t, ds, "--num_workers=1", "-e", stmt)
	if code != 0 || !strings.Contains(out, "features: 1 dense, 2 categorical") {
		t.Fatalf("TO TRAIN: exit %d\n%s\n%s", code, out, errOut)
	}
	predictEvaluate(t, "", ds, name, "SELECT n0, c, k FROM "+table, "SELECT n0, c, k, y FROM "+table, "Accuracy", "1 metric", 200)
}

// predictEvaluate runs TO PREDICT of model name on predSelect and TO
// EVALUATE on evalSelect with metrics, in dir, and checks that both
// wrote their rows: rows predictions, and wantMetrics on rows rows.
func predictEvaluate(t *testing.T, dir, ds, name, predSelect, evalSelect, metrics, wantMetrics string, rows int) {
	t.Helper()
	pred := "p_" + strings.ToLower(rand.Text()[:10])
	results := "r_" + strings.ToLower(rand.Text()[:10])
	code, out, errOut := runSQLIn(t, dir, ds, "-e", predSelect+" TO PREDICT "+pred+".y USING "+name+";\n"+
		evalSelect+" TO EVALUATE "+name+" WITH validation.metrics = '"+metrics+"' LABEL y INTO "+results)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d predictions of model %s written into %s", rows, name, pred)) ||
		!strings.Contains(out, fmt.Sprintf("%s of model %s on %d rows written into %s", wantMetrics, name, rows, results)) {
		t.Errorf("TO PREDICT and TO EVALUATE: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestSQLStoredYAML: a model trained from a YAML file is used by TO
// PREDICT and TO EVALUATE from another directory after the file is gone:
// the models table keeps its text (SQLite).
func TestSQLStoredYAML(t *testing.T) {
	db := sqldbtest.Open(t, "sqlite")
	table := db.NewTable(t, "a INTEGER", "b DOUBLE PRECISION", "y INTEGER")
	var rows [][]any
	for r := range 120 {
		rows = append(rows, []any{r % 9, float64(r%4) / 2, r % 2})
	}
	db.Insert(t, table, "a, b, y", rows...)
	name := modelName(t, db)
	ds := "--datasource=" + db.URI
	yaml := filepath.Join(t.TempDir(), "small.yaml")
	spec := "input_shape: [2]\nnum_classes: 2\nlayers:\n  - dense: {units: 4}\n  - relu: {}\n  - dense: {units: 2}\n"
	if err := os.WriteFile(yaml, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	stmt := fmt.Sprintf("SELECT * FROM %s TO TRAIN '%s' WITH train.epoch = 1 LABEL y INTO %s", table, yaml, name)
	if code, out, errOut := runSQL(t, ds, "--num_workers=1", "-e", stmt); code != 0 {
		t.Fatalf("TO TRAIN: exit %d\n%s\n%s", code, out, errOut)
	}
	if err := os.Remove(yaml); err != nil {
		t.Fatal(err)
	}
	// From another directory, the file gone: the text is the table's.
	predictEvaluate(t, t.TempDir(), ds, name, "SELECT a, b FROM "+table, "SELECT * FROM "+table, "Accuracy,Loss", "2 metrics", 120)
}

// TestSQLKeepSnapshot: train.keep_snapshot keeps the job's snapshot
// table, the master naming it; a later script that runs a job drops it
// once older than --snapshot_max_age (SQLite).
func TestSQLKeepSnapshot(t *testing.T) {
	db := sqldbtest.Open(t, "sqlite")
	table := db.NewTable(t, "a INTEGER", "c TEXT", "y INTEGER")
	var rows [][]any
	for r := range 40 {
		rows = append(rows, []any{r % 3, fmt.Sprint(r % 4), r % 2})
	}
	db.Insert(t, table, "a, c, y", rows...)
	name := modelName(t, db)
	ds := "--datasource=" + db.URI
	stmt := "SELECT * FROM " + table + " TO TRAIN ctr.wide_and_deep WITH train.epoch = 1, train.keep_snapshot = true LABEL y INTO " + name
	code, out, errOut := runSQL(t, ds, "--num_workers=1", "-e", stmt)
	kept := db.Tables(t, "elasticdl_snap_")
	if code != 0 || len(kept) != 1 || !strings.Contains(errOut, "data snapshot kept (--keep_snapshot)") || !strings.Contains(errOut, kept[0]) {
		t.Fatalf("exit %d, snapshots %v\n%s\n%s", code, kept, out, errOut)
	}
	code, _, errOut = runSQL(t, ds, "--snapshot_max_age=1ns", "-e", "SELECT * FROM "+table+" TO PREDICT p.y USING no_model")
	if left := db.Tables(t, "elasticdl_snap_"); len(left) != 0 || !strings.Contains(errOut, "dropped snapshot table "+kept[0]) {
		t.Errorf("the sweep: exit %d, left %v, stderr %s", code, left, errOut)
	}
}
