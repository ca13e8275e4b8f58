package checkpoint

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"elasticdl/internal/ps/shard"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// names are parameter names spread over shards; values and slots are
// derived from the name so any shard layout can be checked.
var names = []string{"conv/kernel", "conv/bias", "dense_0/kernel", "dense_0/bias", "dense_1/kernel", "dense_1/bias", "w", "b"}

func value(name string, version int64) []float32 {
	v := make([]float32, 2+len(name)%3)
	for i := range v {
		v[i] = float32(len(name)*100+i) + float32(version)/1000
	}
	return v
}

func scaled(x []float32, f float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = v * f
	}
	return out
}

// shardCheckpoint is what shard index of n holds of names at version,
// sorted by name as the PS writes it.
func shardCheckpoint(version int64, index, n int) *pserverpb.Checkpoint {
	c := &pserverpb.Checkpoint{Version: version, Shard: int32(index), NumShards: int32(n), Optimizer: "adam:learning_rate=0.001"}
	for _, name := range slices.Sorted(slices.Values(names)) {
		if shard.Of(name, n) != index {
			continue
		}
		v := value(name, version)
		shape := []int{len(v)}
		c.DenseParameters = append(c.DenseParameters, wire.EncodeTensor(name, shape, v))
		c.Slots = append(c.Slots, &pserverpb.ParameterSlots{Name: name, Step: version, Slots: []*pserverpb.Tensor{
			wire.EncodeTensor("m", shape, scaled(v, 2)),
			wire.EncodeTensor("v", shape, scaled(v, 3)),
		}})
	}
	return c
}

