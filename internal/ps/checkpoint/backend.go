package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"elasticdl/internal/atomicfile"
	"elasticdl/internal/storage"
)

// backend is where a checkpoint directory's versions live: a local
// directory, where every file is renamed into place (a version is whole
// when all its shards' files are there and sound), or an object store,
// which has no rename: there a version is whole only once its manifest is
// written, after every part (remote.go).
type backend interface {
	// versions lists the versions with anything under them, newest first.
	versions(ctx context.Context) ([]int64, error)
	// parts lists the shard files of version v a reader may take.
	parts(ctx context.Context, v int64) ([]part, error)
	read(ctx context.Context, v int64, name string) ([]byte, error)
	// write stores one shard's file of version v whole, or not at all.
	write(ctx context.Context, v int64, shard, numShards int, b []byte) error
	// committed says why version v is not whole, cheaply where it can.
	committed(ctx context.Context, v int64) error
	// remove deletes version v so that no reader takes it midway.
	remove(ctx context.Context, v int64) error
	dir(v int64) string
	root() string
}

// part is one shard's file of a version.
type part struct {
	shard, numShards int
	modTime          int64 // to choose between two jobs' layouts
}

// open is the backend of root: s3://bucket/prefix (credentials and
// endpoint from the environment: storage.S3Config) or a local directory.
func open(ctx context.Context, root string) (backend, error) {
	if !storage.IsRemote(root) {
		return local{path: root}, nil
	}
	s, err := storage.Open(ctx, root, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return remote{path: root, s: s}, nil
}

// Join is root/elem... with "/" for object stores (filepath.Join would
// fold s3:// into s3:/).
func Join(root string, elem ...string) string {
	if storage.IsRemote(root) {
		return strings.TrimRight(root, "/") + "/" + strings.Join(elem, "/")
	}
	return filepath.Join(append([]string{root}, elem...)...)
}

func newestFirst(vs []int64) []int64 {
	slices.SortFunc(vs, func(a, b int64) int { return cmp.Compare(b, a) })
	return vs
}

// local is a checkpoint directory on a file system.
type local struct{ path string }

func (l local) dir(v int64) string { return VersionDir(l.path, v) }
func (l local) root() string       { return l.path }

func (l local) versions(context.Context) ([]int64, error) {
	entries, err := os.ReadDir(l.path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read %s: %w", l.path, err)
	}
	var vs []int64
	for _, e := range entries {
		if v, ok := parseVersionDir(e.Name()); ok && e.IsDir() {
			vs = append(vs, v)
		}
	}
	return newestFirst(vs), nil
}

func (l local) parts(_ context.Context, v int64) ([]part, error) {
	dir := l.dir(v)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read %s: %w", dir, err)
	}
	var ps []part
	for _, e := range entries {
		i, n, ok := parseFileName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		p := part{shard: i, numShards: n}
		if info, err := e.Info(); err == nil {
			p.modTime = info.ModTime().UnixNano()
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func (l local) read(_ context.Context, v int64, name string) ([]byte, error) {
	path := filepath.Join(l.dir(v), name)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read %s: %w", path, err)
	}
	return b, nil
}

func (l local) write(_ context.Context, v int64, shard, numShards int, b []byte) error {
	dir := l.dir(v)
	if err := mkdirSynced(l.path, dir); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, FileName(shard, numShards)), b); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	removeOtherLayouts(dir, numShards)
	return nil
}

// committed reads the whole version: a local directory has no manifest.
func (l local) committed(ctx context.Context, v int64) error {
	_, err := readVersion(ctx, l, v)
	return err
}

func (l local) remove(_ context.Context, v int64) error {
	if err := os.RemoveAll(l.dir(v)); err != nil {
		return fmt.Errorf("checkpoint: remove %s: %w", l.dir(v), err)
	}
	return nil
}

// mkdirSynced creates root and dir, syncing root when dir is new so the
// version directory's entry survives a crash along with the files in it.
func mkdirSynced(root, dir string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("checkpoint: create %s: %w", root, err)
	}
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: create %s: %w", dir, err)
	}
	if err := atomicfile.SyncDir(root); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// removeOtherLayouts deletes, best effort, checkpoint files in dir written
// by a number of shards other than numShards: within one job every shard
// agrees on it, so such files are an earlier job's.
func removeOtherLayouts(dir string, numShards int) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if _, n, ok := parseFileName(e.Name()); ok && n != numShards {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
