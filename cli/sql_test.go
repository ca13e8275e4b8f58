package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"elasticdl/model"
)

// sqliteFile is a new, empty SQLite database file.
func sqliteFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func runWithStdin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), Env{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(stdin), Registry: model.NewRegistry()}, args)
	return code, out.String(), errOut.String()
}

// TestSQLStatements: a script's standard statements run in order on the
// database, each printing its count or its rows as a table; from -e, -f
// and standard input.
func TestSQLStatements(t *testing.T) {
	ds := "--datasource=sqlite://" + sqliteFile(t)
	code, out, errOut := runWithStdin(t, "", "sql", ds, "-e", `
		CREATE TABLE t (id INTEGER, name TEXT);
		INSERT INTO t VALUES (1, 'a'), (2, NULL), (10, 'long name');
		SELECT id, name FROM t ORDER BY id;`)
	want := "OK, 0 rows\nOK, 3 rows\nid | name\n---+----------\n1  | a\n2  | NULL\n10 | long name\n(3 rows)\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}
	script := filepath.Join(t.TempDir(), "q.sql")
	if err := os.WriteFile(script, []byte("SELECT count(*) AS n FROM t WHERE name IS NOT NULL;"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut = runWithStdin(t, "", "sql", ds, "-f", script); code != 0 || out != "n\n-\n2\n(1 row)\n" {
		t.Errorf("-f: exit %d, %q %s", code, out, errOut)
	}
	if code, out, errOut = runWithStdin(t, "SELECT name FROM t WHERE id = 10", "sql", ds); code != 0 || out != "name\n---------\nlong name\n(1 row)\n" {
		t.Errorf("stdin: exit %d, %q %s", code, out, errOut)
	}
}

// TestSQLErrors: each mistake is one line, and a script with a mistake
// anywhere runs nothing.
func TestSQLErrors(t *testing.T) {
	path := sqliteFile(t)
	ds := "--datasource=sqlite://" + path
	cases := []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"sql", "-e", "SELECT 1"}, "", "--datasource is required"},
		{[]string{"sql", "--datasource=oracle://x", "-e", "SELECT 1"}, "", "oracle://x"},
		{[]string{"sql", ds, "-e", "SELECT 1", "-f", "x.sql"}, "", "with -e or with -f, not both"},
		{[]string{"sql", ds, "-f", "/no/such.sql"}, "", "-f: open /no/such.sql"},
		{[]string{"sql", ds, "-e", "CREATE TABLE made (a INT);\nSELECT * FROM t TO TRAIN m LABLE y INTO n"}, "",
			"-e: line 2, column 28: expected WITH, COLUMN, LABEL or INTO, found LABLE (did you mean LABEL?)"},
		{[]string{"sql", ds, "-e", "CREATE TABLE made (a INT); SELECT * FROM t TO PREDICT p.y WITH predict.num_workers = 'x' USING n"}, "",
			`-e: line 1, column 64: predict.num_workers: invalid argument "x"`},
		{[]string{"sql", ds, "--backend=k8s", "-e", "CREATE TABLE made (a INT); SELECT * FROM t TO PREDICT p.y USING n"}, "",
			"--image: required with --backend=k8s"},
		{[]string{"sql", ds, "-e", "SELECT * FROM t TO PREDICT p.y USING no_model"}, "",
			"statement 1 of 1 (line 1, column 1): TO PREDICT … USING no_model: no model no_model in elasticdl_models"},
		{[]string{"sql", ds, "-e", "CREATE TABLE made (a INT);\nSELECT * FROM t TO TRAIN ctr.deepfm WITH train.epoch = 2, train.epochs = 3 LABEL y INTO n"}, "",
			"-e: line 2, column 59: unknown attribute train.epochs: known are model.*"},
		{[]string{"sql", ds, "-e", "CREATE TABLE made (a INT); SELECT * FROM t TO TRAIN ctr.deepfm WITH train.epoch = 'two' LABEL y INTO n"}, "",
			`-e: line 1, column 69: train.epoch: invalid argument "two" for "--num_epochs"`},
		{[]string{"sql", ds, "-e", "CREATE TABLE made (a INT); SELECT * FROM t TO TRAIN ctr.deepfm COLUMN a, BUCKET(b, 3) LABEL y INTO n"}, "",
			"-e: line 1, column 74: unknown feature column BUCKET: want a column's name, NUMERIC(col)"},
		{[]string{"sql", ds, "-e", "CREATE TABLE made (a INT); SELECT * FROM t TO TRAIN ctr.deepfm INTO n"}, "",
			"-e: line 1, column 28: TO TRAIN needs LABEL column"},
		{[]string{"sql", ds, "--backend=k8s", "--image=x", "-e", "CREATE TABLE made (a INT); SELECT * FROM t TO TRAIN ctr.deepfm LABEL y INTO n"}, "",
			"--shared_dir: required with --backend=k8s"},
		{[]string{"sql", ds, "--backend=k8s", "--image=x", "--shared_dir=/no/such/dir", "-e", "CREATE TABLE made (a INT)"}, "",
			"--shared_dir=/no/such/dir: not a directory"},
		{[]string{"sql", ds, "--backend=k8s", "--image=x", "--shared_dir=.", "--yaml", "-e", "CREATE TABLE made (a INT)"}, "",
			"--yaml: elasticdl sql runs its jobs"},
		{[]string{"sql", ds, "-e", "SELECT 1 AS a TO TRAIN ctr.deepfm WITH train.yaml = true LABEL a INTO n"}, "",
			"-e: line 1, column 40: unknown attribute train.yaml"},
		{[]string{"sql", ds, "--model_def=x", "-e", "CREATE TABLE made (a INT)"}, "", "--model_def: a TO TRAIN statement sets it"},
		{[]string{"sql", ds, "-e", "SELECT a, b FROM missing TO TRAIN ctr.deepfm LABEL a INTO n"}, "",
			"statement 1 of 1 (line 1, column 1): the SELECT: query: "},
		{[]string{"sql", ds, "-e", "SELECT 1 AS a TO TRAIN ctr.deepfm WITH train.backend = 'k8s' LABEL a INTO n"}, "",
			"-e: line 1, column 40: unknown attribute train.backend"},
		{[]string{"sql", ds}, "SELECT 'open", "standard input: line 1, column 8: a string opened with ' is not closed"},
		{[]string{"sql", "--datasource=sqlite:///no/such/dir/x.db", "-e", "SELECT 1"}, "", "no such file or directory"},
		{[]string{"sql", ds, "-e", "CREATE TABLE made (a INT); SELECT * FROM missing"}, "", "statement 2 of 2 (line 1, column 28): "},
	}
	for _, c := range cases {
		code, _, errOut := runWithStdin(t, c.stdin, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
			t.Errorf("%q: exit %d, stderr %q, want one line with %q", c.args, code, errOut, c.want)
		}
	}
	// Only the last script ran its first statement (the error came after):
	// the ones refused at parsing created nothing.
	code, out, _ := runWithStdin(t, "", "sql", ds, "-e", "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
	if code != 0 || out != "name\n----\nmade\n(1 row)\n" {
		t.Errorf("tables after the errors: %q", out)
	}
}