func writeVersion(t *testing.T, root string, version int64, n int) {
	t.Helper()
	for i := range n {
		if _, err := Write(root, shardCheckpoint(version, i, n)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteLoadRoundTrip(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ckpt") // created by Write
	writeVersion(t, root, 100, 2)
	for _, f := range []string{"version-100/variables-0-of-2.ckpt", "version-100/variables-1-of-2.ckpt"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("want %s: %v", f, err)
		}
	}
	set, err := Load(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if set.Version != 100 || set.NumShards != 2 || set.Dir != VersionDir(root, 100) || len(set.Shards) != 2 {
		t.Fatalf("set %+v", set)
	}
	for i, c := range set.Shards {
		if !proto.Equal(c, shardCheckpoint(100, i, 2)) {
			t.Errorf("shard %d differs after the round trip", i)
		}
	}
}

func TestWriteRejectsBadCheckpoints(t *testing.T) {
	root := t.TempDir()
	good := shardCheckpoint(5, 0, 1)
	dup := proto.Clone(good).(*pserverpb.Checkpoint)
	dup.DenseParameters = append(dup.DenseParameters, dup.DenseParameters[0])
	misfiled := shardCheckpoint(5, 0, 2)
	misfiled.DenseParameters = append(misfiled.DenseParameters, shardCheckpoint(5, 1, 2).DenseParameters[0])
	edit := func(f func(c *pserverpb.Checkpoint)) *pserverpb.Checkpoint {
		c := proto.Clone(good).(*pserverpb.Checkpoint)
		f(c)
		return c
	}
	for name, c := range map[string]*pserverpb.Checkpoint{
		"shard out of range":     {Version: 1, Shard: 1, NumShards: 1},
		"no shards":              {Version: 1},
		"negative version":       {Version: -1, NumShards: 1},
		"duplicate param":        dup,
		"misfiled param":         misfiled,
		"unnamed param":          edit(func(c *pserverpb.Checkpoint) { c.DenseParameters[0].Name = "" }),
		"negative step":          edit(func(c *pserverpb.Checkpoint) { c.Slots[0].Step = -1 }),
		"slots given twice":      edit(func(c *pserverpb.Checkpoint) { c.Slots[1].Name = c.Slots[0].Name }),
		"unnamed slot":           edit(func(c *pserverpb.Checkpoint) { c.Slots[0].Slots[0].Name = "" }),
		"repeated slot":          edit(func(c *pserverpb.Checkpoint) { c.Slots[0].Slots[1].Name = "m" }),
		"truncated slot":         edit(func(c *pserverpb.Checkpoint) { c.Slots[0].Slots[0].Content = nil }),
		"slot names differ":      edit(func(c *pserverpb.Checkpoint) { c.Slots[1].Slots = c.Slots[1].Slots[:1] }),
		"param content too long": edit(func(c *pserverpb.Checkpoint) { c.DenseParameters[0].Content = append(c.DenseParameters[0].Content, 0) }),
	} {
		if _, err := Write(root, c); err == nil {
			t.Errorf("%s: Write accepted it", name)
		}
	}
	if vs, _ := Versions(root); len(vs) != 0 {
		t.Errorf("rejected writes left versions %v", vs)
	}
}

// A crash mid-write leaves a hidden temp file, and a version where only
// some shards wrote; neither is visible to Load, which takes the newest
// complete version.
func TestInterruptedWritesAreInvisible(t *testing.T) {
	root := t.TempDir()
	writeVersion(t, root, 100, 2)
	// Version 150: shard 0 died while writing, shard 1 finished.
	dir150 := VersionDir(root, 150)
	if err := os.MkdirAll(dir150, 0o755); err != nil {
		t.Fatal(err)
	}
	half, _ := proto.Marshal(shardCheckpoint(150, 0, 2))
	if err := os.WriteFile(filepath.Join(dir150, ".variables-0-of-2.ckpt.tmp123"), half[:len(half)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(root, shardCheckpoint(150, 1, 2)); err != nil {
		t.Fatal(err)
	}
	// Version 200: an empty directory (died before the first write).
	if err := os.MkdirAll(VersionDir(root, 200), 0o755); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	set, err := Load(root, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if set.Version != 100 {
		t.Fatalf("loaded version %d, want 100", set.Version)
	}
	for _, want := range []string{"version-150", "missing variables-0-of-2.ckpt", "version-200", "no checkpoint files"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("warnings lack %q:\n%s", want, logs.String())
		}
	}
	// Shard 0's successor reclaims its temp file, and only its own.
	other := filepath.Join(dir150, ".variables-1-of-2.ckpt.tmp9")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := RemoveTemps(root, 0, 2); err != nil || n != 1 {
		t.Fatalf("RemoveTemps = %d, %v; want 1", n, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another shard's temp file was removed: %v", err)
	}
}

// A write that fails at the rename leaves neither the file nor its temp.
func TestFailedWriteLeavesNoTemp(t *testing.T) {
	root := t.TempDir()
	// A directory where the file should go makes the rename fail.
	target := Path(root, 7, 0, 1)
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(root, shardCheckpoint(7, 0, 1)); err == nil {
		t.Fatal("Write succeeded over a directory")
	}
	entries, _ := os.ReadDir(VersionDir(root, 7))
	for _, e := range entries {
		if strings.Contains(e.Name(), tempMarker) {
			t.Errorf("temp file %s left behind", e.Name())
		}
	}
	// A root that is a file: the version directory cannot be created.
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(file, shardCheckpoint(7, 0, 1)); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("Write under a file: %v, want an error naming it", err)
	}
}

func TestLoadFallsBackPastCorruptVersions(t *testing.T) {
	corruptions := map[string]func(t *testing.T, root string){
		"garbage bytes": func(t *testing.T, root string) {
			writeFile(t, Path(root, 300, 1, 2), []byte("not a protobuf \xff\xff\xff"))
		},
		"truncated tensor": func(t *testing.T, root string) {
			c := shardCheckpoint(300, 1, 2)
			c.DenseParameters[0].Content = c.DenseParameters[0].Content[:3]
			writeProto(t, Path(root, 300, 1, 2), c)
		},
		"wrong version inside": func(t *testing.T, root string) {
			writeProto(t, Path(root, 300, 1, 2), shardCheckpoint(299, 1, 2))
		},
		"wrong shard inside": func(t *testing.T, root string) {
			writeProto(t, Path(root, 300, 1, 2), shardCheckpoint(300, 0, 2))
		},
		"slot of another shape": func(t *testing.T, root string) {
			c := shardCheckpoint(300, 1, 2)
			c.Slots[0].Slots[0] = wire.EncodeTensor("m", []int{1}, []float32{1})
			writeProto(t, Path(root, 300, 1, 2), c)
		},
		"slots of an unknown parameter": func(t *testing.T, root string) {
			c := shardCheckpoint(300, 1, 2)
			c.Slots[0].Name = "nope"
			writeProto(t, Path(root, 300, 1, 2), c)
		},
		"slot names differ between shards": func(t *testing.T, root string) {
			c := shardCheckpoint(300, 1, 2)
			for _, ps := range c.Slots {
				ps.Slots = ps.Slots[:1]
			}
			writeProto(t, Path(root, 300, 1, 2), c)
		},
		"unreadable file": func(t *testing.T, root string) {
			// A directory under a file's name.
			if err := os.MkdirAll(filepath.Join(Path(root, 300, 1, 2), "d"), 0o755); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			writeVersion(t, root, 200, 2)
			if _, err := Write(root, shardCheckpoint(300, 0, 2)); err != nil {
				t.Fatal(err)
			}
			corrupt(t, root)
			var logs bytes.Buffer
			set, err := Load(root, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if set.Version != 200 {
				t.Fatalf("loaded version %d, want the fallback 200", set.Version)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "version-300") {
				t.Errorf("no warning about version-300:\n%s", logs.String())
			}
		})
	}
}

func TestLoadWithoutCheckpoints(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := Load(missing, nil); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing dir: %v, want ErrNotExist naming it", err)
	}
	empty := t.TempDir()
	// Things that are not versions are ignored.
	writeFile(t, filepath.Join(empty, "version-9"), nil)                         // a file
	writeFile(t, filepath.Join(empty, "notes.txt"), nil)                         // not a version
	if err := os.Mkdir(filepath.Join(empty, "version-007"), 0o755); err != nil { // not canonical
		t.Fatal(err)
	}
	writeProto(t, filepath.Join(empty, "version-007", "variables-0-of-1.ckpt"), shardCheckpoint(7, 0, 1))
	if _, err := Load(empty, nil); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("empty dir: %v, want ErrNoCheckpoint", err)
	}
}

// An earlier job with another number of PS left files in a version; the
// newest complete layout wins, and writing removes the other layout.
func TestMixedShardCounts(t *testing.T) {
	root := t.TempDir()
	writeProto(t, Path(root, 50, 0, 2), shardCheckpoint(50, 0, 2)) // 1 of 2: incomplete
	writeProto(t, Path(root, 50, 0, 1), shardCheckpoint(50, 0, 1))
	set, err := ReadVersion(root, 50)
	if err != nil || set.NumShards != 1 {
		t.Fatalf("ReadVersion = %+v, %v; want the complete 1-shard layout", set, err)
	}
	if _, err := Write(root, shardCheckpoint(50, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(Path(root, 50, 0, 2)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the other layout's file is still there: %v", err)
	}
}

func TestPruneKeepsNewestComplete(t *testing.T) {
	root := t.TempDir()
	for _, v := range []int64{10, 20, 30, 40} {
		writeVersion(t, root, v, 2)
	}
	// An old incomplete version, and a newer one still being written.
	writeProto(t, Path(root, 5, 0, 2), shardCheckpoint(5, 0, 2))
	writeProto(t, Path(root, 50, 1, 2), shardCheckpoint(50, 1, 2))

	if removed, err := Prune(root, 0); err != nil || len(removed) != 0 {
		t.Fatalf("Prune(0) = %v, %v; want nothing removed", removed, err)
	}
	removed, err := Prune(root, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{VersionDir(root, 20), VersionDir(root, 10), VersionDir(root, 5)}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	if vs, _ := Versions(root); !slices.Equal(vs, []int64{50, 40, 30}) {
		t.Errorf("left %v, want [50 40 30]", vs)
	}
	// Fewer complete versions than keep: nothing goes.
	if removed, err := Prune(root, 5); err != nil || len(removed) != 0 {
		t.Errorf("Prune(5) = %v, %v", removed, err)
	}
	if _, err := Prune(filepath.Join(root, "nope"), 1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Prune of a missing dir: %v", err)
	}
}

func TestForShardReshards(t *testing.T) {
	for _, c := range []struct{ from, to int }{{2, 1}, {1, 2}, {2, 3}, {3, 2}, {2, 2}} {
		root := t.TempDir()
		writeVersion(t, root, 40, c.from)
		set, err := Load(root, nil)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for i := range c.to {
			got, err := set.ForShard(i, c.to)
			if err != nil {
				t.Fatal(err)
			}
			want := shardCheckpoint(40, i, c.to)
			want.Optimizer = got.Optimizer
			if !proto.Equal(got, want) {
				t.Errorf("%d→%d shards: shard %d got params %v, want %v", c.from, c.to, i, tensorNames(got.DenseParameters), tensorNames(want.DenseParameters))
			}
			for _, p := range got.DenseParameters {
				seen[p.Name]++
			}
		}
		for _, n := range names {
			if seen[n] != 1 {
				t.Errorf("%d→%d shards: %q restored %d times", c.from, c.to, n, seen[n])
			}
		}
	}
	set := &Set{Shards: []*pserverpb.Checkpoint{shardCheckpoint(1, 0, 1)}, NumShards: 1}
	if _, err := set.ForShard(2, 2); err == nil {
		t.Error("ForShard(2, 2) accepted")
	}
}

func TestVersionAndFileNames(t *testing.T) {
	for _, c := range []struct {
		name string
		i, n int
		ok   bool
	}{
		{"variables-0-of-1.ckpt", 0, 1, true},
		{"variables-3-of-4.ckpt", 3, 4, true},
		{"variables-4-of-4.ckpt", 0, 0, false},
		{"variables-01-of-4.ckpt", 0, 0, false},
		{"variables-0-of-0.ckpt", 0, 0, false},
		{".variables-0-of-1.ckpt.tmp1", 0, 0, false},
		{"variables-0-of-1.ckpt.tmp1", 0, 0, false},
		{"variables-a-of-1.ckpt", 0, 0, false},
	} {
		i, n, ok := parseFileName(c.name)
		if ok != c.ok || ok && (i != c.i || n != c.n) {
			t.Errorf("parseFileName(%q) = %d, %d, %v", c.name, i, n, ok)
		}
	}
	for name, want := range map[string]bool{"version-0": true, "version-12": true, "version--1": false, "version-01": false, "version-": false, "v-1": false} {
		if _, ok := parseVersionDir(name); ok != want {
			t.Errorf("parseVersionDir(%q) ok = %v", name, ok)
		}
	}
}

func tensorNames(ts []*pserverpb.Tensor) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeProto(t *testing.T, path string, c *pserverpb.Checkpoint) {
	t.Helper()
	b, err := proto.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b)
}

// TestForShardApplied: a shard restored with the same sharding holds its
// own file's minibatches; resharded, only those every old shard held.
func TestForShardApplied(t *testing.T) {
	am := func(task int64, spans ...int32) *pserverpb.AppliedMinibatches {
		return &pserverpb.AppliedMinibatches{TaskId: task, Spans: spans}
	}
	set := &Set{Version: 3, NumShards: 2, Shards: []*pserverpb.Checkpoint{
		{Shard: 0, NumShards: 2, Applied: []*pserverpb.AppliedMinibatches{am(1, 0, 4), am(2, 0, 1)}},
		{Shard: 1, NumShards: 2, Applied: []*pserverpb.AppliedMinibatches{am(1, 0, 2, 3, 5)}},
	}}
	same, err := set.ForShard(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(same.Applied) != 1 || same.Applied[0].TaskId != 1 || !slices.Equal(same.Applied[0].Spans, []int32{0, 2, 3, 5}) {
		t.Errorf("same sharding: %v, want shard 1's own", same.Applied)
	}
	one, err := set.ForShard(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Applied) != 1 || one.Applied[0].TaskId != 1 || !slices.Equal(one.Applied[0].Spans, []int32{0, 2, 3, 4}) {
		t.Errorf("resharded: %v, want task 1's [0,2) and [3,4) (held by both), not task 2", one.Applied)
	}
}
