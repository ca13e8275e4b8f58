package master

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/proto/masterpb"
)

// fakeBackend records what the master asks of it; tests inject events.
type fakeBackend struct {
	mu       sync.Mutex
	launched []cluster.InstanceSpec
	stopped  []int
	events   chan cluster.Event
	// launchErr, when set, is what Launch returns for spec (nil: launched).
	launchErr func(cluster.InstanceSpec) error
}

func newFakeBackend() *fakeBackend { return &fakeBackend{events: make(chan cluster.Event, 100)} }

func (f *fakeBackend) Launch(_ context.Context, s cluster.InstanceSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.launchErr != nil {
		if err := f.launchErr(s); err != nil {
			return err
		}
	}
	f.launched = append(f.launched, s)
	return nil
}

func (f *fakeBackend) Stop(ctx context.Context, _ cluster.Role, id int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err // as a real backend's API call would
	}
	f.stopped = append(f.stopped, id)
	return nil
}

func (f *fakeBackend) Events() <-chan cluster.Event                      { return f.events }
func (f *fakeBackend) Existing(context.Context) ([]cluster.Event, error) { return nil, nil }

func (f *fakeBackend) PSAddress(i int) (cluster.Endpoint, error) {
	return cluster.Endpoint{Listen: "127.0.0.1:1", Dial: "127.0.0.1:1"}, nil
}
func (f *fakeBackend) Close(context.Context) error { close(f.events); return nil }
func (f *fakeBackend) launches() []cluster.InstanceSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]cluster.InstanceSpec(nil), f.launched...)
}

