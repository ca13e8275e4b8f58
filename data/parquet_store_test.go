package data

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"elasticdl/internal/storage"
	"elasticdl/internal/storage/storagetest"
)

// TestParquetOnS3 reads Parquet objects from the test S3 server, a prefix
// of two files and one object, by ranges that cross row groups and files:
// the same records as the generator's.
func TestParquetOnS3(t *testing.T) {
	store, loc := storagetest.Store(t)
	ctx := context.Background()
	src, err := Open("synthetic-ctr://?records=3000&dense=4&categorical=3&pairs=1&seed=7")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dir := t.TempDir()
	schema := exportParquetFile(t, src, 0, 1700, 256, filepath.Join(dir, "part-0.parquet"))
	exportParquetFile(t, src, 1700, 3000, 256, filepath.Join(dir, "part-1.parquet"))
	for _, name := range []string{"part-0.parquet", "part-1.parquet"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := storage.WriteAll(ctx, store, "train/"+name, b); err != nil {
			t.Fatal(err)
		}
	}
	// Not part of the source: another format, and a file one level down.
	for _, name := range []string{"train/README", "train/old/part-9.parquet"} {
		if err := storage.WriteAll(ctx, store, name, []byte("not data")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name        string
		len, offset int64
		from, to    int64
	}{
		{loc + "/train", 3000, 0, 0, 3000},
		{loc + "/train/", 3000, 0, 1600, 1800},
		{loc + "/train/part-1.parquet", 1300, 1700, 1299, 1300},
		{"parquet://" + loc + "/train?schema=" + schema, 3000, 0, 250, 770},
	} {
		p, err := Open(tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.Len() != tc.len {
			t.Fatalf("%s: %d records, want %d", tc.name, p.Len(), tc.len)
		}
		got, err := p.Read(tc.from, tc.to)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := src.Read(tc.from+tc.offset, tc.to+tc.offset)
		sameRecords(t, fmt.Sprintf("%s [%d,%d)", tc.name, tc.from, tc.to), got, want, tc.offset)
		p.Close()
	}
}

// Bad data locations on S3: each one error naming the object.
func TestParquetOnS3BadInput(t *testing.T) {
	store, loc := storagetest.Store(t)
	if err := storage.WriteAll(context.Background(), store, "bad/x.parquet", []byte("PAR1 not really")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		uri, want string
		is        error
	}{
		{loc + "/nothing.parquet", "nothing.parquet", fs.ErrNotExist},
		{loc + "/empty", "no *.parquet object under it", nil},
		{loc + "/train.csv", "only Parquet is read from object storage", nil},
		{loc + "/bad/x.parquet", loc + "/bad/x.parquet: not a Parquet file", nil},
		{"s3://no-such-bucket-elasticdl/x.parquet", "no-such-bucket-elasticdl", nil},
	} {
		_, err := Open(c.uri)
		if err == nil || !strings.Contains(err.Error(), c.want) || c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("Open(%s) = %v, want %q", c.uri, err, c.want)
		}
	}
}
