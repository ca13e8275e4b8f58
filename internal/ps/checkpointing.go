package ps

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// CheckpointStats counts the shard's checkpoint writes.
type CheckpointStats struct {
	// Written and Failed count write attempts by outcome; Skipped counts
	// snapshots replaced by a newer one before the writer got to them.
	Written, Failed, Skipped int64
	// LastVersion is the version last written or restored; -1 when none.
	LastVersion int64
}

// saver writes one shard's checkpoints in its own goroutine, one at a
// time, so a push that triggers a checkpoint pays only for the in-memory
// snapshot, not for the file I/O.
type saver struct {
	dir        string
	steps      int64
	keep       int
	index, num int
	s          *Server // for logging and metrics

	// write is checkpoint.Write; tests replace it to make writes slow or
	// fail.
	write func(dir string, c *pserverpb.Checkpoint) (string, error)

	mu      sync.Mutex
	pending *pserverpb.Checkpoint // newest snapshot not yet taken by the writer
	closed  bool
	wake    chan struct{} // capacity 1: "pending changed or closed"
	done    chan struct{} // closed when the writer goroutine has returned

	written, failed, skipped atomic.Int64
	last                     atomic.Int64
}

func newSaver(s *Server, dir string, steps int64, keep int) *saver {
	w := &saver{
		dir: dir, steps: steps, keep: keep, index: s.index, num: s.numShards(), s: s,
		write: checkpoint.Write,
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	w.last.Store(-1)
	return w
}

func (w *saver) start() {
	// A predecessor killed mid-write leaves hidden temp files; they are
	// never read, this only reclaims the space.
	if n, err := checkpoint.RemoveTemps(w.dir, w.index, w.num); err != nil {
		w.s.log.Warn("removing temp files of an interrupted checkpoint", "dir", w.dir, "err", err)
	} else if n > 0 {
		w.s.log.Info("removed temp files of an interrupted checkpoint", "dir", w.dir, "files", n)
	}
	go w.run()
}

// due reports whether reaching version v calls for a checkpoint.
func (w *saver) due(v int64) bool { return w != nil && w.steps > 0 && v > 0 && v%w.steps == 0 }

// offer hands a snapshot to the writer. A snapshot still waiting is
// replaced: writes cannot keep up, and the newer state is the useful one.
func (w *saver) offer(c *pserverpb.Checkpoint) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	dropped := w.pending
	w.pending = c
	w.mu.Unlock()
	if dropped != nil {
		w.skipped.Add(1)
		w.s.metrics.checkpoint(checkpointSkipped)
		w.s.log.Warn("checkpoint skipped: the previous one is still being written", "version", dropped.GetVersion(), "next", c.GetVersion())
	}
	select {
	case w.wake <- struct{}{}:
	default: // already signalled
	}
}

func (w *saver) run() {
	defer close(w.done)
	for range w.wake {
		w.mu.Lock()
		c, closed := w.pending, w.closed
		w.pending = nil
		w.mu.Unlock()
		if c != nil {
			w.save(c)
		}
		if closed {
			return
		}
	}
}

// close stops the writer after the snapshot it holds, then writes final
// (may be nil) unless that version was already written.
func (w *saver) close(final func() *pserverpb.Checkpoint) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-w.done
	if final == nil {
		return
	}
	if c := final(); c != nil && c.GetVersion() > w.last.Load() {
		w.s.log.Info("writing a final checkpoint", "version", c.GetVersion())
		w.save(c)
	}
}

// save writes c and prunes old versions. Failures are logged and counted:
// a lost checkpoint must not stop training.
func (w *saver) save(c *pserverpb.Checkpoint) {
	start := time.Now()
	path, err := w.write(w.dir, c)
	if err != nil {
		w.failed.Add(1)
		w.s.metrics.checkpoint(checkpointFailed)
		w.s.log.Error("checkpoint failed", "version", c.GetVersion(), "err", err)
		return
	}
	w.written.Add(1)
	w.last.Store(c.GetVersion())
	w.s.metrics.checkpoint(checkpointWritten)
	w.s.log.Info("checkpoint written", "version", c.GetVersion(), "path", path, "took", time.Since(start).Round(time.Millisecond))
	if w.keep > 0 {
		removed, err := checkpoint.Prune(w.dir, w.keep)
		if err != nil {
			w.s.log.Warn("deleting old checkpoints", "dir", w.dir, "err", err)
		}
		if len(removed) > 0 {
			w.s.log.Info("deleted old checkpoints", "dirs", removed, "keep", w.keep)
		}
	}
}

