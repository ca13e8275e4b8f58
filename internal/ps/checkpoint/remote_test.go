package checkpoint

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"elasticdl/internal/storage"
	"elasticdl/internal/storage/storagetest"
)

// objectStores are the remote backends under test: the manifest protocol
// on a directory (a store without rename, as S3 is), and on a fresh
// prefix of the test S3 server where there is one.
func objectStores(t *testing.T) map[string]remote {
	t.Helper()
	dir := t.TempDir()
	s, err := storage.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]remote{"dir": {path: dir, s: s}}
	if storagetest.Available() {
		s, loc := storagetest.Store(t)
		out["s3"] = remote{path: loc, s: s}
	}
	return out
}

func writeTo(t *testing.T, be backend, version int64, shards ...int) {
	t.Helper()
	for _, i := range shards {
		if err := write(context.Background(), be, shardCheckpoint(version, i, 2)); err != nil {
			t.Fatal(err)
		}
	}
}

func objectNames(t *testing.T, r remote, prefix string) []string {
	t.Helper()
	infos, err := r.s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range infos {
		out = append(out, i.Name)
	}
	return out
}

// A version is whole only once its last part is written, which writes the
// manifest; a job killed mid-checkpoint leaves the previous version the
// newest whole one, and readers never take a version without a manifest
// or one whose parts are gone.
func TestRemoteManifest(t *testing.T) {
	ctx := context.Background()
	for kind, r := range objectStores(t) {
		t.Run(kind, func(t *testing.T) {
			writeTo(t, r, 100, 0)
			if _, err := load(ctx, r, nil); !errors.Is(err, ErrNoCheckpoint) {
				t.Fatalf("one part of two: load = %v, want ErrNoCheckpoint", err)
			}
			writeTo(t, r, 100, 1)
			want := []string{"version-100/COMPLETE", "version-100/variables-0-of-2.ckpt", "version-100/variables-1-of-2.ckpt"}
			if got := objectNames(t, r, "version-100/"); !slices.Equal(got, want) {
				t.Fatalf("objects %v, want %v", got, want)
			}
			writeTo(t, r, 200, 1) // killed before shard 0 wrote 200
			writeTo(t, r, 300, 0, 1)
			if err := r.s.Delete(ctx, "version-300/COMPLETE"); err != nil { // deleted midway
				t.Fatal(err)
			}
			writeTo(t, r, 400, 0, 1)
			if err := r.s.Delete(ctx, "version-400/variables-1-of-2.ckpt"); err != nil { // a race of prune and commit
				t.Fatal(err)
			}
			if err := storage.WriteAll(ctx, r.s, "version-500/COMPLETE", []byte("{not json")); err != nil {
				t.Fatal(err)
			}
			var logged strings.Builder
			set, err := load(ctx, r, slog.New(slog.NewTextHandler(&logged, nil)))
			if err != nil || set.Version != 100 || set.NumShards != 2 || set.Dir != VersionDir(r.path, 100) {
				t.Fatalf("load = %+v, %v; want version 100", set, err)
			}
			for i, c := range set.Shards {
				if !proto.Equal(c, shardCheckpoint(100, i, 2)) {
					t.Errorf("shard %d differs after the round trip", i)
				}
			}
			for _, v := range []string{"version-500/COMPLETE", "version-400/variables-1-of-2.ckpt", "version-300: no manifest", "version-200: no manifest"} {
				if !strings.Contains(logged.String(), v) {
					t.Errorf("log does not explain %s:\n%s", v, logged.String())
				}
			}
		})
	}
}

