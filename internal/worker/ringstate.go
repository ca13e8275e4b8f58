package worker

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/collective"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/wire"
	"elasticdl/proto/masterpb"
)

// How a ring's members agree on one state when it (re-)forms, what they
// report to the master of their steps, and the model's upload at the end.
// See allreduce.go for the protocol.

// putTag writes c as a tag (see tagLen) at the start of dst.
func putTag(dst []float32, c contrib) {
	dst[0], dst[1], dst[2] = float32(c.worker+1), float32(c.task&0xFFFFFF), float32(c.task>>24)
	dst[3], dst[4] = float32(c.start), float32(c.end)
}

// decodeTags reads the members' tags of a step.
func decodeTags(tags []float32) []contrib {
	var out []contrib
	for i := 0; i+tagLen <= len(tags); i += tagLen {
		t := tags[i : i+tagLen]
		if t[0] == 0 {
			continue
		}
		out = append(out, contrib{worker: int(t[0]) - 1, task: int64(t[1]) | int64(t[2])<<24, start: int64(t[3]), end: int64(t[4])})
	}
	return out
}

// joinRing checks in with the master until its ring forms, forms it, and
// agrees on the state with the other members. over: the job's tasks are
// done.
func (w *Worker) joinRing(ctx context.Context) (over bool, err error) {
	ar := w.ar
	for {
		resp, err := w.master.JoinRing(ctx, &masterpb.JoinRingRequest{WorkerId: int32(w.cfg.WorkerID), Addr: ar.ln.Addr()})
		switch status.Code(err) {
		case codes.OK:
		case codes.FailedPrecondition:
			return true, nil
		case codes.Unavailable:
			resp = &masterpb.RingResponse{WaitMs: 200}
		default:
			return false, fmt.Errorf("join ring: %w", err)
		}
		if resp.Leave {
			return false, errLetGo
		}
		if !resp.Formed {
			select {
			case <-ctx.Done():
				return false, context.Cause(ctx)
			case <-time.After(time.Duration(resp.WaitMs) * time.Millisecond):
			}
			continue
		}
		peers, ids, rank := make([]string, len(resp.Members)), make([]int, len(resp.Members)), -1
		for i, m := range resp.Members {
			peers[i], ids[i] = m.Addr, int(m.WorkerId)
			if int(m.WorkerId) == w.cfg.WorkerID {
				rank = i
			}
		}
		if rank < 0 {
			continue // formed without this worker: check in again
		}
		ring, err := w.form(ctx, collective.Config{Rank: rank, Peers: peers, PeerIDs: ids, Version: resp.Version, Timeout: ringTimeout, Logger: w.log})
		if err == nil {
			ar.ring, ar.leaveFlag = ring, false
			if resp.Version >= ar.latest.version {
				ar.latest = ringNews{version: resp.Version}
			}
			ar.ringLineage, ar.restoreDir, ar.restoreVersion = resp.Lineage, resp.RestoreDir, resp.RestoreVersion
			ar.lastReport = time.Time{} // rank 0 reports the new ring's first confirmed step at once
			w.rings.enter(ring)
			ar.buf = make([]float32, ar.nGrads+stepHeader+ring.Size()*(tagLen+1)) // +1: its rate
			ar.rates, ar.balancing = nil, balance{}
			ar.masterDone = map[int64]int64{}
			for _, h := range resp.Held {
				ar.masterDone[h.TaskId] = h.Done
			}
			if err = w.syncState(ctx); err == nil {
				w.log.Info("in ring", "version", resp.Version, "rank", rank, "world_size", len(peers), "steps", ar.steps)
				return false, nil
			}
			ring.Close()
			ar.ring = nil
		}
		if ctx.Err() != nil {
			return false, context.Cause(ctx)
		}
		if w.rings.newest.Load() > resp.Version {
			// Superseded, not broken: check in for the newer version.
			w.log.Info("ring superseded while forming", "version", resp.Version, "newest", w.rings.newest.Load())
			continue
		}
		w.log.Warn("forming ring failed", "version", resp.Version, "err", err)
		if _, rerr := w.master.ReportRingBroken(ctx, &masterpb.ReportRingBrokenRequest{WorkerId: int32(w.cfg.WorkerID), Version: resp.Version, Error: err.Error()}); rerr != nil {
			w.log.Debug("report ring broken", "err", rerr)
		}
	}
}

// form connects to the ring's members; it gives up as soon as the poller
// sees a newer version (a member that went on to it would never connect,
// and the new version waits for this worker).
func (w *Worker) form(ctx context.Context, cfg collective.Config) (*collective.Ring, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.rings.forming.Store(&formingRing{version: cfg.Version, cancel: cancel})
	defer w.rings.forming.Store(nil)
	return w.ar.ln.Form(ctx, cfg)
}