// CheckpointStats reports the shard's checkpoint writes so far.
func (s *Server) CheckpointStats() CheckpointStats {
	w := s.saver
	if w == nil {
		return CheckpointStats{LastVersion: -1}
	}
	return CheckpointStats{Written: w.written.Load(), Failed: w.failed.Load(), Skipped: w.skipped.Load(), LastVersion: w.last.Load()}
}

// snapshot copies the shard's parameters and optimizer slots, each
// parameter with its slots under the parameter's lock (the lock its
// updates hold), labelled version. Like a pull, it is consistent per
// parameter: pushes in flight may be in some parameters and not others.
func (s *Server) snapshot(t *table, version int64) *pserverpb.Checkpoint {
	c := &pserverpb.Checkpoint{
		Version:         version,
		CutVersion:      t.version.Load(),
		Shard:           int32(s.index),
		NumShards:       int32(s.numShards()),
		Optimizer:       s.opt.String(),
		DenseParameters: make([]*pserverpb.Tensor, 0, len(t.ordered)),
	}
	for _, p := range t.ordered {
		p.mu.Lock()
		c.DenseParameters = append(c.DenseParameters, wire.EncodeTensor(p.name, p.shape, p.data))
		slots, step, ok := s.opt.Slots(p.name)
		p.mu.Unlock()
		if !ok {
			continue // never updated: nothing to restore
		}
		ps := &pserverpb.ParameterSlots{Name: p.name, Step: step}
		for _, name := range sortedKeys(slots) {
			ps.Slots = append(ps.Slots, wire.EncodeTensor(name, p.shape, slots[name]))
		}
		c.Slots = append(c.Slots, ps)
	}
	for _, name := range sortedKeys(t.emb) {
		c.EmbeddingTables = append(c.EmbeddingTables, s.snapshotEmb(t.emb[name]))
	}
	c.Applied, c.Run = s.applied.list(nil), s.run
	return c
}

// finalSnapshot is the state at shutdown, or nil when uninitialized.
func (s *Server) finalSnapshot() *pserverpb.Checkpoint {
	t := s.table.Load()
	if t == nil {
		return nil
	}
	s.cut.Lock()
	defer s.cut.Unlock()
	return s.snapshot(t, t.version.Load())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// restore initializes the shard from the newest complete checkpoint in
// cfg.CheckpointDir or, when that holds none, cfg.CheckpointDirForInit,
// and leaves it uninitialized when neither has one. Errors are for
// checkpoints that exist but cannot be used, and for a
// CheckpointDirForInit without one.
func (s *Server) restore(cfg Config) error {
	set, warmStart, err := s.findCheckpoint(cfg)
	if err != nil || set == nil {
		return err
	}
	c, err := set.ForShard(s.index, s.numShards())
	if err != nil {
		return err
	}
	t, err := s.newTable(c.GetDenseParameters(), s.numShards())
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", set.Dir, err)
	}
	t.version.Store(max(c.GetVersion(), c.GetCutVersion()))
	slotsRestored, err := s.restoreSlots(c, set.Dir)
	if err != nil {
		return err
	}
	if err := s.restoreTables(t, c, set.Dir, s.numShards()); err != nil {
		return err
	}
	if c.GetRun() == s.run && !warmStart {
		s.applied.restore(c.GetApplied())
	} else if len(c.GetApplied()) > 0 {
		s.log.Info("the checkpoint's applied minibatches are another run's: starting with none", "checkpoint_run", c.GetRun(), "run", s.run)
	}
	s.table.Store(t)
	s.restored = restoredFrom{dir: set.Dir, version: c.GetVersion()}
	if s.saver != nil {
		s.saver.last.Store(c.GetVersion())
	}
	s.log.Info("restored checkpoint", "dir", set.Dir, "version", c.GetVersion(), "counting_from", t.version.Load(), "params", len(t.ordered),
		"slots", slotsRestored, "embedding_tables", len(t.emb), "checkpoint_shards", set.NumShards)
	return nil
}

