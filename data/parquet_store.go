package data

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"

	"elasticdl/internal/storage"
)

// Parquet on object storage: s3://bucket/prefix/file.parquet, or a prefix
// whose *.parquet objects (directly under it) are one source. Each file is
// read by ranged GETs through a block cache (storage.Cached): a task reads
// a few pages of every column chunk it covers, and the next task's pages
// are mostly in the same blocks.

const (
	// parquetBlock is the cache's read size: one GET's worth. A column
	// chunk's pages for a task of 512 records are a few KiB each; 256 KiB
	// serves many tasks per GET and keeps a GET's latency small.
	parquetBlock = 256 << 10
	// parquetBlocks bounds the cache per file: 64 MiB.
	parquetBlocks = 256
)

// openParquetObjects opens the Parquet objects at an s3:// location.
func openParquetObjects(ctx context.Context, location string) ([]*parquetFile, error) {
	store, names, err := parquetObjects(ctx, location)
	if err != nil {
		return nil, err
	}
	var files []*parquetFile
	for _, name := range names {
		r, err := store.Open(ctx, name)
		if err != nil {
			closeParquetFiles(files)
			return nil, fmt.Errorf("data: %w", err)
		}
		c := storage.Cached(r, parquetBlock, parquetBlocks)
		f, err := openParquetReader(store.URL(name), c, r.Size(), r)
		if err != nil {
			r.Close()
			closeParquetFiles(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// parquetObjects is the store and the object names of location: the one
// object a *.parquet name names, else the *.parquet objects under the
// prefix, sorted by name.
func parquetObjects(ctx context.Context, location string) (storage.Store, []string, error) {
	trimmed := strings.TrimRight(location, "/")
	if strings.EqualFold(path.Ext(trimmed), ".parquet") {
		store, base, err := storage.OpenParent(ctx, trimmed, os.Getenv)
		if err != nil {
			return nil, nil, fmt.Errorf("data: %w", err)
		}
		if _, err := store.Stat(ctx, base); err != nil {
			return nil, nil, fmt.Errorf("data: %w", err)
		}
		return store, []string{base}, nil
	}
	store, err := storage.Open(ctx, trimmed, os.Getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	infos, err := store.List(ctx, "")
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	var names []string
	for _, i := range infos {
		if !strings.Contains(i.Name, "/") && strings.EqualFold(path.Ext(i.Name), ".parquet") {
			names = append(names, i.Name)
		}
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("data: %s: no *.parquet object under it (only Parquet is read from object storage)", location)
	}
	return store, names, nil
}

// errRemoteFormat is the answer for data on object storage in another
// format than Parquet.
var errRemoteFormat = fmt.Errorf("%w: only Parquet is read from object storage (a *.parquet object or a prefix of them; `elasticdl data export --format=parquet` converts a local source)", ErrUnsupportedFormat)