// writeIDX writes a tiny MNIST-format data set of n 28×28 images.
func writeIDX(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	img := make([]byte, 16+n*784)
	binary.BigEndian.PutUint32(img[0:], 0x803)
	binary.BigEndian.PutUint32(img[4:], uint32(n))
	binary.BigEndian.PutUint32(img[8:], 28)
	binary.BigEndian.PutUint32(img[12:], 28)
	lab := make([]byte, 8+n)
	binary.BigEndian.PutUint32(lab[0:], 0x801)
	binary.BigEndian.PutUint32(lab[4:], uint32(n))
	for i := 0; i < n; i++ {
		lab[8+i] = byte(i % 10)
	}
	path := filepath.Join(dir, "tiny-images-idx3-ubyte")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tiny-labels-idx1-ubyte"), lab, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// newTestMaster builds a master on 1000 records (2 tasks of 512/488) with
// its instances launched on a fake backend, without serving gRPC.
func newTestMaster(t *testing.T, mutate func(*Config)) (*Master, *fakeBackend, *clock) {
	t.Helper()
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ModelDef = "fashion_mnist.mlp"
	cfg.TrainingData = writeIDX(t, 1000)
	cfg.Output = t.TempDir()
	cfg.NumWorkers = 2
	if mutate != nil {
		mutate(&cfg)
	}
	fb := newFakeBackend()
	clk := &clock{t: time.Unix(1000, 0)}
	m, err := New(cfg, Deps{Backend: fb, Registry: reg, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	m.routes.master = "127.0.0.1:2"
	m.routes.ps = psRoutes{dial: []string{"127.0.0.1:1"}, listen: []string{"127.0.0.1:1"}, n: 1}
	m.step(context.Background(), job.Start{})
	return m, fb, clk
}

// psHoldEverything answers the core's first question of which minibatches
// the PS hold (these tests run no PS): workers wait until then.
func psHoldEverything(t *testing.T, m *Master) {
	t.Helper()
	if resp, err := m.GetTask(context.Background(), &masterpb.GetTaskRequest{WorkerId: 0}); err != nil || resp.Action != masterpb.GetTaskResponse_WAIT {
		t.Fatalf("before the PS say what they hold: GetTask = %v, %v; want WAIT", resp, err)
	}
	shards := make([]job.ShardMinibatches, m.cfg.NumPS)
	for i := range shards {
		shards[i].Unknown = true // nothing to check against: all trained
	}
	m.step(context.Background(), job.AppliedFound{Gen: 1, Shards: shards})
}

type snapshot struct {
	progress any
	coverage any
	summary  Summary
}

func snap(m *Master) snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.job.Snapshot()
	return snapshot{progress: s.Progress, coverage: m.job.Coverage(), summary: s.Summary}
}

// summaryOf is the job's summary so far.
func summaryOf(m *Master) *Summary {
	s, _ := m.summary(0)
	return s
}

func getTask(t *testing.T, m *Master, worker int32) *masterpb.Task {
	t.Helper()
	resp, err := m.GetTask(context.Background(), &masterpb.GetTaskRequest{WorkerId: worker})
	if err != nil || resp.Action != masterpb.GetTaskResponse_TASK {
		t.Fatalf("GetTask(%d) = %v, %v", worker, resp, err)
	}
	return resp.Task
}

func TestBadRequestsLeaveStateUnchanged(t *testing.T) {
	m, _, _ := newTestMaster(t, nil)
	ctx := context.Background()
	held := getTask(t, m, 0)
	// Both workers have been heard from: a request, valid or not, from a
	// known worker only says that it runs.
	if _, err := m.Heartbeat(ctx, &masterpb.HeartbeatRequest{WorkerId: 1}); err != nil {
		t.Fatal(err)
	}
	before := snap(m)
	cases := []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"get task from unknown worker", func() error {
			_, err := m.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: 99})
			return err
		}, codes.NotFound},
		{"report from unknown worker", func() error {
			_, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 99, TaskId: held.Id, Records: 512})
			return err
		}, codes.NotFound},
		{"report of unknown task", func() error {
			_, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 0, TaskId: 12345, Records: 512})
			return err
		}, codes.FailedPrecondition},
		{"report of a task another worker holds", func() error {
			_, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 1, TaskId: held.Id, Records: 512})
			return err
		}, codes.FailedPrecondition},
		{"metrics for a training task", func() error {
			_, err := m.ReportEvaluationMetrics(ctx, &masterpb.ReportEvaluationMetricsRequest{WorkerId: 0, TaskId: held.Id, Records: 1})
			return err
		}, codes.FailedPrecondition},
		{"heartbeat from unknown worker", func() error {
			_, err := m.Heartbeat(ctx, &masterpb.HeartbeatRequest{WorkerId: -1})
			return err
		}, codes.NotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if status.Code(err) != c.code {
				t.Fatalf("got %v, want code %v", err, c.code)
			}
			if after := snap(m); !reflect.DeepEqual(before, after) {
				t.Fatalf("state changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

func TestJobRunsToEvaluationAndFinish(t *testing.T) {
	m, _, _ := newTestMaster(t, func(c *Config) { c.ValidationData = c.TrainingData })
	ctx := context.Background()
	t1, t2 := getTask(t, m, 0), getTask(t, m, 1)
	// No more training tasks while both are held: WAIT, never DONE.
	if resp, _ := m.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: 0, HeldTasks: []int64{t1.Id}}); resp.Action != masterpb.GetTaskResponse_WAIT {
		t.Fatalf("want WAIT, got %v", resp.Action)
	}
	for _, r := range []struct {
		w  int32
		tk *masterpb.Task
	}{{0, t1}, {1, t2}} {
		n := r.tk.Shard.End - r.tk.Shard.Start
		if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: r.w, TaskId: r.tk.Id, Records: n, LossSum: 2, Steps: 8}); err != nil {
			t.Fatal(err)
		}
	}
	// Training done → the PS are asked what they hold → evaluation tasks.
	psHoldEverything(t, m)
	e1 := getTask(t, m, 0)
	if e1.Type != masterpb.TaskType_EVALUATION {
		t.Fatalf("want an evaluation task, got %v", e1)
	}
	e2 := getTask(t, m, 1)
	for _, r := range []struct {
		w  int32
		tk *masterpb.Task
	}{{0, e1}, {1, e2}} {
		n := r.tk.Shard.End - r.tk.Shard.Start
		if _, err := m.ReportEvaluationMetrics(ctx, &masterpb.ReportEvaluationMetricsRequest{WorkerId: r.w, TaskId: r.tk.Id, Records: n,
			Sums: map[string]float64{"correct": float64(n) / 2, "loss": float64(n)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: r.w, TaskId: r.tk.Id, Records: n}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-m.ended:
	default:
		t.Fatal("job not finished after all tasks")
	}
	if resp, _ := m.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: 0}); resp.Action != masterpb.GetTaskResponse_DONE {
		t.Fatalf("want DONE, got %v", resp.Action)
	}
	s := summaryOf(m)
	if s.Eval == nil || s.Eval.Records != 1000 || s.Eval.Accuracy != 0.5 || s.Eval.Loss != 1 {
		t.Fatalf("eval %+v", s.Eval)
	}
	if len(s.Epochs) != 1 || s.Epochs[0].RecordsTrained != 1000 || s.Epochs[0].RecordsMissed != 0 {
		t.Fatalf("epochs %+v", s.Epochs)
	}
}

