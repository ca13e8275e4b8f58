package master

import (
	"log/slog"
	"sync"
	"time"

	"elasticdl/internal/master/job"
	"elasticdl/internal/tfevents"
)

// TensorBoard tags (docs/metrics.md, TensorBoard). Every point's step is
// the model version: the highest one training reports have carried.
const (
	tagTrainLoss     = "train/loss"
	tagEvalAccuracy  = "eval/accuracy"
	tagEvalLoss      = "eval/loss"
	tagEvalAUC       = "eval/auc"
	tagRecordsPerSec = "job/records_per_second"
	tagWorkers       = "job/workers_running"
	tagPS            = "job/ps_running"
)

// Bounds of the TensorBoard writer: how often it writes (and flushes),
// how often the job's gauges are sampled, and how many points may wait
// for a writer stuck on its disk before new ones are dropped.
const (
	tbWriteInterval  = time.Second
	tbSampleInterval = 5 * time.Second
	tbMaxPending     = 1 << 16
)

// tensorboard writes the job's scalars to an event file
// (--tensorboard_log_dir). The shell adds points under its lock, which
// costs an append; a goroutine of its own does the I/O, so a slow disk
// never holds the core. A failed write is logged once and the job goes on.
type tensorboard struct {
	log  *slog.Logger
	w    *tfevents.Writer
	wake chan struct{} // cap 1: points are waiting
	quit chan struct{} // closed by close: write what waits and stop
	done chan struct{} // closed when the writer goroutine has stopped

	mu      sync.Mutex
	pending []tbPoint
	dropped int
	closed  bool

	// failed: a write failed (the writer goroutine only).
	failed bool
	// The gauges' last sample (the event loop's goroutine only).
	lastRecords int64
	lastAt      time.Time
}

type tbPoint struct {
	at     time.Time
	step   int64
	values []tfevents.Value
}

// startTensorboard opens a new event file in dir and starts its writer;
// nil (no TensorBoard) when dir is empty or the file cannot be created,
// which is logged: the job runs without it.
func startTensorboard(dir string, now time.Time, log *slog.Logger) *tensorboard {
	if dir == "" {
		return nil
	}
	w, err := tfevents.Create(dir, now)
	if err != nil {
		log.Error("--tensorboard_log_dir: the job runs without TensorBoard events", "err", err)
		return nil
	}
	log.Info("writing TensorBoard events", "file", w.Path())
	tb := newTensorboard(w, log)
	go tb.run()
	return tb
}

// newTensorboard is a tensorboard on w whose writer is not started.
func newTensorboard(w *tfevents.Writer, log *slog.Logger) *tensorboard {
	return &tensorboard{log: log, w: w, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// add queues one event of values at step. Safe on a nil tensorboard.
func (tb *tensorboard) add(at time.Time, step int64, values ...tfevents.Value) {
	if tb == nil {
		return
	}
	tb.mu.Lock()
	switch {
	case tb.closed:
	case len(tb.pending) >= tbMaxPending:
		tb.dropped++
	default:
		tb.pending = append(tb.pending, tbPoint{at: at, step: step, values: values})
	}
	tb.mu.Unlock()
	select {
	case tb.wake <- struct{}{}:
	default:
	}
}

// addReady queues the series the core just produced: training losses and
// completed evaluation passes.
func (tb *tensorboard) addReady(at time.Time, rd job.Ready) {
	if tb == nil {
		return
	}
	for _, l := range rd.Losses {
		tb.add(at, l.Version, tfevents.Value{Tag: tagTrainLoss, Value: l.Loss})
	}
	for _, r := range rd.Evaluated {
		vals := []tfevents.Value{{Tag: tagEvalAccuracy, Value: r.Accuracy}, {Tag: tagEvalLoss, Value: r.Loss}}
		if r.AUC != nil {
			vals = append(vals, tfevents.Value{Tag: tagEvalAUC, Value: *r.AUC})
		}
		tb.add(at, r.Version, vals...)
	}
}

// sample queues the job's gauges: training records per second since the
// previous sample, and the running workers and PS.
func (tb *tensorboard) sample(at time.Time, s job.Snapshot, training bool) {
	if tb == nil {
		return
	}
	vals := []tfevents.Value{{Tag: tagWorkers, Value: float64(s.WorkersRunning)}, {Tag: tagPS, Value: float64(s.PSRunning)}}
	records := s.Progress.RecordsDone
	if dt := at.Sub(tb.lastAt).Seconds(); training && !tb.lastAt.IsZero() && dt > 0 {
		vals = append(vals, tfevents.Value{Tag: tagRecordsPerSec, Value: float64(records-tb.lastRecords) / dt})
	}
	tb.lastRecords, tb.lastAt = records, at
	tb.add(at, s.ModelVersion, vals...)
}

// run writes what waits, at most every tbWriteInterval, until close.
func (tb *tensorboard) run() {
	defer close(tb.done)
	for {
		select {
		case <-tb.wake:
			tb.write()
		case <-tb.quit:
			tb.write()
			if err := tb.w.Close(); err != nil {
				tb.log.Warn("TensorBoard event file", "err", err)
			}
			return
		}
		select {
		case <-time.After(tbWriteInterval):
		case <-tb.quit: // the next turn writes the rest
		}
	}
}

// write writes and flushes the waiting points.
func (tb *tensorboard) write() {
	tb.mu.Lock()
	points, dropped := tb.pending, tb.dropped
	tb.pending, tb.dropped = nil, 0
	tb.mu.Unlock()
	if dropped > 0 {
		tb.log.Warn("TensorBoard event file: the writer fell behind, points dropped", "points", dropped)
	}
	for _, p := range points {
		tb.w.WriteScalars(p.at, p.step, p.values...)
	}
	if err := tb.w.Flush(); err != nil && !tb.failed {
		tb.failed = true
		tb.log.Warn("TensorBoard event file: a write failed; the job goes on, later writes are retried and not logged", "file", tb.w.Path(), "err", err)
	}
}

// close writes what waits and closes the file. Safe on a nil tensorboard.
func (tb *tensorboard) close() {
	if tb == nil {
		return
	}
	tb.mu.Lock()
	already := tb.closed
	tb.closed = true
	tb.mu.Unlock()
	if !already {
		close(tb.quit)
	}
	<-tb.done
}
