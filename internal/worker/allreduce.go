package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/data"
	"elasticdl/internal/collective"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/nn"
	"elasticdl/proto/masterpb"
)

// AllReduce training. Workers average their gradients in a ring whose
// membership the master keeps (its rendezvous); every member takes part in
// every step, with its minibatch or, idle, with none, so the ring moves in
// lockstep. A step's gradients are the sum of each member's (minibatch mean
// gradient × its records) divided by the step's total records, applied by
// every member with the same optimizer: the members stay bit-identical.
//
// A step is confirmed once the next step's allreduce succeeds in the same
// ring (every member then finished the previous one); a task whose
// records are all confirmed is reported. When a ring breaks, the members
// of the next ring first agree on a state: the member with the most steps
// broadcasts its parameters, optimizer state and step count, and each
// member keeps the records of the steps that state includes and redoes the
// others. A new member gets the same broadcast before its first step.
//
// Every step also gathers each member's part (worker, task, records) — its
// tag — so the members know whose records their steps hold; they keep a
// log of the steps' tags, which rank 0 reports to the master (the job's
// ledger of applied records, from which a task's next holder resumes) and
// which the members prune once reported, keeping the last recentSteps. The
// agreed state carries the log: a member keeps its own records in it and
// redoes its others (unless the master's ledger has them), and the new
// ring's rank 0 reports the log — the records of the workers no longer in
// it included — then tells the master the ring settled, so that their
// tasks can go back.
//
// A planned change (a worker joins, one is let go) breaks no step: a
// member that learns of it sets the leave flag in its next step's buffer,
// and every member, seeing the flag in that step's sum, leaves the ring
// after applying it — the same step for all. The new ring agrees on the
// state as after a break (nothing differs: every member applied the
// step); a member let go is told so when it checks in, and stops.

const (
	// ringTimeout bounds every collective wait: a dead or frozen peer
	// becomes an error within it. It must exceed the members' skew between
	// steps (an evaluation task runs between two steps).
	ringTimeout = 10 * time.Second
	// ringPollInterval is how often the ring version is checked in the
	// background, so that a member leaves a superseded ring promptly.
	ringPollInterval = 100 * time.Millisecond
	// recentSteps is how many of its last steps' tags a state keeps even
	// once reported: members of one ring differ by at most one confirmed
	// step.
	recentSteps = 3
	// reportInterval is how often rank 0 reports the confirmed steps.
	reportInterval = 200 * time.Millisecond
	// tagLen is one member's tag in a step's buffer: worker+1 (0: none),
	// the task ID in two 24-bit halves, and the records [start,end) — all
	// integers a float32 holds exactly, each written by one member only.
	tagLen = 5
	// stepHeader is what a step's buffer holds between the gradients and
	// the tags: the records, the busy flag, (written by rank 0) the last
	// step the master has, in two 24-bit halves, and the leave flag: the
	// members that know of a planned change, which all leave the ring
	// after this step.
	stepHeader = 5
)

// ringCounters are the rings a worker was in, for the heartbeat (another
// goroutine): the live ring, and the counters of the closed ones.
type ringCounters struct {
	// live is also the poller's: a member blocked in a collective of a
	// superseded ring (waiting on a frozen peer) is freed at once.
	live               atomic.Pointer[collective.Ring]
	ops, bytes, busyNs atomic.Int64
	// forming is the ring being formed, if any: the poller cancels it too.
	forming atomic.Pointer[formingRing]
	// newest is the newest ring version the poller saw.
	newest atomic.Int64
}

type formingRing struct {
	version int64
	cancel  context.CancelCauseFunc
}

// enter makes r the live ring, adding the last one's counters to the
// closed rings'.
func (c *ringCounters) enter(r *collective.Ring) {
	if old := c.live.Swap(r); old != nil {
		s := old.Stats()
		c.ops.Add(s.Ops)
		c.bytes.Add(s.BytesSent)
		c.busyNs.Add(int64(s.Busy))
	}
}

// stats are the counters of every ring so far, the live one included.
func (c *ringCounters) stats() (ops, bytes int64, busy time.Duration) {
	ops, bytes, busy = c.ops.Load(), c.bytes.Load(), time.Duration(c.busyNs.Load())
	if r := c.live.Load(); r != nil {
		s := r.Stats()
		ops, bytes, busy = ops+s.Ops, bytes+s.BytesSent, busy+s.Busy
	}
	return ops, bytes, busy
}

// contrib is one member's part of a step.
type contrib struct {
	worker     int
	task       int64
	start, end int64
}