// syncState makes every member of a new ring hold the state of the member
// with the most steps (the lowest rank among equals): its parameters,
// optimizer state, step count and last steps' tags. This member then
// keeps its records that state includes and redoes the others; rank 0
// reports the state's log and settles the ring.
func (w *Worker) syncState(ctx context.Context) error {
	ar, ring := w.ar, w.ar.ring
	// Each member's step count + 1 (0: no state of the ring's lineage) in
	// two 24-bit halves in its own slots: integers a float32 holds
	// exactly, one non-zero term a slot, so the sum is everyone's count.
	stale := ar.lineage != ar.ringLineage
	mine := ar.steps + 1
	if stale {
		mine = 0
	}
	counts := make([]float32, 2*ring.Size())
	counts[2*ring.Rank()], counts[2*ring.Rank()+1] = float32(mine&0xFFFFFF), float32(mine>>24)
	if err := ring.AllReduce(ctx, counts); err != nil {
		return err
	}
	root, most := 0, int64(-1)
	for i := 0; i < ring.Size(); i++ {
		if c := int64(counts[2*i]) | int64(counts[2*i+1])<<24; c > most {
			root, most = i, c
		}
	}
	isRoot := ring.Rank() == root
	if stale {
		// This member's tasks and records belong to a lost state (the
		// master took the tasks back): it starts over from the ring's.
		ar.book.reset()
		ar.log = nil
		ar.reported = 0 // a step number of the lost lineage
		w.current.Store(0)
	}
	if most == 0 && isRoot {
		// No member holds a state of this lineage: start from the
		// restore point.
		if err := w.loadRestore(ar.restoreDir, ar.restoreVersion); err != nil {
			return &fatalError{err}
		}
	}
	tags := encodeLog(ar.log)
	size := []float32{float32(len(tags))}
	if err := ring.Broadcast(ctx, root, size); err != nil {
		return err
	}
	state := w.encodeState(isRoot)
	if !isRoot {
		tags = make([]float32, int(size[0]))
	}
	state = append(state, tags...)
	if err := ring.Broadcast(ctx, root, state); err != nil {
		return err
	}
	if !isRoot {
		if err := w.decodeState(state); err != nil {
			return &fatalError{err}
		}
		ar.log = decodeLog(state[len(state)-len(tags):])
	}
	ar.lineage = ar.ringLineage // this member's state is now the ring's
	w.settleRecords()
	if err := w.confirm(ctx, ar.steps); err != nil {
		return err
	}
	if ring.Rank() == 0 {
		w.settle(ctx)
	}
	return nil
}

// settleRecords keeps this member's unconfirmed records that the agreed
// state holds (its tags, or what the master's ledger has of this worker's
// tasks) and gives the others back to their tasks to be redone.
func (w *Worker) settleRecords() {
	ar := w.ar
	held := map[contrib]bool{}
	for _, st := range ar.log {
		for _, c := range st.parts {
			held[c] = true
		}
	}
	ar.book.settle(func(r stepRecord) bool {
		c := contrib{worker: w.cfg.WorkerID, task: r.task.t.Id, start: r.start, end: r.end}
		return held[c] || ar.masterDone[c.task] >= r.end
	})
}

// settle reports the agreed state's log — the records it holds of the
// workers no longer in the ring included, which their tasks then resume
// after — and tells the master the ring settled, so that those tasks can
// go back to the queue.
func (w *Worker) settle(ctx context.Context) {
	w.reportApplied(ctx, w.ar.steps) // the agreed state's steps are for good
	if _, err := w.master.SettleRing(ctx, &masterpb.SettleRingRequest{WorkerId: int32(w.cfg.WorkerID), Version: w.ar.ring.Version()}); err != nil {
		w.log.Debug("settle ring", "err", err)
	}
}

// encodeLog lays out a log of steps: per step its number and its ring's
// version (each in two 24-bit halves), its count of parts, then its tags.
func encodeLog(log []loggedStep) []float32 {
	var out []float32
	for _, st := range log {
		out = append(out, float32(st.step&0xFFFFFF), float32(st.step>>24), float32(st.version&0xFFFFFF), float32(st.version>>24),
			float32(len(st.parts)))
		for _, c := range st.parts {
			out = append(out, make([]float32, tagLen)...)
			putTag(out[len(out)-tagLen:], c)
		}
	}
	return out
}

// logHeader is a logged step's fields before its tags.
const logHeader = 5

func decodeLog(in []float32) []loggedStep {
	var out []loggedStep
	for len(in) >= logHeader {
		n := int(in[4])
		out = append(out, loggedStep{step: int64(in[0]) | int64(in[1])<<24, version: int64(in[2]) | int64(in[3])<<24,
			parts: decodeTags(in[logHeader : logHeader+n*tagLen])})
		in = in[logHeader+n*tagLen:]
	}
	return out
}

// pruneLog drops the steps the master has, but the last recentSteps.
func (w *Worker) pruneLog() {
	ar := w.ar
	i := 0
	for i < len(ar.log)-recentSteps && ar.log[i].step <= ar.reported {
		i++
	}
	ar.log = ar.log[i:]
}

