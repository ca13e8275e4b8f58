// Package checkpoint stores and finds parameter-server checkpoints, laid
// out as in ElasticDL:
//
//	<dir>/version-<N>/variables-<i>-of-<n>.ckpt
//
// one file per PS shard i of n, each a pserverpb.Checkpoint message. A
// version is complete when all n files exist and decode and agree with
// their names. Files are written atomically (temp file in the same
// directory, fsync, rename, fsync of the directory), so a crash leaves at
// worst a hidden temp file or a version with some shards missing, never a
// partial file under a real name; readers skip such versions and take the
// newest complete one.
//
// root may also be s3://bucket/prefix: an object store has no rename, so
// there a version becomes whole only through a manifest,
// version-<N>/COMPLETE, which the shard whose part completes the set
// writes last; readers take only versions with one (remote.go).
//
// Shards write their files independently, each when its own version
// reaches a multiple of the checkpoint interval, so the newest version is
// often incomplete for a while. Load re-shards: a version written by n
// shards can be read by a job with any number of PS (ForShard).
package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"elasticdl/internal/atomicfile"
	"elasticdl/internal/ps/shard"
	"elasticdl/internal/storage"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

const (
	versionPrefix = "version-"
	filePrefix    = "variables-"
	fileSuffix    = ".ckpt"
	tempMarker    = atomicfile.TempSuffix // the temporary files atomicfile.Write leaves after a crash
)

// ErrNoCheckpoint is returned (wrapped) by Load when the directory exists
// but holds no complete version.
var ErrNoCheckpoint = errors.New("no complete checkpoint")

// VersionDir is the directory of one version under root.
func VersionDir(root string, version int64) string {
	return Join(root, versionPrefix+strconv.FormatInt(version, 10))
}

// FileName is the name of shard's file in a version written by numShards
// shards.
func FileName(shard, numShards int) string {
	return fmt.Sprintf("%s%d-of-%d%s", filePrefix, shard, numShards, fileSuffix)
}

// Path is the file of one shard of one version.
func Path(root string, version int64, shard, numShards int) string {
	return Join(root, versionPrefix+strconv.FormatInt(version, 10), FileName(shard, numShards))
}

// parseVersionDir returns N of "version-N".
func parseVersionDir(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, versionPrefix)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	// Only the canonical spelling, so that one version has one directory.
	if err != nil || v < 0 || strconv.FormatInt(v, 10) != s {
		return 0, false
	}
	return v, true
}

