package data

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenPicksReader(t *testing.T) {
	dir := t.TempDir()
	m := newMNIST(4, 2, 3)
	idxPath := m.write(t, dir, true)
	csvPath := filepath.Join(dir, "d.CSV")
	writeFile(t, csvPath, []byte("1,2,3\n4,5,6\n"))

	src, err := Open(idxPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.(*IDX); !ok || src.Len() != 4 || src.Name() != idxPath {
		t.Fatalf("Open(%s) = %T len %d", idxPath, src, src.Len())
	}
	src.Close()

	src, err = Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := src.(*CSV); !ok || c.Len() != 2 || c.LabelColumn() != 2 {
		t.Fatalf("Open(%s) = %T", csvPath, src)
	}
	src.Close()

	if _, err := Open("s3://bucket/x.csv"); !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), "s3://bucket/x.csv: unsupported data format: only Parquet") {
		t.Errorf("Open of a CSV object: %v", err)
	}
	for _, uri := range []string{"/d/notes.txt", "/d/train-labels-idx1-ubyte.gz"} {
		src, err := Open(uri)
		if !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), uri) ||
			!strings.Contains(err.Error(), "idx3-ubyte") || !strings.Contains(err.Error(), "*.csv") {
			t.Errorf("Open(%q): want an error listing the supported formats, got %v", uri, err)
		}
		if src != nil {
			t.Errorf("Open(%q) returned a non-nil Source with an error", uri)
		}
	}
	// A failing reader must give a nil interface, not a typed nil pointer.
	if src, err := Open(filepath.Join(dir, "none-images-idx3-ubyte")); src != nil || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of a missing IDX file = %v, %v", src, err)
	}
	if src, err := Open(filepath.Join(dir, "none.csv")); src != nil || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of a missing CSV file = %v, %v", src, err)
	}
}

func TestRecordError(t *testing.T) {
	cause := fmt.Errorf("column 3: %w", errors.ErrUnsupported)
	e := &RecordError{Source: "/x/y.csv", Record: 42, Err: cause}
	if got, want := e.Error(), "/x/y.csv: record 42: column 3: unsupported operation"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, errors.ErrUnsupported) {
		t.Error("RecordError does not unwrap to its cause")
	}
}
