package data

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestExportCSVRoundTrip exports generated CTR records and reads them back
// with the schema the export gives: the same features, ids and labels.
func TestExportCSVRoundTrip(t *testing.T) {
	src, err := Open("synthetic-ctr://?records=500&dense=4&categorical=3&pairs=1&seed=7")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var out bytes.Buffer
	schema, corrupt, err := ExportCSV(&out, src, 100, 400)
	if err != nil || corrupt != 0 {
		t.Fatalf("export: %v, %d corrupt", err, corrupt)
	}
	if schema != "label:label,f{1..4}:num,c{1..3}:id" {
		t.Errorf("schema %q", schema)
	}
	path := filepath.Join(t.TempDir(), "ctr.csv")
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := Open("csv://" + path + "?schema=" + schema)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	want, _ := src.Read(100, 400)
	got, err := back.Read(0, 300)
	if err != nil {
		t.Fatal(err)
	}
	if got.N != want.N || !slices.Equal(got.Features, want.Features) || !slices.Equal(got.Categorical, want.Categorical) || !slices.Equal(got.Labels, want.Labels) {
		t.Fatalf("read back differs: %d records, want %d", got.N, want.N)
	}
	if _, _, err := ExportCSV(&out, src, 0, 501); err == nil || !strings.Contains(err.Error(), "out of") {
		t.Errorf("a range past the end: %v", err)
	}
}

func TestIDColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids.csv")
	if err := os.WriteFile(path, []byte("1,5,9223372036854775807\n0,-1,3\n0,x,3\n1,0,9223372036854775808\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := OpenCSVURI("csv://" + path + "?schema=y:label,a:id,b:id")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.IDBound() != 0 || src.NumCategorical() != 2 {
		t.Errorf("id bound %d, %d ids a record: want unbounded, 2", src.IDBound(), src.NumCategorical())
	}
	b, err := src.Read(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if b.N != 1 || !slices.Equal(b.Categorical, []int64{5, 1<<63 - 1}) || len(b.Corrupt) != 3 {
		t.Fatalf("got %d records %v, %d corrupt: want 1 record [5 2^63-1] and 3 corrupt", b.N, b.Categorical, len(b.Corrupt))
	}
	if !strings.Contains(b.Corrupt[0].Error(), `id "-1": want an integer from 0 to 2^63-1`) {
		t.Errorf("corrupt record error: %v", b.Corrupt[0])
	}
}