// parseFileName returns i and n of "variables-i-of-n.ckpt".
func parseFileName(name string) (shard, numShards int, ok bool) {
	s, ok := strings.CutPrefix(name, filePrefix)
	if !ok {
		return 0, 0, false
	}
	if s, ok = strings.CutSuffix(s, fileSuffix); !ok {
		return 0, 0, false
	}
	is, ns, ok := strings.Cut(s, "-of-")
	if !ok {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(is)
	n, err2 := strconv.Atoi(ns)
	if err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n || FileName(i, n) != name {
		return 0, 0, false
	}
	return i, n, true
}

// Write stores one shard's checkpoint as root/version-N/variables-i-of-n.ckpt
// atomically and returns the file's path. Files of the same version written
// by a different number of shards (an earlier job's) are removed after.
func Write(root string, c *pserverpb.Checkpoint) (string, error) {
	if c.GetNumShards() < 1 || c.GetShard() < 0 || c.GetShard() >= c.GetNumShards() {
		return "", fmt.Errorf("checkpoint: shard %d of %d out of range", c.GetShard(), c.GetNumShards())
	}
	if c.GetVersion() < 0 {
		return "", fmt.Errorf("checkpoint: negative version %d", c.GetVersion())
	}
	// Never write what Load would reject.
	if err := check(c, c.GetVersion(), int(c.GetShard()), int(c.GetNumShards())); err != nil {
		return "", fmt.Errorf("checkpoint: version %d shard %d of %d: %w", c.GetVersion(), c.GetShard(), c.GetNumShards(), err)
	}
	ctx := context.Background()
	be, err := open(ctx, root)
	if err != nil {
		return "", err
	}
	if err := write(ctx, be, c); err != nil {
		return "", err
	}
	return Path(root, c.GetVersion(), int(c.GetShard()), int(c.GetNumShards())), nil
}

func write(ctx context.Context, be backend, c *pserverpb.Checkpoint) error {
	b, err := proto.Marshal(c)
	if err != nil {
		return fmt.Errorf("checkpoint: encode version %d shard %d: %w", c.GetVersion(), c.GetShard(), err)
	}
	return be.write(ctx, c.GetVersion(), int(c.GetShard()), int(c.GetNumShards()), b)
}

// Versions lists the versions under root that have a directory (or any
// object), complete or not, newest first. A missing local root is an
// error wrapping fs.ErrNotExist.
func Versions(root string) ([]int64, error) {
	ctx := context.Background()
	be, err := open(ctx, root)
	if err != nil {
		return nil, err
	}
	return be.versions(ctx)
}

// Set is one complete version: every shard's file, decoded and checked.
type Set struct {
	Version   int64
	NumShards int
	Dir       string
	// Shards[i] is shard i's file.
	Shards []*pserverpb.Checkpoint
}

// Load returns the newest complete version under root. Newer versions that
// are incomplete or corrupt are skipped with a warning on log (nil
// discards). A missing root is an error wrapping fs.ErrNotExist; a root
// without a complete version, one wrapping ErrNoCheckpoint.
func Load(root string, log *slog.Logger) (*Set, error) {
	ctx := context.Background()
	be, err := open(ctx, root)
	if err != nil {
		return nil, err
	}
	return load(ctx, be, log)
}

func load(ctx context.Context, be backend, log *slog.Logger) (*Set, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	vs, err := be.versions(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		set, err := readVersion(ctx, be, v)
		if err != nil {
			log.Warn("skipping checkpoint version that is not complete", "dir", be.dir(v), "err", err)
			continue
		}
		return set, nil
	}
	return nil, fmt.Errorf("checkpoint: %s: %w", be.root(), ErrNoCheckpoint)
}

// ReadVersion reads and checks every file of one version, or says why the
// version is not complete.
func ReadVersion(root string, version int64) (*Set, error) {
	ctx := context.Background()
	be, err := open(ctx, root)
	if err != nil {
		return nil, err
	}
	return readVersion(ctx, be, version)
}

func readVersion(ctx context.Context, be backend, version int64) (*Set, error) {
	dir := be.dir(version)
	parts, err := be.parts(ctx, version)
	if err != nil {
		return nil, err
	}
	// Group the files by shard count; normally there is one group.
	type group struct {
		n       int
		have    []bool
		newest  int64 // latest modification, to choose between groups
		present int
	}
	groups := map[int]*group{}
	for _, p := range parts {
		i, n := p.shard, p.numShards
		g := groups[n]
		if g == nil {
			g = &group{n: n, have: make([]bool, n)}
			groups[n] = g
		}
		g.have[i] = true
		g.present++
		g.newest = max(g.newest, p.modTime)
	}
	if len(groups) == 0 {
		return nil, fmt.Errorf("checkpoint: %s: no checkpoint files", dir)
	}
	var complete []*group
	var missing []string
	for _, g := range groups {
		if g.present == g.n {
			complete = append(complete, g)
			continue
		}
		for i, ok := range g.have {
			if !ok {
				missing = append(missing, FileName(i, g.n))
			}
		}
	}
	if len(complete) == 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("checkpoint: %s: incomplete, missing %s", dir, strings.Join(missing, ", "))
	}
	// Two complete layouts only arise from two jobs sharing a directory at
	// once; the one written last is the one to continue from.
	g := slices.MaxFunc(complete, func(a, b *group) int { return cmp.Compare(a.newest, b.newest) })
	set := &Set{Version: version, NumShards: g.n, Dir: dir, Shards: make([]*pserverpb.Checkpoint, g.n)}
	var slotNames []string // every parameter's slots must have the same names
	for i := range g.n {
		c, err := readPart(ctx, be, version, i, g.n)
		if err != nil {
			return nil, err
		}
		for _, ps := range c.GetSlots() {
			names := slotNamesOf(ps)
			if slotNames == nil {
				slotNames = names
			} else if !slices.Equal(names, slotNames) {
				return nil, fmt.Errorf("checkpoint: %s: parameter %q has slots %v, others have %v", dir, ps.GetName(), names, slotNames)
			}
		}
		set.Shards[i] = c
	}
	return set, nil
}

func slotNamesOf(ps *pserverpb.ParameterSlots) []string {
	names := make([]string, 0, len(ps.GetSlots()))
	for _, t := range ps.GetSlots() {
		names = append(names, t.GetName())
	}
	slices.Sort(names)
	return names
}

