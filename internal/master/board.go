package master

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"time"

	"elasticdl/internal/dashboard"
	"elasticdl/internal/master/history"
	"elasticdl/internal/master/job"
)

// endGrace is how long streams get to send the job's end before the
// dashboard's server shuts down.
const endGrace = time.Second

// board serves the job's dashboard (package dashboard) on its listener and
// publishes to it once per tick, from Run's goroutine only, outside m.mu:
// what it sent last is its own.
type board struct {
	hub  *dashboard.Hub
	ln   net.Listener
	log  *slog.Logger
	stop context.CancelFunc
	done chan struct{} // closed when the server returned

	sent boardSent
}

// boardSent is what the last publish covered: the next delta carries what
// changed since.
type boardSent struct {
	any       bool
	lastEvent int64 // the seq of the newest event sent
	events    eventLog
	series    seriesEnc
	timeline  timelineMark
	docs      map[string]json.RawMessage
}

// timelineMark changes whenever the timeline may have: segments change
// with events (launched, running, exited, let-go) or Reconcile.
type timelineMark struct {
	lastEvent             int64
	segments, open, ended int
	recoveries, reshards  int
}

// newBoard is the dashboard to serve on ln (nil: none), once Run starts.
func newBoard(ln net.Listener, logger *slog.Logger) *board {
	if ln == nil {
		return nil
	}
	return &board{hub: dashboard.New(dashboard.Options{Logger: logger}), ln: ln, log: logger, done: make(chan struct{})}
}

// serve serves the dashboard until close.
func (b *board) serve() {
	ctx, stop := context.WithCancel(context.Background())
	b.stop = stop
	srv := &dashboard.Server{Hub: b.hub, Logger: b.log}
	go func() {
		defer close(b.done)
		if err := srv.Serve(ctx, b.ln); err != nil {
			// Observability never fails training: the job goes on.
			b.log.Warn("the dashboard stopped serving", "err", err)
		}
	}()
	// Said here, once the job is accepted, not by the supervisor that
	// bound the port: a refused job says one line.
	if at, ok := b.ln.Addr().(*net.TCPAddr); ok && at.IP.IsLoopback() {
		b.log.Info("dashboard", "url", "http://"+at.String()+"/")
	} else {
		b.log.Info("dashboard", "addr", b.ln.Addr().String())
	}
}

// close stops the server; ended: the job ended, so streams first get a
// moment to send it (and the page keeps the end).
func (b *board) close(ended bool) {
	if b == nil || b.stop == nil {
		return
	}
	if ended {
		deadline := time.Now().Add(endGrace)
		for b.hub.Streams() > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	b.stop()
	b.stop = nil
	<-b.done
}

// publishBoard publishes the job's documents built from v and the history;
// final, when set, is the job's summary at its end (the last publish).
func (m *Master) publishBoard(v job.View, final *Summary) {
	b := m.observe.board
	if b == nil {
		return
	}
	in := m.observe.history.boardInput(v, b.sent.lastEvent, b.sent.series.stride, len(b.sent.series.samples))
	docs, delta, err := b.build(m.boardHead(), v, in, m.now(), final)
	if err != nil {
		b.log.Warn("building the dashboard's documents", "err", err)
		return
	}
	u := dashboard.Update{Snapshot: joinDocs(docs), Docs: docs, Ended: final != nil,
		Lists: map[string]*dashboard.SeqList{"events": b.sent.events.list()}}
	if b.sent.any {
		u.Delta = delta
	}
	b.hub.Publish(u)
	b.sent.any = true
}

// boardHead is what the job document says of the job that never changes.
func (m *Master) boardHead() jobHead {
	mode := m.cfg.Mode
	if mode == "" {
		mode = ModeTrain
	}
	strategy := "ps-sync"
	switch {
	case m.cfg.allReduce():
		strategy = "allreduce"
	case m.cfg.UseAsync:
		strategy = "ps-async"
	}
	return jobHead{Job: m.cfg.JobName, Mode: mode, Model: m.spec.Name, Strategy: strategy}
}

// serveBoard starts the dashboard (Deps.Dashboard) with a first publish,
// so that the page shows the job from the start of Run.
func (m *Master) serveBoard() {
	if m.observe.board == nil {
		return
	}
	m.observe.board.serve()
	m.mu.Lock()
	v := m.job.View()
	m.mu.Unlock()
	m.publishBoard(v, nil)
}

// endBoard publishes the job's end and stops serving.
func (m *Master) endBoard(s *Summary) {
	if m.observe.board == nil {
		return
	}
	m.mu.Lock()
	v := m.job.View()
	m.mu.Unlock()
	m.publishBoard(v, s)
	m.observe.board.close(true)
}

// boardData is what the board reads of the history, copied under its lock.
type boardData struct {
	oldest   int64
	events   []history.Event // after the seq asked for
	stride   time.Duration
	from     int              // the index of samples[0] in the series
	samples  []history.Sample // those the board lacks: all of them when from is 0
	segments []history.Segment
	eta      *float64
}

// boardInput copies what the dashboard shows of the history and the board
// lacks: the events after since, the samples after the first n taken at
// stride.
func (k *historyKeeper) boardInput(v job.View, since int64, stride time.Duration, n int) boardData {
	k.mu.Lock()
	defer k.mu.Unlock()
	var d boardData
	d.oldest, d.events = k.h.Events(since, 0)
	d.stride, d.from, d.samples = k.h.SamplesSince(stride, n)
	d.segments = k.h.Segments()
	if eta, ok := k.h.ETA(v); ok {
		secs := eta.Seconds()
		d.eta = &secs
	}
	return d
}
