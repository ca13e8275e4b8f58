package worker

import (
	"cmp"
	"fmt"
	"math/rand"
	"slices"

	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/wire"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

// Checkpoints and restore points of an AllReduce job. The ring's rank 0
// writes a checkpoint of step s (every --checkpoint_steps) once s is
// confirmed — when the next step's allreduce succeeds, before its update
// — in the PS checkpoint format (one shard: evaluate, predict and
// --checkpoint_dir_for_init read it), off the step path. Whoever wrote it
// then reports it with the applied steps up to it, and the master makes it
// the restore point: should every member of the ring be lost, the next
// ring starts from it (a new lineage) and the master rewinds the ledger.

// ckptResult is a checkpoint write that finished.
type ckptResult struct {
	version, lineage int64
	err              error
}

// maybeCheckpoint starts writing a checkpoint of the current state when it
// is due: called by rank 0 between a step's allreduce and its update, when
// the state (ar.steps) is confirmed.
func (w *Worker) maybeCheckpoint() {
	ar, every := w.ar, w.cfg.CheckpointSteps
	if every <= 0 || ar.ring.Rank() != 0 || ar.steps == 0 || ar.steps%every != 0 || ar.steps <= ar.ckptStarted || ar.ckptWriting {
		return
	}
	c := w.snapshot()
	ar.ckptStarted, ar.ckptWriting = ar.steps, true
	dir, keep, lineage, log := w.cfg.CheckpointDir, w.cfg.KeepCheckpointMax, ar.lineage, w.log
	go func() {
		_, err := checkpoint.Write(dir, c)
		if err == nil {
			if _, perr := checkpoint.Prune(dir, keep); perr != nil {
				log.Warn("prune checkpoints", "dir", dir, "err", perr)
			}
		}
		ar.ckptDone <- ckptResult{version: c.Version, lineage: lineage, err: err}
	}()
}

// collectCheckpoint notes a finished write: the next report carries it.
func (w *Worker) collectCheckpoint() {
	ar := w.ar
	select {
	case r := <-ar.ckptDone:
		ar.ckptWriting = false
		switch {
		case r.err != nil:
			w.log.Warn("checkpoint not written", "version", r.version, "err", r.err)
		case r.lineage != ar.lineage:
			// The state it holds was lost since: not a restore point.
		default:
			ar.ckptReport = max(ar.ckptReport, r.version)
			w.log.Info("checkpoint written", "dir", w.cfg.CheckpointDir, "version", r.version)
		}
	default:
	}
}

// snapshot copies the parameters and optimizer slots as checkpoint
// ar.steps.
func (w *Worker) snapshot() *pserverpb.Checkpoint {
	ar := w.ar
	c := &pserverpb.Checkpoint{Version: ar.steps, Shard: 0, NumShards: 1, Optimizer: ar.opt.String()}
	params := slices.Clone(w.params)
	slices.SortFunc(params, func(a, b *nn.Param) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range params {
		c.DenseParameters = append(c.DenseParameters, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
		slots, step, ok := ar.opt.Slots(p.Name)
		if !ok {
			continue
		}
		ps := &pserverpb.ParameterSlots{Name: p.Name, Step: step}
		for _, name := range ar.slotNames {
			ps.Slots = append(ps.Slots, wire.EncodeTensor(name, p.Value.Shape, slots[name]))
		}
		slices.SortFunc(ps.Slots, func(a, b *pserverpb.Tensor) int { return cmp.Compare(a.GetName(), b.GetName()) })
		c.Slots = append(c.Slots, ps)
	}
	return c
}

// loadRestore makes this member's state the restore point: checkpoint
// version under dir, or the initial model when dir is empty. Its tasks,
// unconfirmed records and log belong to a lost state: the master took
// the tasks back.
func (w *Worker) loadRestore(dir string, version int64) error {
	ar := w.ar
	ar.book.reset()
	ar.log, ar.reported = nil, 0
	w.current.Store(0)
	if dir == "" {
		if ar.steps == 0 && ar.lineage == 0 {
			return nil // never trained: still the initial model
		}
		net := w.spec.Build(rand.New(rand.NewSource(w.cfg.Seed)))
		for i, p := range net.Params() {
			copy(w.params[i].Value.Data, p.Value.Data)
		}
		opt, err := optimizer.Parse(ar.optSpec)
		if err != nil {
			return err
		}
		ar.opt, ar.steps = opt, 0
		return nil
	}
	set, err := checkpoint.ReadVersion(dir, version)
	if err != nil {
		return fmt.Errorf("restore point: %w", err)
	}
	c, err := set.ForShard(0, 1)
	if err != nil {
		return fmt.Errorf("restore point: %w", err)
	}
	byName := map[string]*pserverpb.Tensor{}
	for _, t := range c.GetDenseParameters() {
		byName[t.GetName()] = t
	}
	for _, p := range w.params {
		t := byName[p.Name]
		if t == nil {
			return fmt.Errorf("restore point %s: no parameter %q", set.Dir, p.Name)
		}
		if err := wire.DecodeIntoShape(t, p.Value.Shape, p.Value.Data); err != nil {
			return fmt.Errorf("restore point %s: %w", set.Dir, err)
		}
	}
	opt, err := optimizer.Parse(ar.optSpec)
	if err != nil {
		return err
	}
	for _, ps := range c.GetSlots() {
		slots := map[string][]float32{}
		for _, t := range ps.GetSlots() {
			_, data, err := wire.DecodeTensor(t)
			if err != nil {
				return fmt.Errorf("restore point %s: slots of %q: %w", set.Dir, ps.GetName(), err)
			}
			slots[t.GetName()] = data
		}
		if err := opt.SetSlots(ps.GetName(), slots, ps.GetStep()); err != nil {
			w.log.Warn("restore point's optimizer slots do not fit this optimizer; they restart from zero", "err", err)
			opt, _ = optimizer.Parse(ar.optSpec)
			break
		}
	}
	ar.opt, ar.steps = opt, version
	w.log.Info("restored", "dir", set.Dir, "version", version)
	return nil
}