// loggedStep is an applied step's parts and the version of the ring that
// applied it.
type loggedStep struct {
	step, version int64
	parts         []contrib
}

// ringTask is a training task being worked on in steps.
type ringTask struct {
	t     *masterpb.Task
	batch *data.Batch
	// next is the next record (in the task's shuffled order) to train;
	// confirmed those trained in confirmed steps. Both count from the
	// task's start (t.Done included).
	next, confirmed int64
	report          *masterpb.ReportTaskResultRequest
}

func (rt *ringTask) total() int64 { return int64(rt.batch.N) }

// ringMember is a worker's AllReduce state.
type ringMember struct {
	ln        *collective.Listener
	ring      *collective.Ring
	opt       optimizer.Optimizer
	slotNames []string
	steps     int64 // optimizer steps applied to the parameters
	buf       []float32
	book      stepBook      // this member's tasks and unconfirmed records
	latest    ringNews      // newest ring version the master announced
	versionCh chan ringNews // from the background poller
	// leaveFlag: a planned change waits; this member flags it in its next
	// step.
	leaveFlag bool
	// log holds the tags of the applied steps not yet reported to the
	// master, and of the last recentSteps, oldest first: part of the state,
	// so that a new ring knows whose records its state holds.
	log []loggedStep
	// reported is the last step rank 0 reported (every member learns it
	// from the step buffer); lastReport when rank 0 last reported.
	reported   int64
	lastReport time.Time
	// nGrads is where the step buffer's header (stepHeader) and tags start.
	nGrads int
	// meter is this member's compute rate; rates the members' as the last
	// step's buffer had them, by rank (balance.go).
	meter     rateMeter
	rates     []float32
	balancing balance
	// mean: the buffer holds the step's mean gradient already (a ring of
	// one, one chunk), not a sum weighted by records.
	mean bool
	// masterDone is what the master's ledger had of this worker's tasks
	// when it last joined a ring.
	masterDone map[int64]int64
	// optSpec builds a fresh optimizer (a restore to the initial model).
	optSpec string
	// lineage is the lineage of this member's state (0 until it agreed one
	// in a ring); ringLineage and the restore point are the current ring's
	// (see ringckpt.go).
	lineage, ringLineage int64
	restoreDir           string
	restoreVersion       int64
	// Checkpoints: the last step one was started for, whether a write is
	// in flight (its result comes on ckptDone), and a written one not yet
	// reported to the master.
	ckptStarted int64
	ckptWriting bool
	ckptDone    chan ckptResult
	ckptReport  int64
}

// runAllReduce is Run for an AllReduce worker.
func (w *Worker) runAllReduce(ctx context.Context) error {
	spec := w.cfg.Optimizer
	if spec == "" {
		spec = w.spec.Optimizer
	}
	opt, err := optimizer.Parse(spec)
	if err != nil {
		return fmt.Errorf("--optimizer %q: %w", spec, err)
	}
	rowOpt, err := optimizer.AsRowOptimizer(opt)
	if err != nil {
		return err
	}
	ln, err := collective.ListenTLS(w.cfg.CollectiveAddr, w.log, w.cfg.Creds)
	if err != nil {
		return fmt.Errorf("--collective_addr: %w", err)
	}
	defer ln.Close()
	w.log.Info("listening for ring peers", "addr", ln.Addr())
	n := 0
	for _, p := range w.params {
		n += len(p.Value.Data)
	}
	w.ar = &ringMember{ln: ln, opt: opt, optSpec: spec, slotNames: rowOpt.SlotNames(), nGrads: n,
		versionCh: make(chan ringNews, 1), ckptDone: make(chan ckptResult, 1)}
	defer func() {
		if w.ar.ring != nil {
			w.ar.ring.Close()
		}
	}()
	go w.pollRing(ctx)
	err = w.ringLoop(ctx)
	if errors.Is(err, errLetGo) {
		w.log.Info("let go by the master (scale down): left the ring at a step boundary")
		return nil
	}
	if err == nil || errors.Is(context.Cause(ctx), errJobOver) {
		// The tasks are done: hand the master the model (it lives here).
		upCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return w.uploadModel(upCtx)
	}
	return err
}

// ringNews is the ring's version as the master announced it, and whether
// a newer one than this member's is a planned change.
type ringNews struct {
	version int64
	planned bool
}

// errLetGo ends the ring loop of a member the master let go.
var errLetGo = errors.New("let go by the master")