// readFile decodes one shard's file and checks it against its name: its
// version, shard and shard count, that every parameter belongs to that
// shard and decodes, and that slots match their parameter's shape.
func readPart(ctx context.Context, be backend, version int64, index, numShards int) (*pserverpb.Checkpoint, error) {
	path := Join(be.dir(version), FileName(index, numShards))
	b, err := be.read(ctx, version, FileName(index, numShards))
	if err != nil {
		return nil, err
	}
	c := &pserverpb.Checkpoint{}
	if err := proto.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("checkpoint: decode %s: %w", path, err)
	}
	if err := check(c, version, index, numShards); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return c, nil
}

func check(c *pserverpb.Checkpoint, version int64, index, numShards int) error {
	if c.GetVersion() != version || int(c.GetShard()) != index || int(c.GetNumShards()) != numShards {
		return fmt.Errorf("holds version %d shard %d of %d, its name says version %d shard %d of %d",
			c.GetVersion(), c.GetShard(), c.GetNumShards(), version, index, numShards)
	}
	dims := make(map[string][]int64, len(c.GetDenseParameters()))
	for _, t := range c.GetDenseParameters() {
		name := t.GetName()
		if name == "" {
			return errors.New("parameter with an empty name")
		}
		if _, dup := dims[name]; dup {
			return fmt.Errorf("parameter %q given twice", name)
		}
		if got := shard.Of(name, numShards); got != index {
			return fmt.Errorf("parameter %q belongs to shard %d of %d", name, got, numShards)
		}
		if _, err := wire.Validate(t); err != nil {
			return err
		}
		dims[name] = t.GetDims()
	}
	seen := make(map[string]bool, len(c.GetSlots()))
	var slotNames []string // one optimizer: every parameter has the same slots
	for _, ps := range c.GetSlots() {
		name := ps.GetName()
		want, ok := dims[name]
		if !ok {
			return fmt.Errorf("slots of unknown parameter %q", name)
		}
		if seen[name] {
			return fmt.Errorf("slots of parameter %q given twice", name)
		}
		seen[name] = true
		if ps.GetStep() < 0 {
			return fmt.Errorf("parameter %q: negative step %d", name, ps.GetStep())
		}
		slotSeen := map[string]bool{}
		for _, t := range ps.GetSlots() {
			if t.GetName() == "" || slotSeen[t.GetName()] {
				return fmt.Errorf("parameter %q: slot name %q empty or repeated", name, t.GetName())
			}
			slotSeen[t.GetName()] = true
			if _, err := wire.Validate(t); err != nil {
				return fmt.Errorf("parameter %q: %w", name, err)
			}
			if !slices.Equal(t.GetDims(), want) {
				return fmt.Errorf("parameter %q: slot %q has dims %v, the parameter %v", name, t.GetName(), t.GetDims(), want)
			}
		}
		names := slotNamesOf(ps)
		if slotNames == nil {
			slotNames = names
		} else if !slices.Equal(names, slotNames) {
			return fmt.Errorf("parameter %q has slots %v, others have %v", name, names, slotNames)
		}
	}
	return checkTables(c.GetEmbeddingTables(), index, numShards)
}

// checkTables checks a shard's embedding tables: unique names, a positive
// dim, unique non-negative ids of this shard (id mod numShards == index),
// values and slots of [len(ids), dim], steps for every row or none.
func checkTables(tables []*pserverpb.EmbeddingTableCheckpoint, index, numShards int) error {
	seen := map[string]bool{}
	for _, et := range tables {
		name, dim := et.GetInfo().GetName(), et.GetInfo().GetDim()
		if name == "" || seen[name] {
			return fmt.Errorf("embedding table name %q empty or repeated", name)
		}
		seen[name] = true
		if dim < 1 {
			return fmt.Errorf("embedding table %q: dim %d", name, dim)
		}
		n := int64(len(et.GetIds()))
		ids := make(map[int64]bool, n)
		for _, id := range et.GetIds() {
			if id < 0 || id%int64(numShards) != int64(index) || ids[id] {
				return fmt.Errorf("embedding table %q: id %d negative, repeated or not of shard %d of %d", name, id, index, numShards)
			}
			ids[id] = true
		}
		want := []int64{n, dim}
		if v := et.GetValues(); v == nil || !slices.Equal(v.GetDims(), want) || int64(len(v.GetContent())) != 4*n*dim {
			return fmt.Errorf("embedding table %q: values are not [%d, %d]", name, n, dim)
		}
		if len(et.GetSteps()) != 0 && int64(len(et.GetSteps())) != n {
			return fmt.Errorf("embedding table %q: %d steps for %d rows", name, len(et.GetSteps()), n)
		}
		for _, t := range et.GetSlots() {
			if !slices.Equal(t.GetDims(), want) || int64(len(t.GetContent())) != 4*n*dim {
				return fmt.Errorf("embedding table %q: slot %q is not [%d, %d]", name, t.GetName(), n, dim)
			}
		}
	}
	return nil
}

