package cli

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqlflow"
)

// trainOf parses one TO TRAIN statement.
func trainOf(t *testing.T, src string) *sqlflow.Train {
	t.Helper()
	stmts, err := sqlflow.Parse(src)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return stmts[0].(*sqlflow.Train)
}

var testCols = []sqldb.Column{
	{Name: "x1", Type: "REAL", Kind: sqldb.Number}, {Name: "n", Type: "INTEGER", Kind: sqldb.Number},
	{Name: "c", Type: "TEXT", Kind: sqldb.Text}, {Name: "d", Type: "DATE"}, {Name: "y", Type: "INTEGER", Kind: sqldb.Number},
}

// TestPlanFeatures: the columns' kinds by type, or by the COLUMN clause,
// and the mistakes, each at its place.
func TestPlanFeatures(t *testing.T) {
	for _, c := range []struct {
		columns, want, err string
		cols               []sqldb.Column
		project            []sqldb.Projected
		dense, fields, dim int
	}{
		{cols: append(testCols[:3:3], testCols[4]), want: "x1 dense, n dense, c categorical, y label", dense: 2, fields: 1},
		{cols: testCols, err: "column d has type DATE, which a model cannot take"},
		{columns: "COLUMN x1, CATEGORY_ID(n, 10), c", want: "x1 dense, n categorical, c categorical, y label", fields: 2, dense: 1,
			project: []sqldb.Projected{{Name: "x1"}, {Name: "n", Cast: sqldb.Text}, {Name: "c"}, {Name: "y"}}},
		{columns: "COLUMN NUMERIC(c), EMBEDDING(CATEGORY_ID(n, 100), 16)", want: "c dense, n categorical, y label", dense: 1, fields: 1, dim: 16,
			project: []sqldb.Projected{{Name: "c", Cast: sqldb.Number}, {Name: "n", Cast: sqldb.Text}, {Name: "y"}}},
		{columns: "COLUMN EMBEDDING(c, 4), NUMERIC(x1, 1)", want: "c categorical, x1 dense, y label", dense: 1, fields: 1, dim: 4,
			project: []sqldb.Projected{{Name: "c"}, {Name: "x1"}, {Name: "y"}}},
		{columns: "COLUMN CATEGORY_HASH(c, 100), EMBEDDING(CATEGORY_HASH(n, 7), 8)", want: "c categorical, n categorical, y label", fields: 2, dim: 8,
			project: []sqldb.Projected{{Name: "c"}, {Name: "n", Cast: sqldb.Text}, {Name: "y"}}},
		{columns: "COLUMN CATEGORY_ID(d, 5)", want: "d categorical, y label", fields: 1,
			project: []sqldb.Projected{{Name: "d", Cast: sqldb.Text}, {Name: "y"}}},
		{columns: "COLUMN x1, z", err: "line 1, column 55: column z is not one of the query's columns: x1, n, c, d, y"},
		{columns: "COLUMN x1, y", err: "line 1, column 55: column y is the LABEL"},
		{columns: "COLUMN x1, NUMERIC(x1)", err: "line 1, column 55: column x1 is named twice"},
		{columns: "COLUMN d", err: "line 1, column 51: column d has type DATE"},
	} {
		src := "SELECT * FROM t TO TRAIN ctr.wide_and_deep " + c.columns + " LABEL y INTO m"
		_, specs, err := checkTrain(trainOf(t, src))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		cols := c.cols
		if cols == nil {
			cols = testCols
		}
		p, err := planFeatures(cols, "y", specs)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", src, err, c.err)
			}
			continue
		}
		var got []string
		for _, f := range p.features {
			got = append(got, f.name+" "+f.kind)
		}
		if err != nil || strings.Join(got, ", ") != c.want || !slices.Equal(p.project, c.project) ||
			p.dense != c.dense || p.fields != c.fields || p.embeddingWidth != c.dim {
			t.Errorf("%s: %v %+v, %v; want %s, %v, %d dense, %d fields, dim %d", src, got, p, err, c.want, c.project, c.dense, c.fields, c.dim)
		}
	}
	if _, err := planFeatures(testCols, "label", nil); err == nil || !strings.Contains(err.Error(), "LABEL label is not one of the query's columns: x1, n, c, d, y") {
		t.Errorf("a missing label: %v", err)
	}
	var pixels []sqldb.Column
	for i := range 785 {
		pixels = append(pixels, sqldb.Column{Name: fmt.Sprintf("p%d", i), Kind: sqldb.Number, Type: "REAL"})
	}
	if _, err := planFeatures(pixels, "label", nil); err == nil || !strings.HasSuffix(err.Error(), "p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, … (785 columns)") {
		t.Errorf("a missing label among 785 columns: %v", err)
	}
}