// findCheckpoint returns the checkpoint to restore (nil: none), and
// whether it is a warm start from CheckpointDirForInit.
func (s *Server) findCheckpoint(cfg Config) (set *checkpoint.Set, warmStart bool, err error) {
	if cfg.CheckpointDir != "" {
		set, err := checkpoint.Load(cfg.CheckpointDir, s.log)
		switch {
		case err == nil:
			return set, false, nil
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, checkpoint.ErrNoCheckpoint):
			s.log.Info("no checkpoint to restore", "dir", cfg.CheckpointDir)
		default:
			return nil, false, fmt.Errorf("checkpoint_dir: %w", err)
		}
	}
	if cfg.CheckpointDirForInit == "" {
		return nil, false, nil
	}
	// Asked for explicitly, so its absence is an error, not a fresh start.
	set, err = checkpoint.Load(cfg.CheckpointDirForInit, s.log)
	if err != nil {
		return nil, false, fmt.Errorf("checkpoint_dir_for_init: %w", err)
	}
	return set, true, nil
}

// restoreSlots hands the checkpoint's optimizer slots to the optimizer.
// Slots of another optimizer (another kind, or momentum vs none) do not
// fit; they are dropped as a whole with a warning, as a warm start into a
// different optimizer is legitimate. It returns how many were restored.
func (s *Server) restoreSlots(c *pserverpb.Checkpoint, dir string) (int, error) {
	for i, ps := range c.GetSlots() {
		slots := make(map[string][]float32, len(ps.GetSlots()))
		for _, t := range ps.GetSlots() {
			_, data, err := wire.DecodeTensor(t)
			if err != nil {
				return 0, fmt.Errorf("checkpoint %s: parameter %q: %w", dir, ps.GetName(), err)
			}
			slots[t.GetName()] = data
		}
		if err := s.opt.SetSlots(ps.GetName(), slots, ps.GetStep()); err != nil {
			// Checkpoints hold one set of slot names throughout, so the
			// first parameter decides whether they fit this optimizer.
			if i == 0 {
				s.log.Warn("checkpoint's optimizer slots do not fit this optimizer; they restart from zero",
					"checkpoint_optimizer", c.GetOptimizer(), "optimizer", s.opt.String(), "err", err)
				return 0, nil
			}
			return 0, fmt.Errorf("checkpoint %s: restore slots: %w", dir, err)
		}
	}
	return len(c.GetSlots()), nil
}

// restoreTables rebuilds the checkpoint's embedding tables (their rows of
// this shard) into t.
func (s *Server) restoreTables(t *table, c *pserverpb.Checkpoint, dir string, numShards int) error {
	if len(c.GetEmbeddingTables()) == 0 {
		return nil
	}
	infos := make([]*pserverpb.EmbeddingTableInfo, len(c.GetEmbeddingTables()))
	for i, et := range c.GetEmbeddingTables() {
		infos[i] = et.GetInfo()
	}
	var err error
	if t.emb, err = s.newEmbTables(infos); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	for _, et := range c.GetEmbeddingTables() {
		e := t.emb[et.GetInfo().GetName()]
		fit, err := s.restoreEmb(e, et, numShards)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		if !fit && len(et.GetIds()) > 0 && len(s.rule.SlotNames()) > 0 {
			s.log.Warn("checkpoint's embedding slots do not fit this optimizer; they restart from their initial value",
				"table", e.info.GetName(), "checkpoint_optimizer", c.GetOptimizer(), "optimizer", s.opt.String())
		}
	}
	return nil
}