// reportApplied reports the logged steps up to upTo that the master does
// not have yet (rank 0's duty; any member may, reports are idempotent).
func (w *Worker) reportApplied(ctx context.Context, upTo int64) {
	ar := w.ar
	req := &masterpb.ReportAppliedRequest{WorkerId: int32(w.cfg.WorkerID), Lineage: ar.lineage}
	if ar.ckptReport > 0 && ar.ckptReport <= upTo {
		req.Checkpoint = ar.ckptReport
	}
	last := ar.reported
	for _, st := range ar.log {
		if st.step <= ar.reported || st.step > upTo {
			continue
		}
		as := &masterpb.AppliedStep{Step: st.step, RingVersion: st.version}
		for _, c := range st.parts {
			as.Parts = append(as.Parts, &masterpb.Contribution{WorkerId: int32(c.worker), TaskId: c.task, Start: c.start, End: c.end})
		}
		req.Steps = append(req.Steps, as)
		last = st.step
	}
	ar.lastReport = time.Now()
	if len(req.Steps) == 0 && req.Checkpoint == 0 {
		return
	}
	if _, err := w.master.ReportApplied(ctx, req); err != nil {
		w.log.Warn("report applied steps", "err", err)
		if code := status.Code(err); req.Checkpoint > 0 && code != codes.Unavailable && code != codes.DeadlineExceeded {
			ar.ckptReport = 0 // refused (of a lost lineage): not a restore point
		}
		return
	}
	ar.reported = last
	if req.Checkpoint == ar.ckptReport {
		ar.ckptReport = 0
	}
}

// encodeState lays out the step count, the parameters and the optimizer
// slots as float32 bit patterns (Broadcast copies bytes: nothing is
// rounded). A member that is not the root only sizes the buffer.
func (w *Worker) encodeState(root bool) []float32 {
	ar := w.ar
	n := 2
	for _, p := range w.params {
		n += len(p.Value.Data) * (1 + len(ar.slotNames))
	}
	out := make([]float32, n)
	if !root {
		return out
	}
	out[0], out[1] = math.Float32frombits(uint32(ar.steps>>32)), math.Float32frombits(uint32(ar.steps))
	k := 2
	for _, p := range w.params {
		k += copy(out[k:], p.Value.Data)
		slots, _, ok := ar.opt.Slots(p.Name)
		for _, s := range ar.slotNames {
			if ok {
				copy(out[k:], slots[s])
			}
			k += len(p.Value.Data)
		}
	}
	return out
}

func (w *Worker) decodeState(in []float32) error {
	ar := w.ar
	steps := int64(math.Float32bits(in[0]))<<32 | int64(math.Float32bits(in[1]))
	k := 2
	if steps == 0 {
		// The initial model: no optimizer state (this member's may be of
		// a lost lineage).
		opt, err := optimizer.Parse(ar.optSpec)
		if err != nil {
			return err
		}
		ar.opt = opt
	}
	for _, p := range w.params {
		k += copy(p.Value.Data, in[k:k+len(p.Value.Data)])
		if steps == 0 {
			k += len(p.Value.Data) * len(ar.slotNames)
			continue
		}
		slots := map[string][]float32{}
		for _, s := range ar.slotNames {
			slots[s] = append([]float32(nil), in[k:k+len(p.Value.Data)]...)
			k += len(p.Value.Data)
		}
		if err := ar.opt.SetSlots(p.Name, slots, steps); err != nil {
			return fmt.Errorf("optimizer state of %s from the ring: %w", p.Name, err)
		}
	}
	ar.steps = steps
	return nil
}

// uploadModel hands the master this member's parameters at the end.
func (w *Worker) uploadModel(ctx context.Context) error {
	if w.ar.lineage == 0 || w.ar.steps == 0 { // lineage 0: never agreed a state in a ring
		return nil // never trained in a ring: nothing worth saving
	}
	// Every applied step is confirmed once the tasks are done (a task is
	// reported only then): the master gets what its ledger still lacks.
	w.reportApplied(ctx, w.ar.steps)
	req := &masterpb.UploadModelRequest{WorkerId: int32(w.cfg.WorkerID), Version: w.ar.steps}
	for _, p := range w.params {
		req.DenseParameters = append(req.DenseParameters, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
	}
	req.Checksum = wire.Checksum(req.DenseParameters)
	if _, err := w.master.UploadModel(ctx, req); err != nil {
		if code := status.Code(err); code == codes.FailedPrecondition || code == codes.NotFound {
			w.log.Info("model not taken", "err", err)
			return nil
		}
		return fmt.Errorf("upload model: %w", err)
	}
	w.log.Info("model uploaded", "steps", req.Version, "checksum", fmt.Sprintf("%016x", req.Checksum))
	return nil
}