// TestCheckTrainErrors: COLUMN expressions that are not features, at
// their places.
func TestCheckTrainErrors(t *testing.T) {
	for _, c := range []struct{ columns, want string }{
		{"COLUMN NUMERIC(x1, 3)", "line 1, column 51: NUMERIC(x1, 3): a column is one number"},
		{"COLUMN CATEGORY_ID(c)", "line 1, column 51: CATEGORY_ID(c): wrong arguments"},
		{"COLUMN CATEGORY_ID(c, 0)", "the number of ids must be a whole number above 0"},
		{"COLUMN CATEGORY_HASH(c, 0)", "line 1, column 51: CATEGORY_HASH(c, 0): the number of buckets must be a whole number above 0"},
		{"COLUMN CATEGORY_HASH(c, -3)", "CATEGORY_HASH(c, -3): the number of buckets must be a whole number above 0"},
		{"COLUMN CATEGORY_HASH(c, 2.5)", "CATEGORY_HASH(c, 2.5): the number of buckets must be a whole number above 0"},
		{"COLUMN CATEGORY_HASH(c, 'x')", "the number of buckets must be a whole number above 0"},
		{"COLUMN CATEGORY_HASH(c)", "line 1, column 51: CATEGORY_HASH(c): wrong arguments: want a column's name, NUMERIC(col), CATEGORY_ID(col, n), CATEGORY_HASH(col, n)"},
		{"COLUMN CATEGORY_HASH(c, 3, 4)", "line 1, column 51: CATEGORY_HASH(c, 3, 4): wrong arguments"},
		{"COLUMN CATEGORY_HASH(3, 4)", "line 1, column 65: CATEGORY_HASH(3, 4): its first argument must be a column's name"},
		{"COLUMN EMBEDDING(CATEGORY_HASH(c, 0), 8)", "line 1, column 61: CATEGORY_HASH(c, 0): the number of buckets"},
		{"COLUMN EMBEDDING(c, 'wide')", "the embedding's width must be a whole number above 0"},
		{"COLUMN EMBEDDING(NUMERIC(c), 8)", "EMBEDDING takes CATEGORY_ID(col, n), CATEGORY_HASH(col, n) or a column"},
		{"COLUMN NUMERIC('c')", "line 1, column 59: NUMERIC(\"c\"): its first argument must be a column's name"},
		{"COLUMN 3", "line 1, column 51: COLUMN 3: want a column's name"},
		{"COLUMN x1 FOR deep", "FOR is not used"},
		{"WITH model.dense = 2, validation.metrics = 'AUC'", "unknown attribute validation.metrics: known are model.*"},
		{"WITH train.num_workers = 'many'", `line 1, column 49: train.num_workers: invalid argument "many"`},
	} {
		src := "SELECT * FROM t TO TRAIN ctr.wide_and_deep " + c.columns + " LABEL y INTO m"
		stmts, err := sqlflow.Parse(src)
		if err == nil {
			_, _, err = checkTrain(stmts[0].(*sqlflow.Train))
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", src, err, c.want)
		}
	}
}

// TestDeriveParams: a CTR model's shape from the features, unless the
// statement gives it; a worker program's too; other models' parameters
// as given.
func TestDeriveParams(t *testing.T) {
	p := featurePlan{dense: 23, fields: 62}
	for _, c := range []struct {
		model, given, want string
		worker             bool
	}{
		{"ctr.wide_and_deep", "", "dense=23; fields=62", false},
		{"ctr.deepfm", "fields=10", "fields=10; dense=23", false},
		{"ctr.xdeepfm", "dense=1; fields=2", "dense=1; fields=2", false},
		{"fashion_mnist.cnn", "", "", false},
		{"model.yaml", "hidden=8", "hidden=8", false},
		{"deepfm", "embedding_dim=4", "embedding_dim=4; dense=23; fields=62", true},
	} {
		if got := deriveParams(c.model, c.given, p, c.worker); got != c.want {
			t.Errorf("deriveParams(%s, %q) = %q, want %q", c.model, c.given, got, c.want)
		}
	}
	p.embeddingWidth = 16
	if got := deriveParams("ctr.deepfm", "embedding_dim=4", p, false); got != "embedding_dim=4; dense=23; fields=62" {
		t.Errorf("an embedding_dim given: %q", got)
	}
	if got := deriveParams("ctr.deepfm", "", p, false); got != "dense=23; fields=62; embedding_dim=16" {
		t.Errorf("an EMBEDDING width: %q", got)
	}
}

