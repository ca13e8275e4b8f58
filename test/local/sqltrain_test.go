package local

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"elasticdl/internal/master"
	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// runSQL runs elasticdl sql args and returns its exit code and output.
func runSQL(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runSQLIn(t, "", args...)
}

// modelName is a model name of the test's own, its row deleted at the
// end: the servers' models table is shared by the runs on them.
func modelName(t *testing.T, db *sqldbtest.DB) string {
	name := "m_" + strings.ToLower(rand.Text()[:10])
	t.Cleanup(func() { db.SQL.Exec("DELETE FROM " + sqldb.ModelsTable + " WHERE name = '" + name + "'") })
	return name
}

// summaryOf reads a job summary's JSON.
func summaryOf(t *testing.T, data []byte) master.Summary {
	t.Helper()
	var s master.Summary
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("summary %q: %v", data, err)
	}
	return s
}

// TestSQLTrainInto trains ctr.wide_and_deep by a TO TRAIN statement on
// each database, its features by the columns' types and its shape from
// them; the model stored INTO the models table is loaded back, and
// evaluated on the held-out table gives the training job's own result.
// INTO the same name again is refused before training.
func TestSQLTrainInto(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		train, validTable := sqlTable(t, db, 3000, 1), sqlTable(t, db, 1000, 2)
		valid := db.Source("table=" + validTable + "&label=y")
		name := modelName(t, db)
		stmt := "SELECT * FROM " + train + " TO TRAIN ctr.wide_and_deep\n  WITH train.epoch = 2, train.optimizer = 'adam:learning_rate=0.01', train.minibatch_size = 64\n  LABEL y INTO " + name
		code, out, errOut := runSQL(t, "--datasource="+db.URI, "--num_workers=2", "--validation_data="+valid, "-e", stmt)
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		for _, re := range []string{`(?m)^x1 +\| \S+.* \| dense$`, `(?m)^c +\| \S+.* \| categorical$`, `(?m)^y +\| \S+.* \| label$`,
			"features: 2 dense, 1 categorical", "model " + name + " stored in table elasticdl_models"} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("stdout has no %s:\n%s", re, out)
			}
		}
		dir := filepath.Join(t.TempDir(), "model")
		m, err := sqldb.LoadModel(context.Background(), db.SQL, db.Dialect, name, dir)
		if err != nil {
			t.Fatal(err)
		}
		if m.Statement != stmt || m.ModelDef != "ctr.wide_and_deep" || m.ModelParams != "dense=2; fields=1" {
			t.Errorf("stored %+v", m)
		}
		s := summaryOf(t, []byte(m.Summary))
		if s.Status != "succeeded" || s.Eval == nil || s.Eval.AUC == nil || *s.Eval.AUC < 0.9 {
			t.Fatalf("stored summary %s: want a succeeded job with an AUC of at least 0.9", m.Summary)
		}
		if pw := sqldb.Password(db.URI); pw != "" && strings.Contains(out+errOut+m.Summary, pw) {
			t.Error("the password shows in the output or the stored summary")
		}
		evalOut := t.TempDir()
		ev := exec.Command(binary, "evaluate", "--model_def="+m.ModelDef, "--model_params="+m.ModelParams,
			"--checkpoint_dir_for_init="+dir, "--validation_data="+valid, "--output="+evalOut)
		if b, err := ev.CombinedOutput(); err != nil {
			t.Fatalf("evaluate the loaded model: %v\n%s", err, b)
		}
		b, err := os.ReadFile(filepath.Join(evalOut, "job_summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		if e := summaryOf(t, b).Eval; e == nil || e.AUC == nil || e.ModelVersion != s.Eval.ModelVersion || math.Abs(*e.AUC-*s.Eval.AUC) > 1e-9 {
			t.Errorf("the loaded model evaluates to %+v, the trained one to %+v", e, s.Eval)
		}
		code, out, errOut = runSQL(t, "--datasource="+db.URI, "-e", stmt)
		if code == 0 || !strings.Contains(errOut, "a model of that name is stored: INTO OR REPLACE "+name+" replaces it") || out != "" {
			t.Errorf("INTO %s again: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
		sqlEvaluate(t, db, name, validTable, *s.Eval.AUC)
		sqlPredict(t, db, name, validTable, m, dir)
		// With the training table gone, the query's columns but the label
		// are the features: the same predictions.
		db.Exec(t, "DROP TABLE "+train)
		pred := "p_" + strings.ToLower(rand.Text()[:10])
		t.Cleanup(func() { db.SQL.Exec("DROP TABLE IF EXISTS " + pred) })
		code, out, errOut = runSQL(t, "--datasource="+db.URI, "-e", "SELECT * FROM "+validTable+" ORDER BY x1 TO PREDICT "+pred+".y USING "+name)
		if code != 0 || !strings.Contains(out, "model "+name+" takes its features from this query's columns but y (its training query fails: ") {
			t.Fatalf("TO PREDICT, the training table gone: exit %d\n%s\n%s", code, out, errOut)
		}
		checkPredicted(t, db, pred, predictCSV(t, db, m, dir, validTable))
	})
}

