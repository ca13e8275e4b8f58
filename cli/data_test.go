package cli

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"elasticdl/data"
)

// TestDataExportParquet writes generated records as Parquet, the format
// given or inferred from --output, and reads them back through the URI it
// prints: the source's records.
func TestDataExportParquet(t *testing.T) {
	const uri = "synthetic-ctr://?records=50&dense=2&categorical=2&pairs=1"
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--output=" + filepath.Join(dir, "a.parquet"), "--row_group=7"},
		{"--output=" + filepath.Join(dir, "b.parquet"), "--format=parquet"},
	} {
		out := strings.TrimPrefix(args[0], "--output=")
		code, stdout, stderr := run(t, append([]string{"data", "export", "--data=" + uri, "--start=10"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		want := "wrote 40 records of " + uri + " to " + out + " (0 corrupt left out); read them as\n  parquet://" + out + "?schema=label:label,f{1..2}:num,c{1..2}:id\n"
		if stdout != want {
			t.Fatalf("stdout %q, want %q", stdout, want)
		}
		for _, name := range []string{out, strings.TrimSpace(strings.SplitN(stdout, "\n", 2)[1])} {
			back, err := data.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			src, _ := data.Open(uri)
			got, err := back.Read(0, 40)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := src.Read(10, 50)
			if got.N != 40 || !slices.Equal(got.Features, want.Features) || !slices.Equal(got.Categorical, want.Categorical) || !slices.Equal(got.Labels, want.Labels) {
				t.Errorf("%s: the records read back differ from the source's", name)
			}
			back.Close()
			src.Close()
		}
		if left, _ := filepath.Glob(out + ".*.tmp"); len(left) > 0 {
			t.Errorf("temporary files left: %v", left)
		}
	}
}

// TestDataExportStdout writes the records to standard output, the message
// to standard error.
func TestDataExportStdout(t *testing.T) {
	const uri = "--data=synthetic-ctr://?records=50&dense=2&categorical=2&pairs=1"
	code, stdout, stderr := run(t, "data", "export", uri, "--output=-", "--start=5", "--end=25")
	if code != 0 || strings.Count(stdout, "\n") != 20 || !strings.HasSuffix(stderr, "as csv (0 corrupt left out); schema=label:label,f{1..2}:num,c{1..2}:id\n") {
		t.Errorf("exit %d, %d lines out, stderr %q", code, strings.Count(stdout, "\n"), stderr)
	}
	code, stdout, stderr = run(t, "data", "export", uri, "--output=-", "--format=parquet")
	if code != 0 || !strings.HasPrefix(stdout, "PAR1") || !strings.HasSuffix(stdout, "PAR1") {
		t.Errorf("exit %d, %d bytes out: %s", code, len(stdout), stderr)
	}
}

func TestDataExportFlags(t *testing.T) {
	const uri = "--data=synthetic-ctr://?records=10"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{uri, "--output=o.parquet", "--format=json"}, "--format=json: want csv or parquet"},
		{[]string{uri, "--output=o.csv", "--format=parquet"}, "--output=o.csv: name it *.parquet"},
		{[]string{uri, "--output=o.parquet", "--format=csv"}, "--output=o.parquet: name it *.csv"},
		{[]string{uri, "--output=o.parquet", "--row_group=0"}, "--row_group=0: want at least 1 record"},
		{[]string{"--data=/nonexistent/x.parquet", "--output=o.csv"}, "--data: stat /nonexistent/x.parquet: no such file"},
	} {
		code, _, stderr := run(t, append([]string{"data", "export"}, tc.args...)...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want %q", tc.args, code, stderr, tc.want)
		}
	}
}
