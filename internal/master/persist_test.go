package master

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"elasticdl/internal/master/job"
	"elasticdl/proto/masterpb"
)

// memStore is a StateStore in memory; saves block while gate is held and
// fail with failWith when set.
type memStore struct {
	mu       sync.Mutex
	data     []byte
	saves    int
	failWith error
	gate     sync.Mutex
}

func (s *memStore) Load(context.Context) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data, s.data != nil, nil
}

func (s *memStore) Save(_ context.Context, data []byte) error {
	s.gate.Lock()
	s.gate.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWith != nil {
		return s.failWith
	}
	s.data, s.saves = data, s.saves+1
	return nil
}

// TestGroupCommit: steps that wait while a write is under way are covered
// by the next write, together: far fewer writes than steps, and none
// answered before a write that began after it.
func TestGroupCommit(t *testing.T) {
	store := &memStore{}
	var mu sync.Mutex
	var seq uint64
	p := newPersister(store, func() ([]byte, uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		return []byte(`{}`), seq, nil
	})
	go p.run(context.Background())
	store.gate.Lock() // the first write blocks: steps pile up behind it
	var wg sync.WaitGroup
	const steps = 50
	for i := 0; i < steps; i++ {
		mu.Lock()
		seq++
		s := seq
		mu.Unlock()
		p.changed(s, true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.wait(s); err != nil {
				t.Error(err)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	store.gate.Unlock()
	wg.Wait()
	p.close()
	if store.saves > 3 || store.saves < 1 {
		t.Errorf("%d writes for %d steps, want at most 3 (group commits)", store.saves, steps)
	}
}

// TestCommitDelay: urgent changes that come together (a worker's report
// and its next get-task) share one write, made once the first has waited
// the delay.
func TestCommitDelay(t *testing.T) {
	store := &memStore{}
	var seq atomicSeq
	p := newPersister(store, func() ([]byte, uint64, error) { return []byte(`{}`), seq.load(), nil })
	// Long enough that the second change comes within it even when a
	// loaded machine deschedules this goroutine between the two.
	p.delay = time.Second
	go p.run(context.Background())
	defer p.close()
	start := time.Now()
	p.changed(seq.next(), true)
	time.Sleep(5 * time.Millisecond)
	second := seq.next()
	p.changed(second, true)
	if err := p.wait(second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < p.delay {
		t.Errorf("written after %s, before the delay of %s", took, p.delay)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.saves != 1 {
		t.Errorf("%d writes for two changes within the delay, want 1", store.saves)
	}
}

// atomicSeq is a step sequence shared with a persister's snapshot.
type atomicSeq struct {
	mu sync.Mutex
	n  uint64
}

func (a *atomicSeq) next() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	return a.n
}

func (a *atomicSeq) load() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

func TestLazyStepsArePersistedSoon(t *testing.T) {
	store := &memStore{}
	p := newPersister(store, func() ([]byte, uint64, error) { return []byte(`{}`), 1, nil })
	go p.run(context.Background())
	defer p.close()
	p.changed(1, false) // a heartbeat: nobody waits
	deadline := time.Now().Add(5 * lazyPersistEvery)
	for time.Now().Before(deadline) {
		store.mu.Lock()
		n := store.saves
		store.mu.Unlock()
		if n == 1 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("a lazy change not persisted within %s", 5*lazyPersistEvery)
}

// TestAStoreThatFailsStopsTheMaster: after a failed write nothing is
// acknowledged, and run reports the error (the master then exits for the
// next one to resume).
func TestAStoreThatFailsStopsTheMaster(t *testing.T) {
	store := &memStore{failWith: errors.New("fenced: another master holds the job")}
	p := newPersister(store, func() ([]byte, uint64, error) { return []byte(`{}`), 1, nil })
	done := make(chan error, 1)
	go func() { done <- p.run(context.Background()) }()
	p.changed(1, true)
	err := p.wait(1)
	if !errors.Is(err, ErrStateLost) || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("wait: %v, want ErrStateLost with the store's reason", err)
	}
	if err := <-done; !errors.Is(err, ErrStateLost) {
		t.Fatalf("run: %v", err)
	}
	p.close()
}

func TestLoadState(t *testing.T) {
	ctx := context.Background()
	save := func(ps persistedState) *memStore {
		b, err := json.Marshal(ps)
		if err != nil {
			t.Fatal(err)
		}
		return &memStore{data: b}
	}
	st, err := loadState(ctx, &memStore{}, "run1", "j")
	if st != nil || err != nil {
		t.Errorf("empty store: %v, %v; want a fresh start", st, err)
	}
	mine := persistedState{Format: stateFormat, RunID: "run1", Job: "j", State: job.State{Phase: job.Training, NextWorkerID: 4}}
	if st, err := loadState(ctx, save(mine), "run1", "j"); err != nil || st == nil || st.NextWorkerID != 4 {
		t.Errorf("own run: %+v, %v", st, err)
	}
	if st, err := loadState(ctx, save(mine), "run2", "j"); st != nil || err != nil {
		t.Errorf("another run's state: %+v, %v; want a fresh start", st, err)
	}
	other := mine
	other.Job = "k"
	if _, err := loadState(ctx, save(other), "run1", "j"); err == nil {
		t.Error("the state of another job under the same run: no error")
	}
	newer := mine
	newer.Format = stateFormat + 1
	if _, err := loadState(ctx, save(newer), "run1", "j"); err == nil || !strings.Contains(err.Error(), "format") {
		t.Errorf("unknown format: %v", err)
	}
	if _, err := loadState(ctx, &memStore{data: []byte("{")}, "run1", "j"); err == nil {
		t.Error("corrupt state: no error")
	}
}

func rowsOf(start, end int64) *job.PredictionRows {
	r := &job.PredictionRows{Start: start, End: end}
	for i := start; i < end; i++ {
		r.Class = append(r.Class, int32(i%2))
		r.Probs = append(r.Probs, []float32{0.25, 0.75})
	}
	return r
}

// TestPredictionFileResume: a master taking over a predict job keeps the
// rows its state counts, drops the ones the dead master wrote after, and
// refuses a file that holds fewer rows than the state says.
func TestPredictionFileResume(t *testing.T) {
	out := filepath.Join(t.TempDir(), "p.csv")
	pf, err := newPredictionFile(out, 2, "run1", -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*job.PredictionRows{rowsOf(0, 3), rowsOf(3, 5)} {
		if err := pf.write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := pf.sync(); err != nil {
		t.Fatal(err)
	}
	// The dead master's state counted 3 rows.
	next, err := newPredictionFile(out, 2, "run1", 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.write(rowsOf(3, 4)); err != nil {
		t.Fatal(err)
	}
	if err := next.commit(4); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "index,class,p0,p1\n0,0,0.25,0.75\n1,1,0.25,0.75\n2,0,0.25,0.75\n3,1,0.25,0.75\n"
	if string(b) != want {
		t.Fatalf("file:\n%s\nwant:\n%s", b, want)
	}
	// A state that counts rows the file does not hold.
	short, err := newPredictionFile(out, 2, "run2", -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := short.write(rowsOf(0, 2)); err != nil {
		t.Fatal(err)
	}
	if err := short.sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := newPredictionFile(out, 2, "run2", 5); err == nil || !strings.Contains(err.Error(), "has 2 rows") {
		t.Fatalf("resume past the file's rows: %v", err)
	}
	short.abort()
}

// TestRunStopsWhenTheStateCannotBePersisted: a master that cannot persist
// (a full disk, a store another master took over) acts on nothing — no
// launch, no stop, no summary — and returns ErrStateLost for its
// supervisor to start the next one.
func TestRunStopsWhenTheStateCannotBePersisted(t *testing.T) {
	reg := zooRegistry(t)
	cfg := mlpJobConfig(t)
	cfg.RunID = "run1"
	fb := newFakeBackend()
	m, err := New(cfg, Deps{Backend: fb, Registry: reg, Store: &memStore{failWith: errors.New("disk full")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := m.Run(ctx)
	if !errors.Is(err, ErrStateLost) || s != nil {
		t.Fatalf("Run: %v, %v; want ErrStateLost and no summary", s, err)
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if len(fb.launched) != 0 || len(fb.stopped) != 0 {
		t.Errorf("launched %v, stopped %v: want nothing acted on", fb.launched, fb.stopped)
	}
	if _, err := os.Stat(filepath.Join(cfg.Output, "job_summary.json")); err == nil {
		t.Error("a summary was written")
	}
}

// TestRunHandsOver: a master that hands over (a Kubernetes master pod
// deleted or evicted) and is stopped does not stop the job: it stops no
// instance, writes no summary, leaves its last state persisted, and
// returns ErrHandedOver; the next master resumes from that state.
func TestRunHandsOver(t *testing.T) {
	reg := zooRegistry(t)
	cfg := mlpJobConfig(t)
	cfg.RunID = "run1"
	cfg.NumWorkers, cfg.NumPS = 2, 1
	fb := newFakeBackend()
	store := &memStore{}
	if _, err := New(cfg, Deps{Backend: fb, Registry: reg, HandOver: true}); err == nil {
		t.Fatal("a master that hands over, without a store: accepted")
	}
	m, err := New(cfg, Deps{Backend: fb, Registry: reg, Store: store, HandOver: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		s   *Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := m.Run(ctx)
		done <- result{s, err}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for len(fb.launches()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("launched %v, want the PS and 2 workers", fb.launches())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !errors.Is(r.err, ErrHandedOver) || r.s != nil {
		t.Fatalf("Run: %v, %v; want ErrHandedOver and no summary", r.s, r.err)
	}
	fb.mu.Lock()
	stopped := len(fb.stopped)
	fb.mu.Unlock()
	if stopped != 0 {
		t.Errorf("stopped %d instances: a master that hands over leaves them to the next", stopped)
	}
	if _, err := os.Stat(filepath.Join(cfg.Output, "job_summary.json")); err == nil {
		t.Error("a summary was written")
	}
	next, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: reg, Store: store, HandOver: true})
	if err != nil {
		t.Fatal(err)
	}
	if !next.failover.resuming {
		t.Fatal("the next master does not resume from the state handed over")
	}
	if st := next.job.State(); len(st.Workers) != 2 || len(st.PS) != 1 {
		t.Errorf("the next master knows workers %+v, PS %+v: want the 3 launched", st.Workers, st.PS)
	}
}

// TestAdmissionHandedOver: a gang master whose pod is deleted while it
// waits for admission hands the job over: it fails nothing, launches and
// persists nothing, and the next master starts the job afresh (asking for
// admission again) instead of resuming a failed one.
func TestAdmissionHandedOver(t *testing.T) {
	reg := zooRegistry(t)
	cfg := mlpJobConfig(t)
	cfg.RunID = "run1"
	cfg.NumWorkers, cfg.NumPS = 2, 1
	fb := newFakeBackend()
	store := &memStore{}
	asked := make(chan struct{})
	waitForever := func(ctx context.Context) (time.Duration, error) {
		close(asked)
		<-ctx.Done()
		return time.Second, context.Cause(ctx)
	}
	m, err := New(cfg, Deps{Backend: fb, Registry: reg, Store: store, HandOver: true, Admit: waitForever})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(ctx)
		done <- err
	}()
	<-asked
	cancel()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !errors.Is(err, ErrHandedOver) {
		t.Fatalf("Run: %v; want ErrHandedOver", err)
	}
	if l := len(fb.launches()); l != 0 {
		t.Errorf("launched %d instances while waiting for admission", l)
	}
	next, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: reg, Store: store, HandOver: true})
	if err != nil {
		t.Fatal(err)
	}
	if next.failover.resuming {
		t.Errorf("the next master resumes a job that never started (phase %v): it must ask for admission again", next.job.Phase())
	}
}

// TestPredictMasterDiesAroundTheCommit: a predict master that dies after
// it committed the output, before or after the state that says so is
// durable, leaves the next master a job it ends at once: the output is
// the same, whole, and the run's temp file is gone. (A kill -9 in that
// window once failed the job: the next master looked for a temp file the
// commit had renamed.)
func TestPredictMasterDiesAroundTheCommit(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pred.csv")
	m := predictMaster(t, out)
	ctx := context.Background()
	for w := range int32(2) {
		task := getTask(t, m, w)
		start, end := task.Shard.Start, task.Shard.End
		if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: w, TaskId: task.Id, Records: end - start, Predictions: predictions(start, end, 10, nil)}); err != nil {
			t.Fatal(err)
		}
	}
	if m.output.save == nil || !m.output.save.Predictions {
		t.Fatalf("all predicted, no commit asked: %+v", m.output.save)
	}
	saving, _, err := m.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	m.step(ctx, m.carryOutSave(ctx, m.output.save))
	succeeded, _, err := m.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	partial := partialPredictions(out, "run1")
	if _, err := os.Stat(partial); err != nil {
		t.Fatalf("the commit did not keep the temp file for the next master: %v", err)
	}
	for _, c := range []struct {
		name     string
		state    []byte
		leftover bool // the temp file is there
	}{
		{"died before the state said succeeded", saving, true},
		{"died before removing the temp file", succeeded, true},
		{"died before writing the summary", succeeded, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := os.Stat(partial)
			if there := err == nil; there != c.leftover {
				if there {
					err = os.Remove(partial)
				} else {
					err = os.Link(out, partial) // as the commit leaves it
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			s, err := runNextMaster(t, m.cfg, c.state)
			if err != nil || s.Status != "succeeded" {
				t.Fatalf("Run: %v, %+v", err, s)
			}
			if s.Predictions == nil || s.Predictions.Records != 1000 {
				t.Errorf("predictions %+v", s.Predictions)
			}
			if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, want) {
				t.Errorf("output changed (%v): %d bytes, want %d", err, len(got), len(want))
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*")); len(left) != 0 {
				t.Errorf("temp files left: %v", left)
			}
		})
	}
}

// TestPredictMasterDiesAfterTheJobFailed: the next master of a predict job
// that failed (its state says so) before its dead master removed the temp
// file ends the job failed, removes the file, and writes no output.
func TestPredictMasterDiesAfterTheJobFailed(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pred.csv")
	m := predictMaster(t, out)
	ctx := context.Background()
	m.step(ctx, job.Fail{Err: errors.New("the checkpoint went away")})
	failed, _, err := m.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(partialPredictions(out, "run1")); err != nil {
		t.Fatalf("no temp file to leave behind: %v", err)
	}
	s, err := runNextMaster(t, m.cfg, failed)
	if err == nil || !strings.Contains(err.Error(), "the checkpoint went away") || s == nil || s.Status != "failed" {
		t.Fatalf("Run: %v, %+v; want the job failed as before", err, s)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an output of a failed job: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
}

// predictMaster is a predict job's master (run "run1", predictions into
// out), its output open as Run opens it.
func predictMaster(t *testing.T, out string) *Master {
	t.Helper()
	m, _, _ := newTestMaster(t, predictMLP(t, out, "run1"))
	if err := m.openPredictions(); err != nil {
		t.Fatal(err)
	}
	return m
}

// runNextMaster runs the master that resumes cfg's job from state to its
// end.
func runNextMaster(t *testing.T, cfg Config, state []byte) (*Summary, error) {
	t.Helper()
	next, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: zooRegistry(t), Store: &memStore{data: state}})
	if err != nil {
		t.Fatal(err)
	}
	if !next.failover.resuming {
		t.Fatal("the next master does not resume")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return next.Run(ctx)
}
