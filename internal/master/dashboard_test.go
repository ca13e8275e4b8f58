package master

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/history"
	"elasticdl/internal/master/job"
)

// runUntil runs m until cond holds of its history (polled), then stops it
// as a master that hands over; it returns Run's error.
func runUntil(t *testing.T, m *Master, what string, cond func(history.Persisted) bool) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(ctx)
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, _ := m.observe.history.persisted()
		if cond(p) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("the history never had %s: %+v", what, p)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
		return nil
	}
}

func savedHistoryOf(t *testing.T, path string) history.Persisted {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s savedHistory
	var p history.Persisted
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(s.History, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func kinds(p history.Persisted) map[string]int {
	n := map[string]int{}
	for _, e := range p.Events {
		n[e.Kind]++
	}
	return n
}

// TestHistoryAcrossFailover: a master keeps the job's occurrences and
// samples in its history and saves it when it hands over; the next one
// restores it, goes on numbering its events after the first one's, adds
// resumed, ends the segments of the instances that were gone, and marks
// the gap in its series.
func TestHistoryAcrossFailover(t *testing.T) {
	reg := zooRegistry(t)
	cfg := mlpJobConfig(t)
	cfg.RunID = "run1"
	cfg.NumWorkers, cfg.NumPS = 2, 1
	store := &memStore{}
	file := HistoryFileName(cfg.Output)
	fb := newFakeBackend()
	first, err := New(cfg, Deps{Backend: fb, Registry: reg, Store: store, HandOver: true, History: HistoryFile(file)})
	if err != nil {
		t.Fatal(err)
	}
	fb.events <- cluster.Event{Role: cluster.Worker, ID: 0, Phase: cluster.Running}
	err = runUntil(t, first, "3 launches, a running worker and 2 samples", func(p history.Persisted) bool {
		return kinds(p)[job.OccurLaunched] == 3 && kinds(p)[job.OccurRunning] == 1 && len(p.Samples) >= 2
	})
	if !errors.Is(err, ErrHandedOver) {
		t.Fatalf("first master: %v, want it handed over", err)
	}
	saved := savedHistoryOf(t, file)
	if kinds(saved)[job.OccurLaunched] != 3 || len(saved.Segments) != 3 || len(saved.Samples) < 2 {
		t.Fatalf("saved at hand-over: %d events %v, %d segments, %d samples", len(saved.Events), kinds(saved), len(saved.Segments), len(saved.Samples))
	}

	next, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: reg, Store: store, HandOver: true, History: HistoryFile(file)})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := next.observe.history.persisted(); len(p.Events) != len(saved.Events) {
		t.Fatalf("restored %d events, want the %d saved", len(p.Events), len(saved.Events))
	}
	err = runUntil(t, next, "resumed and a sample after it", func(p history.Persisted) bool {
		return kinds(p)[job.OccurResumed] == 1 && len(p.Samples) > len(saved.Samples)
	})
	if !errors.Is(err, ErrHandedOver) {
		t.Fatalf("next master: %v, want it handed over", err)
	}
	p := savedHistoryOf(t, file)
	for i, e := range p.Events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d is numbered %d: want the first master's, then the next's, in order", i, e.Seq)
		}
		if i < len(saved.Events) && e.Kind != saved.Events[i].Kind {
			t.Errorf("event %d: %s, the first master had %s", i, e.Kind, saved.Events[i].Kind)
		}
	}
	if len(p.Events) <= len(saved.Events) || p.Events[len(saved.Events)].Kind != job.OccurResumed {
		t.Errorf("after the first master's %d events: %+v, want resumed first", len(saved.Events), p.Events[len(saved.Events):])
	}
	for _, s := range p.Segments[:3] {
		if s.Ended == nil {
			t.Errorf("segment %s/%d still open: the new backend had none of the instances", s.Role, s.ID)
		}
	}
	if gap := p.Samples[len(saved.Samples)]; !gap.Gap || gap.RPS != nil {
		t.Errorf("the first sample after the failover: %+v, want a gap", gap)
	}
}

// TestHistoryOfAnotherRun: a history saved by another run is not restored.
func TestHistoryOfAnotherRun(t *testing.T) {
	cfg := mlpJobConfig(t)
	cfg.RunID = "run2"
	file := HistoryFileName(cfg.Output)
	h := history.New()
	h.Add([]job.Occurrence{{Kind: job.OccurPhase}})
	data, _ := history.Encode(h.Persisted())
	raw, _ := json.Marshal(savedHistory{RunID: "run1", Job: cfg.JobName, History: data})
	if err := HistoryFile(file).Save(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	k := openHistory(HistoryFile(file), &cfg, true, slog.New(slog.DiscardHandler))
	if p, _ := k.persisted(); len(p.Events) != 0 {
		t.Errorf("restored another run's %d events", len(p.Events))
	}
	cfg.RunID = "run1"
	k = openHistory(HistoryFile(file), &cfg, true, slog.New(slog.DiscardHandler))
	if p, _ := k.persisted(); len(p.Events) != 1 {
		t.Errorf("restored %d events of this run's, want 1", len(p.Events))
	}
}

// countingHistory is a HistoryStore that counts saves, failing with fail.
type countingHistory struct {
	memStore
	fail error
}

func (c *countingHistory) Save(ctx context.Context, data []byte) error {
	if c.fail != nil {
		return c.fail
	}
	return c.memStore.Save(ctx, data)
}

// TestHistoryWriter: the history is written only when it changed (not
// when a sample was not due), a
// failed write is tried again at the next, and close writes what is left
// only when asked to.
func TestHistoryWriter(t *testing.T) {
	cfg := mlpJobConfig(t)
	store := &countingHistory{}
	k := openHistory(store, &cfg, false, slog.New(slog.DiscardHandler))
	saved := k.save(0)
	if store.saves != 0 || saved != 0 {
		t.Fatalf("an unchanged history: %d saves, covering %d", store.saves, saved)
	}
	k.add([]job.Occurrence{{Kind: job.OccurPhase}})
	k.add(nil)
	if saved = k.save(saved); store.saves != 1 || saved != 1 {
		t.Fatalf("after a change: %d saves, covering %d", store.saves, saved)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k.sample(job.View{}, at)
	k.sample(job.View{}, at) // not due: no change
	store.fail = errors.New("disk full")
	if saved = k.save(saved); saved != 1 {
		t.Fatalf("a failed save covers %d", saved)
	}
	store.fail = nil
	if saved = k.save(saved); store.saves != 2 || saved != 2 || k.save(saved) != saved || store.saves != 2 {
		t.Fatalf("retried: %d saves, covering %d", store.saves, saved)
	}
	k.start()
	k.add([]job.Occurrence{{Kind: job.OccurPhase}})
	k.close(false)
	if store.saves != 2 {
		t.Errorf("close(false) wrote")
	}
	k = openHistory(store, &cfg, false, slog.New(slog.DiscardHandler))
	k.start()
	k.add([]job.Occurrence{{Kind: job.OccurPhase}})
	k.close(true)
	k.close(true)
	if store.saves != 3 {
		t.Errorf("close(true): %d saves, want 3", store.saves)
	}
}