// A part rewritten after its version is whole (a relaunched PS writing
// the same version again) keeps the version whole.
func TestRemoteRewrite(t *testing.T) {
	for kind, r := range objectStores(t) {
		t.Run(kind, func(t *testing.T) {
			writeTo(t, r, 10, 0, 1, 0)
			if err := r.committed(context.Background(), 10); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Pruning keeps the newest whole versions and newer unfinished ones, and
// deletes everything of older ones, whole or not.
func TestRemotePrune(t *testing.T) {
	ctx := context.Background()
	for kind, r := range objectStores(t) {
		t.Run(kind, func(t *testing.T) {
			for _, v := range []int64{10, 20, 40, 50} {
				writeTo(t, r, v, 0, 1)
			}
			writeTo(t, r, 30, 0) // never finished
			writeTo(t, r, 60, 1) // still being written
			removed, err := prune(ctx, r, 2)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{VersionDir(r.path, 30), VersionDir(r.path, 20), VersionDir(r.path, 10)}; !slices.Equal(removed, want) {
				t.Errorf("removed %v, want %v", removed, want)
			}
			if vs, _ := r.versions(ctx); !slices.Equal(vs, []int64{60, 50, 40}) {
				t.Errorf("versions left %v, want 60 50 40", vs)
			}
			if got := objectNames(t, r, "version-1"); len(got) != 0 {
				t.Errorf("left of version 10: %v", got)
			}
		})
	}
}

func TestJoinKeepsURLs(t *testing.T) {
	for _, c := range []struct{ root, want string }{
		{"s3://b/ckpt", "s3://b/ckpt/version-7/variables-0-of-1.ckpt"},
		{"s3://b/ckpt/", "s3://b/ckpt/version-7/variables-0-of-1.ckpt"},
		{"/data/ckpt", "/data/ckpt/version-7/variables-0-of-1.ckpt"},
		{"ckpt", "ckpt/version-7/variables-0-of-1.ckpt"},
	} {
		if got := Path(c.root, 7, 0, 1); got != c.want {
			t.Errorf("Path(%q) = %q, want %q", c.root, got, c.want)
		}
	}
}

// The public functions reach S3 by URL: a job's --checkpoint_dir.
func TestS3ByURL(t *testing.T) {
	root := storagetest.Location(t)
	for v := int64(1); v <= 3; v++ {
		for i := range 2 {
			if _, err := Write(root, shardCheckpoint(v, i, 2)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if removed, err := Prune(root, 1); err != nil || len(removed) != 2 {
		t.Fatalf("Prune = %v, %v", removed, err)
	}
	set, err := Load(root, nil)
	if err != nil || set.Version != 3 {
		t.Fatalf("Load = %+v, %v", set, err)
	}
	if n, err := RemoveTemps(root, 0, 2); n != 0 || err != nil {
		t.Errorf("RemoveTemps = %d, %v", n, err)
	}
}

// Bad places to keep checkpoints: each one clear error naming it.
func TestS3BadRoot(t *testing.T) {
	root := storagetest.Location(t)
	bucket := strings.SplitN(strings.TrimPrefix(root, "s3://"), "/", 2)[0]
	if _, err := Load("s3://no-such-bucket-x/ckpt", nil); err == nil || !strings.Contains(err.Error(), "no-such-bucket-x") {
		t.Errorf("a missing bucket: %v", err)
	}
	if _, err := Load("s3:///ckpt", nil); err == nil || !strings.Contains(err.Error(), "no bucket") {
		t.Errorf("no bucket: %v", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	if _, err := Write(root, shardCheckpoint(1, 0, 1)); err == nil || !strings.Contains(err.Error(), bucket) {
		t.Errorf("wrong credentials: %v", err)
	}
}

// The commit decision: a manifest only when every part of n is there and
// none was written yet; other layouts' parts and other objects do not count.
func TestManifestFor(t *testing.T) {
	for _, c := range []struct {
		name   string
		n      int
		names  []string
		commit bool
	}{
		{"all parts", 2, []string{"variables-0-of-2.ckpt", "variables-1-of-2.ckpt"}, true},
		{"one missing", 2, []string{"variables-1-of-2.ckpt"}, false},
		{"committed already", 2, []string{"COMPLETE", "variables-0-of-2.ckpt", "variables-1-of-2.ckpt"}, false},
		{"another layout's parts", 2, []string{"variables-0-of-2.ckpt", "variables-0-of-1.ckpt", "notes"}, false},
		{"one shard", 1, []string{"variables-0-of-1.ckpt", "variables-1-of-2.ckpt"}, true},
		{"nothing", 1, nil, false},
	} {
		m, commit := manifestFor(7, c.n, c.names)
		if commit != c.commit || commit && (m.Version != 7 || m.NumShards != c.n || len(m.Parts) != c.n) {
			t.Errorf("%s: %+v, %v; want commit %v", c.name, m, commit, c.commit)
		}
	}
}
