package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"elasticdl/internal/atomicfile"
	"elasticdl/internal/master/history"
	"elasticdl/internal/master/job"
)

// HistoryStore keeps the dashboard's history (package history) where the
// next master finds it: HistoryFile locally, a ConfigMap of the job on
// Kubernetes (k8s.HistoryStore). Unlike the StateStore it is
// not fenced and is written lazily: a crash loses at most
// historySaveEvery of history, which the page shows as a gap.
type HistoryStore interface {
	Load(ctx context.Context) (data []byte, ok bool, err error)
	Save(ctx context.Context, data []byte) error
}

// historySaveEvery bounds how often the history is written.
const historySaveEvery = 5 * time.Second

// HistoryFileName is where a local job's master keeps its history, under
// the job's output directory.
func HistoryFileName(output string) string {
	return filepath.Join(output, "master", "history.json")
}

// HistoryFile is a HistoryStore in the file path (its directory is made
// on the first save).
func HistoryFile(path string) HistoryStore { return historyFile(path) }

type historyFile string

func (f historyFile) Load(context.Context) ([]byte, bool, error) {
	data, err := os.ReadFile(string(f))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	return data, err == nil, err
}

func (f historyFile) Save(_ context.Context, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(string(f)), 0o755); err != nil {
		return fmt.Errorf("history directory: %w", err)
	}
	return atomicfile.Write(string(f), data)
}

// savedHistory is what a HistoryStore holds: the history, tagged with its
// run so that a new job in the same place never shows an old one's.
type savedHistory struct {
	RunID   string          `json:"run_id"`
	Job     string          `json:"job"`
	History json.RawMessage `json:"history"` // history.Persisted
}

// observers are what watch the job without a say in it: the Prometheus
// histograms and the dashboard's history.
type observers struct {
	metrics shellMetrics
	history *historyKeeper
	board   *board // nil: no dashboard
}

// historyKeeper is the job's history behind a lock of its own, taken
// under the master's (Add, in applyLocked) or alone, never the other way
// round; and its lazy writer.
type historyKeeper struct {
	mu      sync.Mutex
	h       *history.History
	changes uint64 // bumped by every change: what the writer compares

	store      HistoryStore // nil: not saved
	runID, job string
	log        *slog.Logger
	stop, done chan struct{} // the writer's; nil until start
	stopFinal  bool          // set before stop is closed
}

// openHistory is the job's history: the dead master's when the job
// resumes and store holds this run's, else a new one. A history that
// cannot be read is logged and started afresh: it is display-only.
func openHistory(store HistoryStore, cfg *Config, resuming bool, logger *slog.Logger) *historyKeeper {
	k := &historyKeeper{h: history.New(), store: store, runID: cfg.RunID, job: cfg.JobName, log: logger}
	if store == nil || !resuming {
		return k
	}
	if err := k.restore(); err != nil {
		logger.Warn("the dashboard's history starts afresh", "err", err)
		k.h = history.New()
	}
	return k
}

func (k *historyKeeper) restore() error {
	data, ok, err := k.store.Load(context.Background())
	if err != nil || !ok {
		return err
	}
	var s savedHistory
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("read the persisted history: %w", err)
	}
	if s.RunID != k.runID || s.Job != k.job {
		return nil // another run's
	}
	var p history.Persisted
	if err := json.Unmarshal(s.History, &p); err != nil {
		return fmt.Errorf("read the persisted history: %w", err)
	}
	if err := k.h.Restore(p); err != nil {
		return fmt.Errorf("restore the persisted history: %w", err)
	}
	k.log.Info("dashboard history restored", "events", len(p.Events), "samples", len(p.Samples))
	return nil
}

// add records the core's occurrences (under the master's lock: O(1)).
func (k *historyKeeper) add(occ []job.Occurrence) {
	if len(occ) == 0 {
		return
	}
	k.mu.Lock()
	k.h.Add(occ)
	k.changes++
	k.mu.Unlock()
}

// sample adds v, taken at at, to the series.
func (k *historyKeeper) sample(v job.View, at time.Time) {
	k.mu.Lock()
	if k.h.Sample(v, at) {
		k.changes++
	}
	k.mu.Unlock()
}

// end closes the timeline at the job's end (the instances the master
// stopped after its last step).
func (k *historyKeeper) end(at time.Time) {
	k.mu.Lock()
	k.h.End(at)
	k.changes++
	k.mu.Unlock()
}

// reconcile squares a restored history with the resumed job v.
func (k *historyKeeper) reconcile(v job.View, at time.Time) {
	k.mu.Lock()
	k.h.Reconcile(v, at)
	k.changes++
	k.mu.Unlock()
}

// persisted is a copy of the history and the changes it covers.
func (k *historyKeeper) persisted() (history.Persisted, uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.h.Persisted(), k.changes
}

// start starts the lazy writer, if there is a store.
func (k *historyKeeper) start() {
	if k.store == nil || k.stop != nil {
		return
	}
	k.stop, k.done = make(chan struct{}), make(chan struct{})
	go k.write()
}

// close stops the writer; final: write what changed since its last save
// (at the end, at hand-over; not by a master that lost its state store,
// whose successor may be writing already).
func (k *historyKeeper) close(final bool) {
	if k.stop == nil {
		return
	}
	select {
	case <-k.stop:
		return // closed already
	default:
	}
	k.stopFinal = final
	close(k.stop)
	<-k.done
}

// write saves the history every historySaveEvery when it changed, and at
// close when asked to.
func (k *historyKeeper) write() {
	defer close(k.done)
	tick := time.NewTicker(historySaveEvery)
	defer tick.Stop()
	var saved uint64
	for {
		select {
		case <-tick.C:
			saved = k.save(saved)
		case <-k.stop:
			if k.stopFinal {
				k.save(saved)
			}
			return
		}
	}
}

// save writes the history if it changed since saved; it returns the
// changes now saved. A failure is logged: the job goes on without.
func (k *historyKeeper) save(saved uint64) uint64 {
	p, changes := k.persisted()
	if changes == saved {
		return saved
	}
	data, err := history.Encode(p)
	if err == nil {
		data, err = json.Marshal(savedHistory{RunID: k.runID, Job: k.job, History: json.RawMessage(data)})
	}
	if err == nil {
		err = k.store.Save(context.Background(), data)
	}
	if err != nil {
		k.log.Warn("saving the dashboard's history", "err", err)
		return saved
	}
	return changes
}

// sampleHistory samples the job's view for the history: the view under
// the master's lock, the rest outside it.
func (m *Master) sampleHistory() job.View {
	m.mu.Lock()
	v := m.job.View()
	m.mu.Unlock()
	m.observe.history.sample(v, m.now())
	return v
}

// reconcileHistory squares the history with the job just resumed.
func (m *Master) reconcileHistory() {
	m.mu.Lock()
	v := m.job.View()
	m.mu.Unlock()
	m.observe.history.reconcile(v, m.now())
}

// closeHistory stops the history's writer; final: with a last sample (if
// due) and a last write; ended: the job ended, so its timeline closes.
func (m *Master) closeHistory(final, ended bool) {
	if final {
		m.sampleHistory()
	}
	if ended {
		m.observe.history.end(m.now())
	}
	m.observe.history.close(final)
}