// pollRing learns the ring's version in the background. An unplanned
// change closes the live ring at once (a member blocked on a dead or
// frozen peer is freed); a planned one leaves it to the step boundary.
func (w *Worker) pollRing(ctx context.Context) {
	t := time.NewTicker(ringPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		resp, err := w.master.RingStatus(ctx, &masterpb.RingStatusRequest{WorkerId: int32(w.cfg.WorkerID)})
		if err != nil {
			continue
		}
		if r := w.rings.live.Load(); r != nil && resp.Version > r.Version() && !resp.Planned {
			r.Close() // the step in flight fails; the member re-joins
		}
		// A ring still forming is given up even for a planned change: its
		// members cannot be stepping yet, and one that went on to the new
		// version (a newcomer that never saw this one) would never connect.
		w.rings.newest.Store(max(w.rings.newest.Load(), resp.Version))
		if f := w.rings.forming.Load(); f != nil && resp.Version > f.version {
			f.cancel(fmt.Errorf("ring version %d superseded by %d", f.version, resp.Version))
		}
		select {
		case <-w.ar.versionCh:
		default:
		}
		w.ar.versionCh <- ringNews{version: resp.Version, planned: resp.Planned}
	}
}

// ringLoop runs steps until the master says the job is done (nil).
func (w *Worker) ringLoop(ctx context.Context) error {
	ar := w.ar
	for {
		select {
		case v := <-ar.versionCh:
			if v.version >= ar.latest.version {
				ar.latest = v
			}
		default:
		}
		if ar.ring != nil && ar.latest.version > ar.ring.Version() {
			if ar.latest.planned {
				ar.leaveFlag = true // every member leaves after the next step
			} else {
				// The ring re-forms (a member was lost or its ring broke):
				// leave at this step boundary.
				w.leaveRing()
			}
		}
		if ar.ring == nil {
			over, err := w.joinRing(ctx)
			if over || err != nil {
				return err
			}
		}
		rt, over, err := w.nextRecords(ctx)
		if over || err != nil {
			return err
		}
		boundary, err := w.ringStep(ctx, rt)
		if err != nil {
			var fatal *fatalError
			if errors.As(err, &fatal) || ctx.Err() != nil {
				return err
			}
			w.ringBroken(ctx, err)
			continue
		}
		if boundary {
			w.log.Info("leaving the ring at a step boundary for a planned change", "version", ar.ring.Version(), "steps", ar.steps)
			w.leaveRing()
		}
	}
}

// leaveRing closes the live ring at a step boundary; the next step joins
// the next one.
func (w *Worker) leaveRing() {
	w.ar.ring.Close()
	w.ar.ring = nil
	w.ar.leaveFlag = false
}

// nextRecords returns the task to take this step's minibatch from, nil to
// take part idle; it fetches tasks from the master as needed and runs
// evaluation and prediction tasks (between steps) on the local model.
func (w *Worker) nextRecords(ctx context.Context) (*ringTask, bool, error) {
	ar := w.ar
	if rt := ar.book.pending(); rt != nil {
		return rt, false, nil
	}
	if ar.book.busy() {
		return nil, false, nil // enough work waits for its last step to be confirmed
	}
	resp, err := w.getTask(ctx)
	if err != nil {
		return nil, false, err
	}
	switch resp.Action {
	case masterpb.GetTaskResponse_DONE:
		return nil, true, nil
	case masterpb.GetTaskResponse_WAIT:
		return nil, false, nil
	case masterpb.GetTaskResponse_TASK:
	default:
		return nil, false, fmt.Errorf("master sent unknown action %v", resp.Action)
	}
	t := resp.Task
	if t.Type != masterpb.TaskType_TRAINING {
		return nil, false, w.runTask(ctx, t)
	}
	report := &masterpb.ReportTaskResultRequest{WorkerId: int32(w.cfg.WorkerID), TaskId: t.Id}
	b, err := w.read(t, report)
	if err == nil && int64(b.N) < t.Done {
		err = fmt.Errorf("task %d: %d records done by earlier holders, only %d readable", t.Id, t.Done, b.N)
	}
	if err != nil {
		report.Error = err.Error()
		if _, rerr := w.master.ReportTaskResult(ctx, report); rerr != nil {
			return nil, false, fmt.Errorf("report task %d: %w", t.Id, rerr)
		}
		return nil, false, nil
	}
	shuffle(b, t.Id, t.Epoch, nil) // the batch lives as long as its task in the book
	rt := &ringTask{t: t, batch: b, next: t.Done, confirmed: t.Done, report: report}
	w.current.Store(t.Id)
	ar.book.add(rt)
	return rt, false, nil
}

