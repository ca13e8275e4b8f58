package local

import (
	"crypto/rand"
	"encoding/csv"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// sqlPredict predicts table valid's rows, ordered by x1, by TO PREDICT
// with the stored model m (extracted in dir): one row per input row, in
// order, with the input's columns, the label replaced by the predicted
// class, and class 1's probability that elasticdl predict gives on the
// same rows. Predicting into the table again is refused and changes
// nothing; no staging table is left.
func sqlPredict(t *testing.T, db *sqldbtest.DB, name, valid string, m sqldb.StoredModel, dir string) {
	t.Helper()
	pred := "p_" + strings.ToLower(rand.Text()[:10])
	t.Cleanup(func() { db.SQL.Exec("DROP TABLE IF EXISTS " + pred) })
	// What a killed run left goes first.
	db.Exec(t, "CREATE TABLE "+pred+"__edl_in (junk INTEGER)")
	stmt := "SELECT * FROM " + valid + " ORDER BY x1 TO PREDICT " + pred + ".y WITH predict.minibatch_size = 100 USING " + name
	code, out, errOut := runSQL(t, "--datasource="+db.URI, "--num_workers=1", "-e", stmt)
	if code != 0 || !strings.Contains(out, "1000 predictions of model "+name+" written into "+pred+" (column y)") ||
		!strings.Contains(out, "model "+name+" takes its features from its training query's columns but y\n") {
		t.Fatalf("TO PREDICT: exit %d\n%s\n%s", code, out, errOut)
	}
	checkPredicted(t, db, pred, predictCSV(t, db, m, dir, valid))
	var n int
	code, out, errOut = runSQL(t, "--datasource="+db.URI, "-e", stmt)
	if code == 0 || !strings.Contains(errOut, "table "+pred+" exists: drop it first") || out != "" {
		t.Errorf("TO PREDICT into %s again: exit %d, stdout %q, stderr %q", pred, code, out, errOut)
	}
	if err := db.SQL.QueryRow("SELECT COUNT(*) FROM " + pred).Scan(&n); err != nil || n != 1000 {
		t.Errorf("%s after the refusal: %d rows, %v", pred, n, err)
	}
	if left := db.Tables(t, pred+"__edl_"); len(left) > 0 {
		t.Errorf("staging tables left: %q", left)
	}
	code, out, errOut = runSQL(t, "--datasource="+db.URI, "-e", "SELECT * FROM "+valid+" WHERE 1 = 0 TO PREDICT "+pred+"_c.y USING "+name)
	if code == 0 || !strings.Contains(errOut, "the SELECT has no rows: nothing to predict") || len(db.Tables(t, pred+"_c")) > 0 {
		t.Errorf("no rows: exit %d, stderr %q, tables %q", code, errOut, db.Tables(t, pred+"_c"))
	}
	// A feature the model was trained on missing: an error after staging,
	// which goes, and no result table.
	other := pred + "_b"
	code, out, errOut = runSQL(t, "--datasource="+db.URI, "-e", "SELECT x1, c FROM "+valid+" TO PREDICT "+other+".y USING "+name)
	if code == 0 || !strings.Contains(errOut, "USING "+name+": column x2, a feature of the model, is not one of the query's columns: x1, c\n") || strings.Contains(out, "predictions") {
		t.Errorf("a missing feature: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if left := db.Tables(t, other); len(left) > 0 {
		t.Errorf("a failed TO PREDICT left %q", left)
	}
}

// predictCSV is elasticdl predict's CSV of the stored model m (extracted
// in dir) on table valid's rows ordered by x1, header included.
func predictCSV(t *testing.T, db *sqldbtest.DB, m sqldb.StoredModel, dir, valid string) [][]string {
	t.Helper()
	csvOut := filepath.Join(t.TempDir(), "p.csv")
	cmd := exec.Command(binary, "predict", "--model_def="+m.ModelDef, "--model_params="+m.ModelParams, "--checkpoint_dir_for_init="+dir,
		"--prediction_data="+db.Source("query="+url.QueryEscape("SELECT * FROM "+valid)+"&order=x1&label=y"),
		"--prediction_outputs="+csvOut, "--output="+t.TempDir())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("elasticdl predict: %v\n%s", err, b)
	}
	f, err := os.Open(csvOut)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, err := csv.NewReader(f).ReadAll()
	if err != nil || len(want) != 1001 {
		t.Fatalf("elasticdl predict's CSV: %d rows, %v", len(want), err)
	}
	return want
}

// checkPredicted: table pred holds x1, x2, c, y (the class) and y_p1,
// one row per row of want (elasticdl predict's CSV), in its order, ordered
// by x1, class 1's probability within 1e-6 of want's.
func checkPredicted(t *testing.T, db *sqldbtest.DB, pred string, want [][]string) {
	t.Helper()
	rows, err := db.SQL.Query("SELECT * FROM " + pred)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if strings.Join(cols, ",") != "x1,x2,c,y,y_p1" {
		t.Errorf("%s's columns: %q, want x1, x2, c, y, y_p1", pred, cols)
	}
	n, last := 0, math.Inf(-1)
	for rows.Next() {
		var x1, x2, p1 float64
		var c string
		var class int64
		if err := rows.Scan(&x1, &x2, &c, &class, &p1); err != nil {
			t.Fatal(err)
		}
		n++
		wp1, _ := strconv.ParseFloat(want[n][3], 64)
		if x1 < last || strconv.FormatInt(class, 10) != want[n][1] || math.Abs(p1-wp1) > 1e-6 {
			t.Fatalf("row %d: x1 %v (the one before %v), class %d, p1 %v; elasticdl predict's %q", n-1, x1, last, class, p1, want[n])
		}
		last = x1
	}
	if err := rows.Err(); err != nil || n != len(want)-1 {
		t.Fatalf("%s: %d rows, %v; want %d", pred, n, err, len(want)-1)
	}
}
