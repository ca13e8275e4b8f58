package master

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"elasticdl/internal/master/job"
)

// StateStore keeps the job's persisted state where the master that takes
// over after a crash finds it (statestore.File locally; a fenced API
// object on Kubernetes). Save must be durable when it returns nil, and
// must fail once another master has taken the store over (fencing).
type StateStore interface {
	Load(ctx context.Context) (data []byte, ok bool, err error)
	Save(ctx context.Context, data []byte) error
}

// persistedState is what the store holds: the core's State, tagged with
// the run it belongs to so that a new job in the same place never resumes
// an old one.
type persistedState struct {
	Format  int       `json:"format"`
	RunID   string    `json:"run_id"`
	Job     string    `json:"job"`
	SavedAt time.Time `json:"saved_at"`
	State   job.State `json:"state"`
}

const stateFormat = 1

// lazyPersistEvery bounds how often state that nothing waits on (heartbeats,
// clock ticks) is written.
const lazyPersistEvery = time.Second

// commitDelay is how long a write that something waits for holds off for
// more changes to join it. A worker reports a task and asks for its next
// one at once (it pipelines them), and each write costs an fdatasync
// locally: without the delay the second call's write followed the
// first's (1.45 writes a task with 2 mlp workers, 2 with one); with it
// they share one (1.0), and that job used 4% less CPU on 2 cores. (Go's
// timers wake no sooner than about 1 ms anyway.)
const commitDelay = time.Millisecond

// loadState returns the persisted state of run runID, or nil when the store
// has none of this run (a fresh start).
func loadState(ctx context.Context, store StateStore, runID, jobName string) (*job.State, error) {
	data, ok, err := store.Load(ctx)
	if err != nil || !ok {
		return nil, err
	}
	var ps persistedState
	if err := json.Unmarshal(data, &ps); err != nil {
		return nil, fmt.Errorf("persisted job state: %w", err)
	}
	if ps.Format != stateFormat {
		return nil, fmt.Errorf("persisted job state: format %d, this master reads %d", ps.Format, stateFormat)
	}
	if ps.RunID != runID {
		return nil, nil // another run's: this one starts afresh and overwrites it
	}
	if ps.Job != jobName {
		return nil, fmt.Errorf("persisted job state of run %s is job %q's, not %q", runID, ps.Job, jobName)
	}
	return &ps.State, nil
}

// persister writes the core's state after the steps that changed it, in
// group commits: every step that must be durable before it is answered or
// carried out waits (wait) for a write that began after it; one write
// covers all the steps before it.
type persister struct {
	store StateStore
	// snapshot encodes the state as of now and returns the sequence number
	// of the last step it covers (called without p.mu).
	snapshot func() (data []byte, seq uint64, err error)

	// delay is commitDelay; tests set their own.
	delay time.Duration

	mu       sync.Mutex
	cond     *sync.Cond
	urgent   uint64    // highest step sequence that someone waits for
	urgentAt time.Time // when the first urgent change not yet durable came
	dirty    uint64    // highest step sequence so far
	done     uint64    // highest step sequence durable
	err      error     // the store failed: the master must stop acting
	closed   bool
	lastAt   time.Time
	wake     chan struct{} // capacity 1: something changed for run
	stopped  chan struct{}
}

func newPersister(store StateStore, snapshot func() ([]byte, uint64, error)) *persister {
	p := &persister{store: store, snapshot: snapshot, delay: commitDelay, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *persister) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// changed notes that step seq changed the state; urgent when something will
// wait for it.
func (p *persister) changed(seq uint64, urgent bool) {
	p.mu.Lock()
	p.dirty = max(p.dirty, seq)
	if urgent {
		if p.urgent <= p.done {
			p.urgentAt = time.Now()
		}
		p.urgent = max(p.urgent, seq)
	}
	p.mu.Unlock()
	p.signal()
}

// wait returns once step seq is durable, or the store's error.
func (p *persister) wait(seq uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.done < seq && p.err == nil && !p.closed {
		p.cond.Wait()
	}
	if p.err != nil {
		return p.err
	}
	if p.done < seq {
		// The master is going; the next one answers.
		return fmt.Errorf("%w: the master is handing the job over", ErrStateLost)
	}
	return nil
}

// run writes until close; it returns the store's error, after which
// nothing more is written.
func (p *persister) run(ctx context.Context) error {
	defer close(p.stopped)
	var lazy <-chan time.Time // armed while a change waits for its lazy write
	for {
		p.mu.Lock()
		urgent, dirty, closed := p.urgent > p.done, p.dirty > p.done, p.closed
		due := time.Until(p.lastAt.Add(lazyPersistEvery))
		hold := time.Until(p.urgentAt.Add(p.delay))
		p.mu.Unlock()
		switch {
		case urgent || dirty && (closed || due <= 0):
			if urgent && !closed && hold > 0 {
				// Let the changes that come with this one join its write.
				time.Sleep(hold)
			}
			err := p.writeOnce(ctx)
			if err != nil {
				p.mu.Lock()
				p.err = err
				p.mu.Unlock()
			}
			p.cond.Broadcast()
			if err != nil {
				return err
			}
			continue
		case closed:
			return nil
		case dirty && lazy == nil:
			lazy = time.After(due)
		}
		select {
		case <-p.wake:
		case <-lazy:
			lazy = nil
		}
	}
}

func (p *persister) writeOnce(ctx context.Context) error {
	data, seq, err := p.snapshot()
	if err != nil {
		return fmt.Errorf("%w: encode: %w", ErrStateLost, err)
	}
	if err := p.store.Save(ctx, data); err != nil {
		return fmt.Errorf("%w: %w", ErrStateLost, err)
	}
	p.mu.Lock()
	p.done = max(p.done, seq)
	p.lastAt = time.Now()
	p.mu.Unlock()
	return nil
}

// failed is the store's error, if it failed.
func (p *persister) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// close writes what is left and stops run.
func (p *persister) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.signal()
	p.cond.Broadcast()
	<-p.stopped
}