// ringStep runs one step: this member's minibatch from rt (none when rt is
// nil), the ring's allreduce, the update, and the confirmation of the
// previous step. boundary: a member flagged a planned change, so every
// member leaves the ring after this step.
func (w *Worker) ringStep(ctx context.Context, rt *ringTask) (boundary bool, err error) {
	ar := w.ar
	clear(ar.buf[ar.nGrads:]) // gradients writes the rest
	if rt == nil {
		clear(ar.buf[:ar.nGrads])
	}
	if ar.leaveFlag {
		ar.buf[ar.nGrads+4] = 1
	}
	if ar.ring.Rank() == 0 {
		// Tell every member what the master has: they prune their logs.
		ar.buf[ar.nGrads+2], ar.buf[ar.nGrads+3] = float32(ar.reported&0xFFFFFF), float32(ar.reported>>24)
	}
	if rt != nil {
		start, end := ar.book.take(rt, w.share(), ar.steps+1)
		began := time.Now()
		var loss float32
		var err error
		if w.cfg.ModelledSecondsPerRecord > 0 {
			loss, err = w.modelledGradients(ctx, rt, start, end)
		} else {
			loss, err = w.gradients(rt, start, end)
		}
		if err != nil {
			return false, err
		}
		ar.meter.observe(end-start, time.Since(began))
		ar.buf[ar.ratesAt()+ar.ring.Rank()] = float32(ar.meter.rate)
		ar.book.setLoss(float64(loss) * float64(end-start))
	}
	if err := ar.ring.AllReduce(ctx, ar.buf); err != nil {
		return false, err
	}
	w.noteRates()
	w.maybeCheckpoint() // the state is confirmed and not yet updated
	n := ar.nGrads
	total, busy := ar.buf[n], ar.buf[n+1]
	boundary = ar.buf[n+4] > 0
	ar.reported = max(ar.reported, int64(ar.buf[n+2])|int64(ar.buf[n+3])<<24)
	if total > 0 {
		if err := w.applyGradients(total); err != nil {
			return false, &fatalError{err}
		}
		ar.log = append(ar.log, loggedStep{step: ar.steps, version: ar.ring.Version(), parts: decodeTags(ar.buf[n+stepHeader : ar.ratesAt()])})
	}
	w.pruneLog()
	// Every member finished the previous step: it is confirmed (this one
	// is once the next succeeds).
	previous := ar.steps
	if total > 0 {
		previous--
	}
	if err := w.confirm(ctx, previous); err != nil {
		return false, err
	}
	w.collectCheckpoint()
	if (ar.ring.Rank() == 0 && time.Since(ar.lastReport) >= reportInterval) || (ar.ckptReport > 0 && ar.ckptReport <= previous) {
		w.reportApplied(ctx, previous)
	}
	if busy == 0 && !boundary {
		// No member had records: wait a little before asking for work.
		select {
		case <-ctx.Done():
			return false, context.Cause(ctx)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return boundary, nil
}

// share is this member's records in a step of the current ring: equal,
// or by the members' rates when one is slow (balancedShare).
func (w *Worker) share() int64 {
	return balancedShare(w.cfg.GlobalBatch, w.cfg.MinibatchSize, w.ar.ring.Rank(), w.ar.ring.Size(), w.ar.rates, w.ar.balancing.on)
}

// stepShare is the records rank takes in a step of a ring of size members.
// With a global batch the members split it (the remainder to the lowest
// ranks), so that the optimizer sees the same batch — and the learning
// rate means the same — whatever the ring's size; without one (global 0),
// each takes a minibatch. Every member takes at least one record.
func stepShare(global, minibatch, rank, size int) int64 {
	if global <= 0 {
		return int64(minibatch)
	}
	n := global / size
	if rank < global%size {
		n++
	}
	return int64(max(n, 1))
}

// gradients computes the gradient of records [start,end) of rt into the
// step's buffer, scaled by the records (members are weighted by records),
// in chunks of at most a minibatch: a member's share of a global batch
// can exceed what one pass should hold when the ring is small.
func (w *Worker) gradients(rt *ringTask, start, end int64) (float32, error) {
	ar, b := w.ar, rt.batch
	per := w.spec.InputSize()
	var lossSum float64
	// Alone in the ring with one chunk, the minibatch's mean gradient is
	// the step's: no scaling there and back.
	ar.mean = ar.ring.Size() == 1 && end-start <= int64(w.cfg.MinibatchSize)
	for lo := start; lo < end; lo += int64(w.cfg.MinibatchSize) {
		hi := min(lo+int64(w.cfg.MinibatchSize), end)
		x := &nn.Tensor{Shape: w.spec.BatchShape(int(hi - lo)), Data: b.Features[int(lo)*per : int(hi)*per]}
		w.net.ZeroGrads()
		loss, dlogits, err := trainingLoss(w.net.Forward(x, true), b.Labels[lo:hi], rt.t)
		if err != nil {
			return 0, err
		}
		w.net.Backward(dlogits)
		k, scale := 0, float32(hi-lo)
		for _, p := range w.params {
			g := ar.buf[k : k+len(p.Grad.Data)]
			switch {
			case ar.mean:
				copy(g, p.Grad.Data)
			case lo == start: // the first chunk: the buffer holds the last step's
				for i, v := range p.Grad.Data {
					g[i] = v * scale
				}
			default:
				for i, v := range p.Grad.Data {
					g[i] += v * scale
				}
			}
			k += len(p.Grad.Data)
		}
		lossSum += float64(loss) * float64(hi-lo)
	}
	w.tagStep(rt, start, end)
	return float32(lossSum / float64(end-start)), nil
}

// tagStep writes this member's records [start,end) of rt into the step's
// header: how many, and which (its tag).
func (w *Worker) tagStep(rt *ringTask, start, end int64) {
	ar, k := w.ar, w.ar.nGrads
	ar.buf[k], ar.buf[k+1] = float32(end-start), 1
	putTag(ar.buf[k+stepHeader+ar.ring.Rank()*tagLen:], contrib{worker: w.cfg.WorkerID, task: rt.t.Id, start: start, end: end})
}

// modelledGradients is gradients under modelled compute: it spends the
// time records [start,end) take on this worker's CPUs and contributes
// zero gradients, so the ring still sums a full buffer each step (the
// collective's cost is real) and the ledger counts the records, but the
// model does not change.
func (w *Worker) modelledGradients(ctx context.Context, rt *ringTask, start, end int64) (float32, error) {
	d := time.Duration(float64(end-start) * w.cfg.ModelledSecondsPerRecord / w.cfg.ModelledCPUs * float64(time.Second))
	select {
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	case <-time.After(d):
	}
	w.ar.mean = false
	clear(w.ar.buf[:w.ar.nGrads])
	w.tagStep(rt, start, end)
	return 0, nil
}

// applyGradients divides the summed gradients by the step's records and
// applies them, the same on every member.
func (w *Worker) applyGradients(total float32) error {
	ar, k := w.ar, 0
	inv := 1 / total
	for _, p := range w.params {
		g := ar.buf[k : k+len(p.Value.Data)]
		if !ar.mean {
			for i := range g {
				g[i] *= inv
			}
		}
		if err := ar.opt.Apply(p.Name, p.Value.Data, g, 1); err != nil {
			return fmt.Errorf("apply gradients of %s: %w", p.Name, err)
		}
		k += len(g)
	}
	ar.steps++
	return nil
}

// confirm counts this member's records of every step up to step upTo as
// trained, and reports the tasks whose records are all confirmed. (The
// master learns the confirmed records themselves from rank 0's reports of
// the applied steps: its ledger is what a task's next holder resumes from.)
func (w *Worker) confirm(ctx context.Context, upTo int64) error {
	ar := w.ar
	for _, rt := range ar.book.confirm(upTo) {
		rt.report.ModelVersion = ar.steps
		_, err := w.master.ReportTaskResult(ctx, rt.report)
		switch status.Code(err) {
		case codes.OK:
		case codes.FailedPrecondition:
			// The master took the task back (a timeout): someone else
			// resumes it after what the ledger has.
			w.log.Warn("task taken back by the master", "task", rt.t.Id, "err", err)
		default:
			return &fatalError{fmt.Errorf("task %d: %w", rt.t.Id, err)}
		}
	}
	if ar.book.empty() {
		w.current.Store(0)
	}
	return nil
}

// ringBroken tells the master the ring failed and drops it; the next step
// re-joins.
func (w *Worker) ringBroken(ctx context.Context, cause error) {
	ar := w.ar
	v := ar.ring.Version()
	w.log.Warn("ring broken", "version", v, "err", cause)
	ar.ring.Close()
	ar.ring = nil
	if _, err := w.master.ReportRingBroken(ctx, &masterpb.ReportRingBrokenRequest{WorkerId: int32(w.cfg.WorkerID), Version: v, Error: cause.Error()}); err != nil {
		w.log.Debug("report ring broken", "err", err)
	}
}
