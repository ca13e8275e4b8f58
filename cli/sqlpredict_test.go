package cli

import (
	"slices"
	"strings"
	"testing"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqlflow"
)

// TestCheckPredict: predict.* attributes become predict's flags, and
// every mistake is an error at its place before anything runs.
func TestCheckPredict(t *testing.T) {
	for _, c := range []struct {
		src, err string
		flags    []string
	}{
		{src: "SELECT * FROM t TO PREDICT p.y USING m"},
		{src: "SELECT * FROM t TO PREDICT p.y WITH predict.num_workers = 2, predict.minibatch_size = 32 USING m",
			flags: []string{"--num_workers=2", "--minibatch_size=32"}},
		{src: "SELECT * FROM t TO PREDICT p.y WITH model.dense = 2 USING m", err: "line 1, column 37: model.dense: a stored model keeps the parameters"},
		{src: "SELECT * FROM t TO PREDICT p.y WITH predict.num_workers = 'x' USING m", err: "line 1, column 37: predict.num_workers: invalid argument"},
		{src: "SELECT * FROM t TO PREDICT p.y WITH predict.prediction_outputs = 'x' USING m", err: "unknown attribute predict.prediction_outputs"},
		{src: "SELECT * FROM t TO PREDICT p.y WITH predict.backend = 'k8s' USING m", err: "unknown attribute predict.backend"},
		{src: "SELECT * FROM t TO PREDICT p.y WITH train.epoch = 2 USING m", err: "unknown attribute train.epoch"},
		{src: "SELECT * FROM t TO PREDICT s.p.y USING m", err: "line 1, column 1: TO PREDICT s.p.y: the result table is one of the connection's schema"},
		{src: "SELECT * FROM t TO PREDICT p__edl_in.y USING m", err: "names with __edl_ are TO PREDICT's staging tables"},
	} {
		stmts, err := sqlflow.Parse(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		got, err := checkPredict(stmts[0].(*sqlflow.Predict))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.src, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.flags) {
			t.Errorf("%s: %q, %v; want %q", c.src, got, err, c.flags)
		}
	}
}

// TestTrainedOn: a stored model's statement gives its SELECT, label and
// COLUMN clauses; a statement that is not a TO TRAIN is an error.
func TestTrainedOn(t *testing.T) {
	s, specs, err := trainedOn(sqldb.StoredModel{Name: "m", Statement: "SELECT * FROM t TO TRAIN ctr.deepfm COLUMN a, NUMERIC(b) LABEL y INTO m"})
	if err != nil || s.Select != "SELECT * FROM t" || s.Label != "y" || len(specs) != 2 || specs[1].name != "b" || specs[1].kind != sqldb.Number {
		t.Errorf("got %+v, %+v, %v", s, specs, err)
	}
	for _, c := range []struct{ stmt, err string }{
		{"SELECT 1", "model m: its statement is not TO TRAIN"},
		{"SELECT * FROM t TO TRAIN", "model m: its statement does not parse"},
		{"SELECT * FROM t TO TRAIN x INTO m", "model m: its statement: line 1, column 1: TO TRAIN needs LABEL"},
	} {
		if _, _, err := trainedOn(sqldb.StoredModel{Name: "m", Statement: c.stmt}); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.stmt, err, c.err)
		}
	}
	got := trainedColumns([]sqldb.Column{{Name: "a"}, {Name: "y"}, {Name: "b"}}, "y")
	if len(got) != 2 || got[0].name != "a" || got[1].name != "b" {
		t.Errorf("trainedColumns: %+v", got)
	}
}

// TestPredictQuery: the staged rows as training took them: its features
// in its order (cast as its COLUMN clause cast them), the input's own
// label left out for a 0 one, the row number last.
func TestPredictQuery(t *testing.T) {
	in := []sqldb.Column{{Name: "id", Kind: sqldb.Number}, {Name: "c", Kind: sqldb.Text}, {Name: "y", Kind: sqldb.Number}, {Name: "x", Kind: sqldb.Number}}
	base := `SELECT q."id", q."c", q."x", q."_edl_in_row", 0 AS "y" FROM "p__edl_in" q`
	for _, c := range []struct {
		specs     []columnFeature
		want, err string
	}{
		{specs: nil, want: `SELECT q."id", q."c", q."x", q."y", q."_edl_in_row" FROM (` + base + `) q`},
		{specs: []columnFeature{{name: "x"}, {name: "c"}},
			want: `SELECT q."x", q."c", q."y", q."_edl_in_row" FROM (` + base + `) q`},
		{specs: []columnFeature{{name: "id", kind: sqldb.Text}},
			want: `SELECT CAST(q."id" AS TEXT) AS "id", q."y", q."_edl_in_row" FROM (` + base + `) q`},
		{specs: []columnFeature{{name: "z"}}, err: "column z, a feature of the model, is not one of the query's columns: id, c, y, x"},
		{specs: []columnFeature{{name: "y"}}, err: "column y, a feature of the model, is not one"},
	} {
		got, err := predictQuery(sqldb.SQLite, "p__edl_in", in, "y", c.specs)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.specs, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v:\ngot  %s, %v\nwant %s", c.specs, got, err, c.want)
		}
	}
	if u := predictSource("sqlite:///d.db", "SELECT 1", "y", []columnFeature{{name: "c", buckets: 9}, {name: "x"}}); u != "sqlite:///d.db?query=SELECT+1&label=y&hash=c%3A9&order=_edl_in_row&ignore=_edl_in_row" {
		t.Errorf("predictSource: %s", u)
	}
	got := resultInput([]sqldb.Column{{Name: "a"}, {Name: "y"}, {Name: "b"}, {Name: "y_p1"}}, "y")
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("resultInput: %q", got)
	}
}

// TestReadPredictions: predict's CSV, one row per input row in order; a
// two-class model's gives class 1's probability; anything else is an
// error.
func TestReadPredictions(t *testing.T) {
	ps, p1, err := readPredictions(strings.NewReader("index,class,p0,p1\n0,1,0.25,0.75\n1,0,0.9,0.1\n"), 2)
	if err != nil || !p1 || !slices.Equal(ps, []sqldb.Prediction{{Row: 0, Class: 1, P1: 0.75}, {Row: 1, Class: 0, P1: 0.1}}) {
		t.Errorf("two classes: %v, %v, %v", ps, p1, err)
	}
	ps, p1, err = readPredictions(strings.NewReader("index,class,p0,p1,p2\n0,2,0.1,0.2,0.7\n"), 1)
	if err != nil || p1 || !slices.Equal(ps, []sqldb.Prediction{{Row: 0, Class: 2}}) {
		t.Errorf("three classes: %v, %v, %v", ps, p1, err)
	}
	for _, c := range []struct {
		csv  string
		rows int64
		err  string
	}{
		{"", 0, "predictions: EOF"},
		{"row,class,p0,p1\n", 0, "header"},
		{"index,class,p0,p1\n1,0,0.5,0.5\n", 1, "row 1: \"1,0,0.5,0.5\": want index 0"},
		{"index,class,p0,p1\n0,x,0.5,0.5\n", 1, "row 1"},
		{"index,class,p0,p1\n0,0,0.5,half\n", 1, "row 1"},
		{"index,class,p0,p1\n0,0,0.5\n", 1, "wrong number of fields"},
		{"index,class,p0,p1\n0,0,0.5,0.5\n", 2, "1 rows for 2 input rows"},
	} {
		if _, _, err := readPredictions(strings.NewReader(c.csv), c.rows); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: error %v, want %q", c.csv, err, c.err)
		}
	}
}