func TestLostWorkerIsRelaunchedAndItsTaskRequeued(t *testing.T) {
	m, fb, _ := newTestMaster(t, nil)
	ctx := context.Background()
	held := getTask(t, m, 0)
	m.handleEvent(ctx, cluster.Event{Role: cluster.Worker, ID: 0, Index: 0, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed})
	l := fb.launches()
	last := l[len(l)-1]
	if last.Role != cluster.Worker || last.Index != 0 || last.ID != 2 {
		t.Fatalf("relaunch = %+v, want worker ID 2 in slot 0", last)
	}
	// The new worker gets the lost task first.
	if got := getTask(t, m, 2); got.Id != held.Id {
		t.Fatalf("relaunched worker got task %d, want the lost task %d", got.Id, held.Id)
	}
	// The dead worker can no longer act.
	if _, err := m.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: 0}); status.Code(err) != codes.NotFound {
		t.Fatalf("dead worker's request: %v", err)
	}
	s := summaryOf(m)
	if s.Workers.Lost != 1 || s.Workers.Relaunched != 1 || s.Workers.Launched != 3 || s.Tasks.Requeued != 1 {
		t.Fatalf("counts %+v %+v", s.Workers, s.Tasks)
	}
}

func TestLostPSIsRelaunchedAtItsIndex(t *testing.T) {
	m, fb, _ := newTestMaster(t, nil)
	m.handleEvent(context.Background(), cluster.Event{Role: cluster.PS, ID: 0, Index: 0, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed})
	l := fb.launches()
	last := l[len(l)-1]
	if last.Role != cluster.PS || last.Index != 0 || last.ID != 1 {
		t.Fatalf("relaunch = %+v, want ps ID 1 at index 0", last)
	}
	if s := summaryOf(m); s.PS.Lost != 1 || s.PS.Launched != 2 {
		t.Fatalf("ps counts %+v", s.PS)
	}
}

func TestFailingWorkersEndTheJob(t *testing.T) {
	m, _, _ := newTestMaster(t, func(c *Config) { c.NumWorkers = 1; c.RelaunchOnWorkerFailure = 1 })
	ctx := context.Background()
	m.handleEvent(ctx, cluster.Event{Role: cluster.Worker, ID: 0, Phase: cluster.Exited, ExitCode: 2, Reason: cluster.Failed, Message: "boom"})
	select {
	case <-m.ended:
		t.Fatal("job failed after the first worker error; one relaunch is allowed")
	default:
	}
	m.handleEvent(ctx, cluster.Event{Role: cluster.Worker, ID: 1, Phase: cluster.Exited, ExitCode: 2, Reason: cluster.Failed, Message: "boom"})
	select {
	case <-m.ended:
	default:
		t.Fatal("job still running with no workers left")
	}
	if m.jobErr() == nil {
		t.Fatal("no job error")
	}
}