// TestTrainArgs: train's arguments, the statement's flags last so that
// they win over elasticdl sql's.
func TestTrainArgs(t *testing.T) {
	got := trainArgs("sqlite:///d.db", "ctr.deepfm", "SELECT * FROM t WHERE a = 'x&y'", "y", "dense=1", nil,
		[]string{"--num_workers=3"}, []string{"--num_workers=2", "--num_epochs=4"})
	want := []string{"--model_def=ctr.deepfm", "--training_data=sqlite:///d.db?query=SELECT+%2A+FROM+t+WHERE+a+%3D+%27x%26y%27&label=y",
		"--model_params=dense=1", "--num_workers=3", "--num_workers=2", "--num_epochs=4"}
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	ds, err := sqldb.Parse(strings.TrimPrefix(got[1], "--training_data="))
	if err != nil || ds.Query != "SELECT * FROM t WHERE a = 'x&y'" || ds.Label != "y" {
		t.Errorf("the data source reads back as %+v, %v", ds, err)
	}
	if got := trainArgs("postgres://h/db?sslmode=disable", "m", "SELECT 1", "y", "", nil, nil, nil); got[1] !=
		"--training_data=postgres://h/db?sslmode=disable&query="+url.QueryEscape("SELECT 1")+"&label=y" || len(got) != 2 {
		t.Errorf("a datasource with parameters: %q", got)
	}
	_, specs, err := checkTrain(trainOf(t, "SELECT * FROM t TO TRAIN m COLUMN x1, EMBEDDING(CATEGORY_HASH(c, 1000), 8), CATEGORY_HASH(n, 5) LABEL y INTO m"))
	if err != nil {
		t.Fatal(err)
	}
	got = trainArgs("sqlite:///d.db", "m", "SELECT 1", "y", "", specs, nil, nil)
	ds, err = sqldb.Parse(strings.TrimPrefix(got[1], "--training_data="))
	if err != nil || !maps.Equal(ds.Hash, map[string]int64{"c": 1000, "n": 5}) || !strings.HasSuffix(got[1], "&hash=c%3A1000%2Cn%3A5") {
		t.Errorf("CATEGORY_HASH columns: %s: %+v, %v", got[1], ds, err)
	}
}

// TestSQLTrainRefusedBeforeTraining: INTO a stored model's name, a
// COLUMN naming no column and a column a model cannot take fail before
// a job starts (no job could start in a unit test: its processes would
// be the test binary).
func TestSQLTrainRefusedBeforeTraining(t *testing.T) {
	path := sqliteFile(t)
	ds := "--datasource=sqlite://" + path
	if code, _, errOut := runWithStdin(t, "", "sql", ds, "-e", "CREATE TABLE t (x REAL, c TEXT, b BLOB, y INTEGER)"); code != 0 {
		t.Fatal(errOut)
	}
	db, sds, err := sqldb.Connect(context.Background(), "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ckpt := t.TempDir()
	if err := os.WriteFile(filepath.Join(ckpt, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sqldb.StoreModel(context.Background(), db, sds.Dialect, sqldb.StoredModel{Name: "m"}, ckpt, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ stmt, want string }{
		{"SELECT x, y FROM t TO TRAIN ctr.deepfm LABEL y INTO m", "statement 1 of 1 (line 1, column 1): INTO m: a model of that name is stored: INTO OR REPLACE m replaces it"},
		{"SELECT * FROM t TO TRAIN ctr.deepfm COLUMN x, z LABEL y INTO OR REPLACE m", "line 1, column 47: column z is not one of the query's columns: x, c, b, y"},
		{"SELECT * FROM t TO TRAIN ctr.deepfm LABEL y INTO m2", "column b has type BLOB, which a model cannot take"},
		{"SELECT x, y FROM t TO TRAIN '/no/such/m.yaml' LABEL y INTO m2", "TO TRAIN '/no/such/m.yaml': open /no/such/m.yaml: no such file or directory"},
	} {
		code, out, errOut := runWithStdin(t, "", "sql", ds, "-e", c.stmt)
		if code == 0 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", c.stmt, code, out, errOut, c.want)
		}
	}
}
