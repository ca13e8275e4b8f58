package master

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"elasticdl/internal/autoscale"
	"elasticdl/internal/master/job"
	"elasticdl/internal/master/task"
)

// memProgress is a ProgressStore in memory: the Job's annotation, which
// outlives each master. saved hears every write.
type memProgress struct {
	mu      sync.Mutex
	value   string
	set     bool
	loadErr error
	saved   chan string
}

func newMemProgress() *memProgress { return &memProgress{saved: make(chan string, 16)} }

func (s *memProgress) Load(context.Context) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value, s.set, s.loadErr
}

func (s *memProgress) Save(_ context.Context, v string) error {
	s.mu.Lock()
	s.value, s.set = v, true
	s.mu.Unlock()
	s.saved <- v
	return nil
}

func (s *memProgress) next(t *testing.T) autoscale.Progress {
	t.Helper()
	select {
	case v := <-s.saved:
		p, err := autoscale.DecodeProgress(v)
		if err != nil {
			t.Fatalf("published %q: %v", v, err)
		}
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("nothing published")
	}
	return autoscale.Progress{}
}

func progressView(records, done int64, workers int) job.View {
	v := job.View{MinWorkers: 1, MaxWorkers: 4, Records: records}
	v.WorkersRunning = workers
	v.Progress = task.Progress{RecordsTotal: 100000, RecordsDone: done}
	return v
}

// TestProgressPublished: a training master publishes its remaining work,
// bounds and throughput, at most once per progress.MinInterval; the next
// master reads them back and goes on measuring; a garbled value is
// measured afresh.
func TestProgressPublished(t *testing.T) {
	var logged strings.Builder
	logger := slog.New(slog.NewTextHandler(&logged, nil))
	store := newMemProgress()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newProgressPublisher(store, logger, 0)
	p.start(context.Background())
	p.observe(progressView(0, 0, 2), at)
	if got := store.next(t); got.Remaining != 100000 || got.Min != 1 || got.Max != 4 || len(got.Samples) != 0 {
		t.Errorf("first publish %+v, want all 100000 records left, bounds [1, 4], nothing measured", got)
	}
	for i := 1; i <= 30; i++ {
		p.observe(progressView(int64(i*100), int64(i*100), 2), at.Add(time.Duration(i)*time.Second))
	}
	got := store.next(t) // 30 s on: 2 workers measured for 20 s
	if want := (autoscale.ProgressSample{Workers: 2, RecordsPerSecond: 100, Count: 20, Seconds: 20}); got.Remaining != 97000 || len(got.Samples) != 1 || got.Samples[0] != want {
		t.Errorf("second publish %+v, want 97000 left and %+v", got, want)
	}
	p.close()

	// The next master: same job, same annotation.
	p = newProgressPublisher(store, logger, 0)
	p.start(context.Background())
	later := at.Add(time.Hour)
	for i := range 12 {
		p.observe(progressView(int64(i*100), 3000+int64(i*100), 2), later.Add(time.Duration(i)*time.Second))
	}
	if s := p.meter.Samples(); len(s) != 1 || s[0].Count != 21 || s[0].RecordsPerSecond != 100 {
		t.Errorf("after a restart, measured %+v; want the 20 intervals restored and 1 more", s)
	}
	p.close()
	if len(store.saved) != 0 {
		t.Errorf("the restarted master published %q, though nothing changed meaningfully", <-store.saved)
	}

	// Garbled, or unreadable: measured afresh, and published again.
	for _, c := range []struct {
		value string
		err   error
		log   string
	}{
		{"lots", nil, "garbled"},
		{"", errors.New("forbidden"), "cannot be read"},
	} {
		store.value, store.loadErr = c.value, c.err
		logged.Reset()
		p = newProgressPublisher(store, logger, 0)
		p.start(context.Background())
		p.observe(progressView(0, 0, 2), later)
		p.close()
		if got := store.next(t); len(got.Samples) != 0 || !strings.Contains(logged.String(), c.log) {
			t.Errorf("after %q (%v): published %+v, logged %q", c.value, c.err, got, logged.String())
		}
	}
}

// TestProgressNotPublished: with no store (a local job) there is no
// publisher, and a nil one does nothing.
func TestProgressNotPublished(t *testing.T) {
	p := newProgressPublisher(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), 0)
	if p != nil {
		t.Fatal("a publisher with nowhere to publish")
	}
	p.start(context.Background())
	p.observe(progressView(0, 0, 1), time.Now())
	p.close()
}

// TestRunPublishesProgress: a training master reads the progress a
// previous master of the job published as it starts, and publishes from
// its loop: all its records left, its bounds, the samples kept.
func TestRunPublishesProgress(t *testing.T) {
	cfg := mlpJobConfig(t)
	cfg.NumWorkers, cfg.MinWorkers, cfg.NumPS, cfg.NumEpochs = 3, 1, 1, 2
	prev := autoscale.Progress{Remaining: 1, Min: 1, Max: 3, Samples: []autoscale.ProgressSample{{Workers: 2, RecordsPerSecond: 50, Count: 7, Seconds: 7}}}
	v, err := autoscale.EncodeProgress(prev)
	if err != nil {
		t.Fatal(err)
	}
	store := newMemProgress()
	store.value, store.set = v, true
	m, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: zooRegistry(t), Progress: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, m)
	got := store.next(t)
	if got.Remaining != 2000 || got.Min != 1 || got.Max != 3 || len(got.Samples) != 1 || got.Samples[0] != prev.Samples[0] {
		t.Errorf("published %+v; want 2000 records left, bounds [1, 3], the previous master's sample %+v", got, prev.Samples[0])
	}
}