func TestSilentWorkerIsStoppedAndReplaced(t *testing.T) {
	m, fb, clk := newTestMaster(t, func(c *Config) { c.HeartbeatTimeout = 10 * time.Second })
	ctx := context.Background()
	held := getTask(t, m, 0)
	clk.t = clk.t.Add(5 * time.Second)
	if _, err := m.Heartbeat(ctx, &masterpb.HeartbeatRequest{WorkerId: 1}); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(6 * time.Second) // worker 0 silent 11 s, worker 1 6 s
	m.tick(ctx)
	if len(fb.stopped) != 1 || fb.stopped[0] != 0 {
		t.Fatalf("stopped %v, want [0]", fb.stopped)
	}
	// Its task is back: worker 1 gets it.
	if got := getTask(t, m, 1); got.Id != held.Id {
		t.Fatalf("got task %d, want %d", got.Id, held.Id)
	}
	// It was replaced at once, counted lost once; its real exit changes nothing.
	check := func() {
		t.Helper()
		l := fb.launches()
		if last := l[len(l)-1]; last.Role != cluster.Worker || last.Index != 0 || len(l) != 4 {
			t.Fatalf("launches %+v, want a 4th: a worker in slot 0", l)
		}
		if s := summaryOf(m); s.Workers.Lost != 1 || s.Workers.Relaunched != 1 {
			t.Fatalf("workers %+v", s.Workers)
		}
	}
	check()
	m.handleEvent(ctx, cluster.Event{Role: cluster.Worker, ID: 0, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed, Requested: true})
	check()
	if _, err := m.Heartbeat(ctx, &masterpb.HeartbeatRequest{WorkerId: 0}); status.Code(err) != codes.NotFound {
		t.Fatalf("the silent worker's late heartbeat: %v, want NotFound", err)
	}
}

// A worker let go by a scale-down hangs up as soon as it is let go (its
// heartbeat is answered Stop meanwhile): the stop its request brings
// about is the job's, and happens all the same.
func TestStopOutlivesTheRequestThatCausedIt(t *testing.T) {
	m, fb, _ := newTestMaster(t, nil)
	held := getTask(t, m, 1)
	getTask(t, m, 0)
	m.step(context.Background(), job.SetTarget{Workers: 1, Source: "test"}) // worker 1 leaves after its task
	if _, err := m.ReportTaskResult(context.Background(), &masterpb.ReportTaskResultRequest{WorkerId: 1, TaskId: held.Id, Records: held.Shard.End - held.Shard.Start, Steps: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, hangUp := context.WithCancel(context.Background())
	hangUp()
	if resp, err := m.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: 1}); err != nil || resp.Action != masterpb.GetTaskResponse_DONE {
		t.Fatalf("the worker let go: GetTask = %v, %v; want DONE", resp, err)
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if len(fb.stopped) != 1 || fb.stopped[0] != 1 {
		t.Fatalf("stopped %v, want worker 1 stopped after its last task", fb.stopped)
	}
}

// A relaunch the backend refuses fails the job, saying what was lost and
// why the replacement could not start; the worker never launched is
// unknown to the master.
func TestRefusedRelaunchFailsTheJob(t *testing.T) {
	m, fb, _ := newTestMaster(t, nil)
	fb.mu.Lock()
	fb.launchErr = func(s cluster.InstanceSpec) error {
		if s.ID == 2 {
			return errors.New("exceeded quota")
		}
		return nil
	}
	fb.mu.Unlock()
	ctx := context.Background()
	m.handleEvent(ctx, cluster.Event{Role: cluster.Worker, ID: 0, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Preempted})
	select {
	case <-m.ended:
	default:
		t.Fatal("job still running after a refused relaunch")
	}
	want := "relaunch after worker-0 preempted: launch worker-2: exceeded quota"
	if err := m.jobErr(); err == nil || err.Error() != want {
		t.Fatalf("job error %v, want %q", err, want)
	}
	if _, err := m.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: 2}); status.Code(err) != codes.NotFound {
		t.Fatalf("request of the worker never launched: %v", err)
	}
	if resp, err := m.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: 1}); err != nil || resp.Action != masterpb.GetTaskResponse_DONE {
		t.Fatalf("the other worker: %v %v, want DONE", resp, err)
	}
}