// sqlEvaluate evaluates the stored model by TO EVALUATE on table valid:
// the AUC written INTO a new results table is
// auc, the training job's on the same rows. A missing model is an error
// that writes nothing.
func sqlEvaluate(t *testing.T, db *sqldbtest.DB, name, valid string, auc float64) {
	t.Helper()
	results := "r_" + strings.ToLower(rand.Text()[:10])
	t.Cleanup(func() { db.SQL.Exec("DROP TABLE IF EXISTS " + results) })
	stmt := "SELECT * FROM " + valid + " TO EVALUATE " + name + " WITH validation.metrics = 'AUC,accuracy' LABEL y INTO " + results
	code, out, errOut := runSQL(t, "--datasource="+db.URI, "--num_workers=1", "-e", stmt)
	if code != 0 || !regexp.MustCompile(`(?m)^AUC +\| 0\.\d{6}$`).MatchString(out) || !strings.Contains(out, "2 metrics of model "+name+" on 1000 rows written into "+results) {
		t.Fatalf("TO EVALUATE: exit %d\n%s\n%s", code, out, errOut)
	}
	var got float64
	var n int
	if err := db.SQL.QueryRow("SELECT value, records FROM "+results+" WHERE model = '"+name+"' AND metric = 'AUC'").Scan(&got, &n); err != nil || math.Abs(got-auc) > 1e-9 || n != 1000 {
		t.Errorf("AUC written %v on %d rows, %v; the training job's %v on 1000", got, n, err, auc)
	}
	if err := db.SQL.QueryRow("SELECT COUNT(*) FROM " + results).Scan(&n); err != nil || n != 2 {
		t.Errorf("%s holds %d rows, %v; want AUC and Accuracy", results, n, err)
	}
	missing := strings.Replace(stmt, "TO EVALUATE "+name, "TO EVALUATE no_such_model", 1)
	code, out, errOut = runSQL(t, "--datasource="+db.URI, "-e", missing)
	if code == 0 || !strings.Contains(errOut, "TO EVALUATE no_such_model: no model no_such_model in elasticdl_models") || out != "" {
		t.Errorf("a missing model: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestSQLTrainShapes: a table of ticdata's shape, 23 numeric and 62 text
// columns, trains with no model.* attribute; a COLUMN clause then
// replaces the model INTO OR REPLACE with a YAML model file on two of
// the columns (SQLite).
func TestSQLTrainShapes(t *testing.T) {
	db := sqldbtest.Open(t, "sqlite")
	var defs, names []string
	for i := range 85 {
		n, typ := fmt.Sprintf("n%d", i), "INTEGER"
		if i >= 23 {
			n, typ = fmt.Sprintf("c%d", i), "TEXT"
		}
		defs, names = append(defs, n+" "+typ), append(names, n)
	}
	table := db.NewTable(t, append(defs, "y INTEGER")...)
	var rows [][]any
	for r := range 300 {
		row := make([]any, 0, 86)
		for i := range 85 {
			if i < 23 {
				row = append(row, (r*7+i)%11)
			} else {
				row = append(row, fmt.Sprintf("v%d", (r+i)%5))
			}
		}
		rows = append(rows, append(row, r%2))
	}
	db.Insert(t, table, strings.Join(names, ", ")+", y", rows...)
	name := modelName(t, db)
	ds := "--datasource=" + db.URI
	code, out, errOut := runSQL(t, ds, "--num_workers=1", "-e", "SELECT * FROM "+table+" TO TRAIN ctr.deepfm LABEL y INTO "+name)
	if code != 0 || !strings.Contains(out, "features: 23 dense, 62 categorical") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	check := func(def, params string) {
		t.Helper()
		m, err := sqldb.LoadModel(context.Background(), db.SQL, db.Dialect, name, t.TempDir())
		if err != nil || m.ModelDef != def || m.ModelParams != params {
			t.Errorf("stored %+v, %v; want %s with %q", m, err, def, params)
		}
	}
	check("ctr.deepfm", "dense=23; fields=62")
	yaml := filepath.Join(t.TempDir(), "tabular.yaml")
	spec := "name: tabular\ninput_shape: [2]\nnum_classes: 2\noptimizer: adam:learning_rate=0.01\nlayers:\n  - dense: {units: 4}\n  - relu: {}\n  - dense: {units: 2}\n"
	if err := os.WriteFile(yaml, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	stmt := fmt.Sprintf("SELECT * FROM %s TO TRAIN '%s' WITH train.epoch = 1 COLUMN n0, NUMERIC(c30) LABEL y INTO OR REPLACE %s", table, yaml, name)
	if code, out, errOut = runSQL(t, ds, "--num_workers=1", "-e", stmt); code != 0 || !strings.Contains(out, "features: 2 dense, 0 categorical") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	check(yaml, "")
	// PREDICT takes the COLUMN clause's features (c30 cast to a number),
	// not every column the query has.
	pred := "p_" + strings.ToLower(rand.Text()[:10])
	code, out, errOut = runSQL(t, ds, "-e", "SELECT n0, n1, c30 FROM "+table+" TO PREDICT "+pred+".y USING "+name+"; SELECT * FROM "+pred+" LIMIT 1")
	if code != 0 || !strings.Contains(out, "300 predictions of model "+name+" written into "+pred) ||
		!strings.Contains(out, "takes its features from its COLUMN clause") || !regexp.MustCompile(`(?m)^n0 +\| n1 +\| c30 +\| y +\| y_p1$`).MatchString(out) {
		t.Errorf("TO PREDICT with a COLUMN clause's model: exit %d\n%s\n%s", code, out, errOut)
	}
}
