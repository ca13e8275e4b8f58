package master

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
)

// loop turns backend events and clock ticks into the core's events until
// the core says the workers are done, or ctx ends. It returns the
// persister's error (from persisted; nil channel: none) when the state can
// no longer be persisted, and ErrHandedOver when ctx ends a master that
// hands over.
func (m *Master) loop(ctx context.Context, persisted <-chan error) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var progressC <-chan time.Time
	if m.cfg.ProgressInterval > 0 {
		pt := time.NewTicker(m.cfg.ProgressInterval)
		defer pt.Stop()
		progressC = pt.C
	}
	var tbC <-chan time.Time
	if m.output.tb != nil {
		tt := time.NewTicker(tbSampleInterval)
		defer tt.Stop()
		tbC = tt.C
	}
	for {
		select {
		case ev, ok := <-m.backend.Events():
			if !ok {
				m.step(ctx, job.Fail{Err: errors.New("cluster backend closed its event stream")})
				return nil
			}
			m.handleEvents(ctx, ev)
		case err := <-persisted:
			m.log.Error("stopping: the job's state cannot be persisted", "err", err)
			return err
		case <-tick.C:
			m.tick(ctx)
		case t := <-m.control.targets:
			if t.PS > 0 {
				m.step(ctx, job.SetPSTarget{PS: t.PS, Source: t.Source})
			} else {
				m.step(ctx, job.SetTarget{Workers: t.Workers, Source: t.Source})
			}
		case <-progressC:
			m.logProgress()
		case <-tbC:
			m.sampleTensorBoard()
		case <-m.ended:
			if m.jobErr() == nil {
				m.logProgress()
			}
			return nil
		case <-ctx.Done():
			if m.failover.handOver {
				return ErrHandedOver
			}
			m.step(ctx, job.Fail{Err: fmt.Errorf("job stopped: %w", context.Cause(ctx))})
			return nil
		}
	}
}

// sampleTensorBoard queues the job's gauges for TensorBoard, if on.
func (m *Master) sampleTensorBoard() {
	if m.output.tb == nil {
		return
	}
	m.mu.Lock()
	s := m.job.Snapshot()
	m.mu.Unlock()
	m.output.tb.sample(m.now(), s, m.cfg.training())
}

func (m *Master) handleEvent(ctx context.Context, ev cluster.Event) {
	m.step(ctx, job.Instance{Event: ev})
}

// handleEvents steps ev and every backend event already queued behind it
// (up to a bound), together.
func (m *Master) handleEvents(ctx context.Context, ev cluster.Event) {
	evs := []job.Event{job.Instance{Event: ev}}
	for len(evs) < 256 {
		select {
		case more, ok := <-m.backend.Events():
			if !ok {
				m.steps(ctx, evs)
				m.step(ctx, job.Fail{Err: errors.New("cluster backend closed its event stream")})
				return
			}
			evs = append(evs, job.Instance{Event: more})
			continue
		default:
		}
		break
	}
	m.steps(ctx, evs)
}

func (m *Master) tick(ctx context.Context) {
	m.step(ctx, job.Tick{})
	v := m.sampleHistory()
	m.control.progress.observe(v, m.now())
	m.publishBoard(v, nil)
}

func (m *Master) jobErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.job.Err()
}

// awaitWorkersExit gives running workers, told DONE by their next request,
// a moment to exit on their own before the backend stops whatever remains
// (pending pods never ran: nothing to wait for).
func (m *Master) awaitWorkersExit(limit time.Duration) {
	timeout := time.After(limit)
	for {
		m.mu.Lock()
		n := m.job.RunningWorkers()
		m.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case ev, ok := <-m.backend.Events():
			if !ok {
				return
			}
			m.handleEvent(context.Background(), ev)
		case <-timeout:
			return
		}
	}
}

// drainEvents consumes what the backend reports while it stops everything.
func (m *Master) drainEvents() {
	for ev := range m.backend.Events() {
		if ev.Phase == cluster.Exited {
			m.log.Debug("instance ended", "instance", cluster.InstanceName(ev.Role, ev.ID), "reason", ev.Reason)
		}
	}
}

// logProgress logs one progress line: the newest epoch and its records,
// the records of every epoch (epochs overlap: a fast job hands out the
// next epoch's tasks while the last ones of the previous run), rate, loss,
// and the instances that run out of those the job wants.
func (m *Master) logProgress() {
	m.mu.Lock()
	s := m.job.Snapshot()
	rate, loss := m.job.Rate(m.now())
	m.mu.Unlock()
	workers := fmt.Sprintf("%d/%d", s.WorkersRunning, m.cfg.NumWorkers)
	ps := fmt.Sprintf("%d/%d", s.PSRunning, m.cfg.NumPS)
	pr := s.Progress
	if !m.cfg.training() {
		m.log.Info("progress", "tasks_done", pr.TasksDone, "tasks_todo", pr.TasksTodo, "tasks_doing", pr.TasksDoing, "workers", workers, "ps", ps)
		return
	}
	m.log.Info("progress",
		"epoch", fmt.Sprintf("%d/%d", pr.Epoch, pr.NumEpochs),
		"records", fmt.Sprintf("%d/%d", pr.EpochRecordsDone, pr.EpochRecordsTotal),
		"records_done", pr.RecordsDone,
		"records_per_s", math.Round(rate),
		"loss", fmt.Sprintf("%.4f", loss),
		"workers", workers,
		"ps", ps)
}