// TestRunAppliesTargets: a target from Deps.Targets reaches the core once
// the job has started: idle workers are let go (stopped, not relaunched).
func TestRunAppliesTargets(t *testing.T) {
	reg := zooRegistry(t)
	cfg := mlpJobConfig(t)
	cfg.NumWorkers, cfg.NumPS = 3, 1
	fb := newFakeBackend()
	targets := make(chan Target, 1)
	m, err := New(cfg, Deps{Backend: fb, Registry: reg, Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, m)
	targets <- Target{Workers: 1, Source: "test"}
	deadline := time.Now().Add(20 * time.Second)
	for {
		fb.mu.Lock()
		n := len(fb.stopped)
		fb.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stopped %d workers, want the 2 idle ones let go", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := len(fb.launches()); l != 4 {
		t.Errorf("launched %d instances, want the PS and 3 workers, none relaunched", l)
	}
}

// zooRegistry is a registry of the model zoo.
func zooRegistry(t *testing.T) *model.Registry {
	t.Helper()
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// mlpJobConfig is the default job of fashion_mnist.mlp on 1000 records,
// with an --output of its own.
func mlpJobConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.ModelDef, cfg.TrainingData, cfg.Output = "fashion_mnist.mlp", writeIDX(t, 1000), t.TempDir()
	return cfg
}

// TestRunWaitsForAdmission: a job with Deps.Admit (--gang) launches nothing
// until it is admitted, then everything at once, and its summary says how
// long it waited; an admission that fails fails the job with nothing
// launched.
func TestRunWaitsForAdmission(t *testing.T) {
	reg := zooRegistry(t)
	cfg := mlpJobConfig(t)
	cfg.NumWorkers, cfg.NumPS = 3, 1
	fb := newFakeBackend()
	asked, admit := make(chan struct{}), make(chan struct{})
	m, err := New(cfg, Deps{Backend: fb, Registry: reg, Admit: func(ctx context.Context) (time.Duration, error) {
		close(asked)
		select {
		case <-admit:
			return 1500 * time.Millisecond, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *Summary, 1)
	go func() {
		s, _ := m.Run(ctx)
		done <- s
	}()
	defer func() {
		cancel()
		<-done
	}()
	<-asked
	time.Sleep(50 * time.Millisecond)
	if l := len(fb.launches()); l != 0 {
		t.Fatalf("launched %d instances before the job was admitted", l)
	}
	close(admit)
	deadline := time.Now().Add(20 * time.Second)
	for len(fb.launches()) != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("launched %d instances after admission, want the PS and 3 workers", len(fb.launches()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if s := <-done; s == nil || s.AdmissionWaitSeconds != 1.5 {
		t.Errorf("summary %+v: want admission_wait_seconds 1.5", s)
	}
	done <- nil

	fb = newFakeBackend()
	cfg.Output = t.TempDir()
	m, err = New(cfg, Deps{Backend: fb, Registry: reg, Admit: func(context.Context) (time.Duration, error) {
		return 0, errors.New("forbidden")
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "admission: forbidden") || s == nil || s.Status != "failed" {
		t.Errorf("Run with a failing admission: summary %+v, err %v; want failed naming the admission", s, err)
	}
	if l := len(fb.launches()); l != 0 {
		t.Errorf("launched %d instances for a job that was not admitted", l)
	}
}

// runInBackground runs m until the test ends. Run writes its summary
// under --output as it stops: the cleanup lets it finish before the
// test's TempDir is removed.
func runInBackground(t *testing.T, m *Master) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