// tablesForShard re-shards embedding tables: the rows of shard index of
// numPS (id mod numPS == index) gathered from every shard's tables. A
// table's slots are kept only when every shard stored the same slot names
// and steps.
func tablesForShard(shards []*pserverpb.Checkpoint, index, numPS int) []*pserverpb.EmbeddingTableCheckpoint {
	type acc struct {
		out      *pserverpb.EmbeddingTableCheckpoint
		slotKeys []string
		slotsOK  bool
	}
	byName := map[string]*acc{}
	var names []string
	for _, c := range shards {
		for _, et := range c.GetEmbeddingTables() {
			name := et.GetInfo().GetName()
			dim := int(et.GetInfo().GetDim())
			a := byName[name]
			keys := make([]string, len(et.GetSlots()))
			for i, t := range et.GetSlots() {
				keys[i] = t.GetName()
			}
			if a == nil {
				a = &acc{out: &pserverpb.EmbeddingTableCheckpoint{Info: et.GetInfo(), Values: &pserverpb.Tensor{Name: name}}, slotKeys: keys, slotsOK: true}
				for _, k := range keys {
					a.out.Slots = append(a.out.Slots, &pserverpb.Tensor{Name: k})
				}
				byName[name] = a
				names = append(names, name)
			}
			if !slices.Equal(keys, a.slotKeys) || (len(keys) > 0) != (len(et.GetSteps()) > 0) {
				a.slotsOK = false
			}
			rb := 4 * dim
			for k, id := range et.GetIds() {
				if id%int64(numPS) != int64(index) {
					continue
				}
				a.out.Ids = append(a.out.Ids, id)
				a.out.Values.Content = append(a.out.Values.Content, et.GetValues().GetContent()[k*rb:(k+1)*rb]...)
				if a.slotsOK {
					if len(et.GetSteps()) > 0 {
						a.out.Steps = append(a.out.Steps, et.GetSteps()[k])
					}
					for i, t := range et.GetSlots() {
						a.out.Slots[i].Content = append(a.out.Slots[i].Content, t.GetContent()[k*rb:(k+1)*rb]...)
					}
				}
			}
		}
	}
	slices.Sort(names)
	out := make([]*pserverpb.EmbeddingTableCheckpoint, 0, len(names))
	for _, name := range names {
		a := byName[name]
		dims := []int64{int64(len(a.out.Ids)), a.out.GetInfo().GetDim()}
		a.out.Values.Dims = dims
		if !a.slotsOK {
			a.out.Slots, a.out.Steps = nil, nil
		}
		for _, t := range a.out.Slots {
			t.Dims = dims
		}
		out = append(out, a.out)
	}
	return out
}

