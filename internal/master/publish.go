package master

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"elasticdl/internal/autoscale"
	"elasticdl/internal/master/job"
	"elasticdl/internal/master/progress"
)

// ProgressStore is where a master publishes the job's progress for a
// cluster scheduler (autoscale.Progress, encoded), and where the next
// master of the job finds the last one: on Kubernetes, an annotation of
// the master's Job (k8s.ProgressStore), which outlives each master pod.
// A local job has none: no scheduler shares a machine among jobs.
type ProgressStore interface {
	Load(ctx context.Context) (value string, ok bool, err error)
	Save(ctx context.Context, value string) error
}

// progressPublisher measures the job's throughput by worker count and
// publishes its progress when progress.Due says so; the write is its own
// goroutine's, so that a slow API server never holds up the loop. A nil
// publisher does nothing.
type progressPublisher struct {
	store ProgressStore
	log   *slog.Logger
	meter *progress.Meter // the loop's only
	// interval is the least time between publishes; a size's
	// throughput counts once it held min(progress.Settle, interval).
	interval time.Duration

	mu      sync.Mutex
	last    *autoscale.Progress // published, or restored; nil: none
	tried   time.Time           // when the last publish was asked for
	pending *autoscale.Progress // asked for, not written yet

	kick       chan struct{}
	stop, done chan struct{} // the writer's; nil until start
}

// newProgressPublisher is nil without a store (nothing to publish to).
func newProgressPublisher(store ProgressStore, logger *slog.Logger, interval time.Duration) *progressPublisher {
	if store == nil {
		return nil
	}
	interval = cmp.Or(interval, progress.MinInterval)
	return &progressPublisher{store: store, log: logger, meter: &progress.Meter{SettleFor: min(progress.Settle, interval)},
		interval: interval, kick: make(chan struct{}, 1)}
}

// start reads back what a previous master of the job published, so that
// its measurements go on, and starts the writer. A value that cannot be
// read is logged and measured afresh: it is advice to a scheduler.
func (p *progressPublisher) start(ctx context.Context) {
	if p == nil || p.stop != nil {
		return
	}
	p.restore(ctx)
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go p.write()
}

func (p *progressPublisher) restore(ctx context.Context) {
	v, ok, err := p.store.Load(ctx)
	if err != nil {
		p.log.Warn("the job's published progress cannot be read: measuring afresh", "err", err)
		return
	}
	if !ok {
		return
	}
	prev, err := autoscale.DecodeProgress(v)
	if err != nil {
		p.log.Warn("the job's published progress is garbled: measuring afresh", "err", err)
		return
	}
	p.meter = progress.Restore(prev.Samples)
	p.meter.SettleFor = min(progress.Settle, p.interval)
	p.mu.Lock()
	p.last = &prev
	p.mu.Unlock()
	p.log.Info("progress restored", "sizes_measured", len(prev.Samples))
}

// observe measures v at now and asks the writer to publish the job's
// progress when it is due.
func (p *progressPublisher) observe(v job.View, now time.Time) {
	if p == nil || v.Over {
		return
	}
	p.meter.Observe(now, v.Records, v.WorkersRunning)
	cur := autoscale.Progress{Remaining: max(v.Progress.RecordsTotal-v.Progress.RecordsDone, 0),
		Min: v.MinWorkers, Max: v.MaxWorkers, Samples: p.meter.Samples()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !progress.Due(p.last, p.tried, cur, now, p.interval) {
		return
	}
	p.tried, p.pending = now, &cur
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// close stops the writer once it wrote what is pending.
func (p *progressPublisher) close() {
	if p == nil || p.stop == nil {
		return
	}
	select {
	case <-p.stop:
		return // closed already
	default:
	}
	close(p.stop)
	<-p.done
}

func (p *progressPublisher) write() {
	defer close(p.done)
	for {
		select {
		case <-p.kick:
			p.save()
		case <-p.stop:
			p.save()
			return
		}
	}
}

// save writes what is pending, if anything. A failure is logged (the
// next due publish tries again): the job goes on without.
func (p *progressPublisher) save() {
	p.mu.Lock()
	cur := p.pending
	p.pending = nil
	p.mu.Unlock()
	if cur == nil {
		return
	}
	v, err := autoscale.EncodeProgress(*cur)
	if err == nil {
		// Not the job's context: the last value is written at the end too.
		err = p.store.Save(context.Background(), v)
	}
	if err != nil {
		p.log.Warn("publishing the job's progress", "err", err)
		return
	}
	p.mu.Lock()
	p.last = cur
	p.mu.Unlock()
	p.log.Debug("progress published", "value", v)
}
