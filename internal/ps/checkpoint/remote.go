package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"elasticdl/internal/storage"
)

// manifestName is the object that makes a version whole on an object
// store, written after every part.
const manifestName = "COMPLETE"

// manifest lists a whole version's parts.
type manifest struct {
	Version   int64    `json:"version"`
	NumShards int      `json:"num_shards"`
	Parts     []string `json:"parts"`
}

// remote is a checkpoint directory on an object store. Shards write their
// parts independently; the one whose part completes the set (it lists the
// version after writing) writes the manifest. Two shards finishing at once
// may both write it, with the same content. Readers take only versions
// with a manifest, and removal deletes the manifest first, so a crash
// mid-write or mid-delete never leaves a version that looks whole.
type remote struct {
	path string
	s    storage.Store
}

func versionName(v int64) string { return versionPrefix + fmt.Sprint(v) }

func (r remote) dir(v int64) string { return VersionDir(r.path, v) }
func (r remote) root() string       { return r.path }

func (r remote) versions(ctx context.Context) ([]int64, error) {
	objs, err := r.s.List(ctx, versionPrefix)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var vs []int64
	for _, o := range objs {
		first, _, ok := strings.Cut(o.Name, "/")
		if v, vok := parseVersionDir(first); ok && vok && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	return newestFirst(vs), nil
}

func (r remote) readManifest(ctx context.Context, v int64) (manifest, error) {
	name := versionName(v) + "/" + manifestName
	b, err := storage.ReadAll(ctx, r.s, name)
	if errors.Is(err, fs.ErrNotExist) {
		return manifest{}, fmt.Errorf("checkpoint: %s: no manifest (being written, deleted, or cut short)", r.dir(v))
	}
	if err != nil {
		return manifest{}, fmt.Errorf("checkpoint: %w", err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return manifest{}, fmt.Errorf("checkpoint: %s: %w", r.s.URL(name), err)
	}
	if m.Version != v || m.NumShards < 1 || len(m.Parts) != m.NumShards {
		return manifest{}, fmt.Errorf("checkpoint: %s: says version %d with %d of %d parts", r.s.URL(name), m.Version, len(m.Parts), m.NumShards)
	}
	return m, nil
}

func (r remote) parts(ctx context.Context, v int64) ([]part, error) {
	m, err := r.readManifest(ctx, v)
	if err != nil {
		return nil, err
	}
	ps := make([]part, 0, len(m.Parts))
	for _, name := range m.Parts {
		i, n, ok := parseFileName(name)
		if !ok || n != m.NumShards {
			return nil, fmt.Errorf("checkpoint: %s: manifest names %q, not a part of %d shards", r.dir(v), name, m.NumShards)
		}
		ps = append(ps, part{shard: i, numShards: n})
	}
	return ps, nil
}

func (r remote) read(ctx context.Context, v int64, name string) ([]byte, error) {
	b, err := storage.ReadAll(ctx, r.s, versionName(v)+"/"+name)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return b, nil
}

// write stores the part, then commits the version if its parts are all
// there.
func (r remote) write(ctx context.Context, v int64, shard, numShards int, b []byte) error {
	if err := storage.WriteAll(ctx, r.s, versionName(v)+"/"+FileName(shard, numShards), b); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	objs, err := r.s.List(ctx, versionName(v)+"/")
	if err != nil {
		return fmt.Errorf("checkpoint: commit %s: %w", r.dir(v), err)
	}
	names := make([]string, len(objs))
	for i, o := range objs {
		names[i] = strings.TrimPrefix(o.Name, versionName(v)+"/")
	}
	m, commit := manifestFor(v, numShards, names)
	if !commit {
		return nil
	}
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("checkpoint: commit %s: %w", r.dir(v), err)
	}
	if err := storage.WriteAll(ctx, r.s, versionName(v)+"/"+manifestName, body); err != nil {
		return fmt.Errorf("checkpoint: commit %s: %w", r.dir(v), err)
	}
	return nil
}

// manifestFor decides whether a version whose objects are names (relative
// to its directory) is to be committed by a shard of numShards: not when
// it has a manifest already (a part was rewritten) or lacks a part
// (another shard's completes it).
func manifestFor(v int64, numShards int, names []string) (manifest, bool) {
	m := manifest{Version: v, NumShards: numShards}
	for _, name := range names {
		if name == manifestName {
			return manifest{}, false
		}
		if _, n, ok := parseFileName(name); ok && n == numShards {
			m.Parts = append(m.Parts, name)
		}
	}
	return m, len(m.Parts) == numShards
}

func (r remote) committed(ctx context.Context, v int64) error {
	_, err := r.readManifest(ctx, v)
	return err
}

// remove deletes the manifest first: a version half deleted has none.
func (r remote) remove(ctx context.Context, v int64) error {
	if err := r.s.Delete(ctx, versionName(v)+"/"+manifestName); err != nil {
		return fmt.Errorf("checkpoint: remove %s: %w", r.dir(v), err)
	}
	objs, err := r.s.List(ctx, versionName(v)+"/")
	if err != nil {
		return fmt.Errorf("checkpoint: remove %s: %w", r.dir(v), err)
	}
	var errs []error
	for _, o := range objs {
		if err := r.s.Delete(ctx, o.Name); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint: remove %w", err))
		}
	}
	return errors.Join(errs...)
}