// ForShard returns what shard index of numPS holds of s: the parameters
// that shard.Of assigns to it, with their slots, at s's version. numPS may
// differ from s.NumShards (re-sharding).
func (s *Set) ForShard(index, numPS int) (*pserverpb.Checkpoint, error) {
	if numPS < 1 || index < 0 || index >= numPS {
		return nil, fmt.Errorf("checkpoint: shard %d of %d out of range", index, numPS)
	}
	out := &pserverpb.Checkpoint{Version: s.Version, Shard: int32(index), NumShards: int32(numPS)}
	for _, c := range s.Shards {
		addDense(out, c, index, numPS)
		if out.Optimizer == "" {
			out.Optimizer = c.GetOptimizer()
		}
	}
	out.EmbeddingTables = tablesForShard(s.Shards, index, numPS)
	out.Applied, out.Run = s.appliedForShard(index, numPS)
	if numPS == s.NumShards {
		out.CutVersion = s.Shards[index].GetCutVersion()
	}
	slices.SortFunc(out.DenseParameters, func(a, b *pserverpb.Tensor) int { return cmp.Compare(a.GetName(), b.GetName()) })
	slices.SortFunc(out.Slots, func(a, b *pserverpb.ParameterSlots) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// addDense adds to out c's parameters and slots that shard.Of assigns to
// shard index of numPS.
func addDense(out, c *pserverpb.Checkpoint, index, numPS int) {
	for _, t := range c.GetDenseParameters() {
		if shard.Of(t.GetName(), numPS) == index {
			out.DenseParameters = append(out.DenseParameters, t)
		}
	}
	for _, ps := range c.GetSlots() {
		if shard.Of(ps.GetName(), numPS) == index {
			out.Slots = append(out.Slots, ps)
		}
	}
}

// Part is what shard index of numPS takes of c, one shard's state: its
// parameters and slots that shard.Of assigns there and its embedding rows
// with id mod numPS == index. Version, run and applied minibatches are
// c's: a Set of such parts (one per shard of c's layout) re-shards as the
// whole files would (ForShard). Live re-sharding sends parts, so that no
// shard ships what the receiver would drop.
func Part(c *pserverpb.Checkpoint, index, numPS int) *pserverpb.Checkpoint {
	out := &pserverpb.Checkpoint{Version: c.GetVersion(), CutVersion: c.GetCutVersion(), Shard: c.GetShard(), NumShards: c.GetNumShards(),
		Optimizer: c.GetOptimizer(), Applied: c.GetApplied(), Run: c.GetRun()}
	addDense(out, c, index, numPS)
	out.EmbeddingTables = tablesForShard([]*pserverpb.Checkpoint{c}, index, numPS)
	return out
}

// appliedForShard is what a shard restored from s holds, by minibatch, and
// the run those minibatches are of: its own file's when the sharding is
// the same; otherwise only what every shard of s held (a minibatch some
// shard lacked is not wholly in the model), and none when the shards are
// of different runs.
func (s *Set) appliedForShard(index, numPS int) ([]*pserverpb.AppliedMinibatches, string) {
	if numPS == s.NumShards {
		return s.Shards[index].GetApplied(), s.Shards[index].GetRun()
	}
	run := s.Shards[0].GetRun()
	for _, c := range s.Shards {
		if c.GetRun() != run {
			return nil, ""
		}
	}
	counts := map[[2]int64]int{} // (task, minibatch) -> shards holding it
	for _, c := range s.Shards {
		for _, m := range c.GetApplied() {
			sp := m.GetSpans()
			for i := 0; i+1 < len(sp); i += 2 {
				for x := sp[i]; x < sp[i+1]; x++ {
					counts[[2]int64{m.GetTaskId(), int64(x)}]++
				}
			}
		}
	}
	byTask := map[int64][]int32{}
	for k, n := range counts {
		if n == len(s.Shards) {
			byTask[k[0]] = append(byTask[k[0]], int32(k[1]))
		}
	}
	var out []*pserverpb.AppliedMinibatches
	for _, task := range slices.Sorted(maps.Keys(byTask)) {
		xs := byTask[task]
		slices.Sort(xs)
		m := &pserverpb.AppliedMinibatches{TaskId: task}
		for i := 0; i < len(xs); {
			j := i
			for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
				j++
			}
			m.Spans = append(m.Spans, xs[i], xs[j]+1)
			i = j + 1
		}
		out = append(out, m)
	}
	return out, run
}

// Prune deletes the version directories under root older than the keep
// newest complete versions, complete or not (an incomplete version that
// old will never be completed: every shard has written newer ones). Newer
// incomplete versions stay: other shards may still be writing them. keep
// < 1 deletes nothing. It returns the directories deleted.
func Prune(root string, keep int) ([]string, error) {
	if keep < 1 {
		return nil, nil
	}
	ctx := context.Background()
	be, err := open(ctx, root)
	if err != nil {
		return nil, err
	}
	return prune(ctx, be, keep)
}

func prune(ctx context.Context, be backend, keep int) ([]string, error) {
	vs, err := be.versions(ctx)
	if err != nil {
		return nil, err
	}
	complete := 0
	cut := -1 // index in vs of the oldest version kept
	for i, v := range vs {
		if be.committed(ctx, v) == nil {
			complete++
			if complete == keep {
				cut = i
				break
			}
		}
	}
	if cut < 0 {
		return nil, nil
	}
	var removed []string
	var errs []error
	for _, v := range vs[cut+1:] {
		if err := be.remove(ctx, v); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, be.dir(v))
	}
	return removed, errors.Join(errs...)
}

// RemoveTemps deletes the temp files that shard index of numShards left in
// root's version directories when it died while writing, and returns how
// many. They are invisible to readers; this only reclaims the space.
func RemoveTemps(root string, index, numShards int) (int, error) {
	if storage.IsRemote(root) {
		return 0, nil // an object store never shows an upload cut short
	}
	pattern := filepath.Join(root, versionPrefix+"*", "."+FileName(index, numShards)+tempMarker+"*")
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	n := 0
	var errs []error
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("checkpoint: remove %s: %w", m, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// RemoveVersion deletes one version under root, whole or not; on an
// object store its manifest goes first.
func RemoveVersion(root string, version int64) error {
	ctx := context.Background()
	be, err := open(ctx, root)
	if err != nil {
		return err
	}
	return be.remove(ctx, version)
}
