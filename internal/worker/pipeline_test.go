package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/proto/masterpb"
)

// scriptedMaster answers GetTask from a script and records what workers
// say they hold and what they report.
type scriptedMaster struct {
	masterpb.UnimplementedMasterServer
	// answer gives the n-th GetTask's answer.
	answer func(n int) *masterpb.GetTaskResponse
	// report answers a report (nil: accepted).
	report func(id int64) error
	// acceptFailures takes a failed task's report; otherwise it is an
	// error that ends the worker (a test's task must not fail).
	acceptFailures bool
	// stall, when set, runs before the n-th GetTask is answered.
	stall func(ctx context.Context, n int)
	// heartbeat answers heartbeats (nil: an empty answer).
	heartbeat func() (*masterpb.HeartbeatResponse, error)

	mu       sync.Mutex
	held     [][]int64 // of each GetTask
	reports  []int64
	failures map[int64]string // a failed task's error
}

func (m *scriptedMaster) GetTask(ctx context.Context, req *masterpb.GetTaskRequest) (*masterpb.GetTaskResponse, error) {
	m.mu.Lock()
	n := len(m.held)
	m.held = append(m.held, slices.Sorted(slices.Values(req.HeldTasks)))
	m.mu.Unlock()
	if m.stall != nil {
		m.stall(ctx, n)
	}
	return m.answer(n), nil
}

func (m *scriptedMaster) ReportTaskResult(_ context.Context, req *masterpb.ReportTaskResultRequest) (*masterpb.ReportTaskResultResponse, error) {
	if req.Error != "" {
		if !m.acceptFailures {
			return nil, status.Errorf(codes.Internal, "test: task %d failed: %s", req.TaskId, req.Error)
		}
		m.mu.Lock()
		if m.failures == nil {
			m.failures = map[int64]string{}
		}
		m.failures[req.TaskId] = req.Error
		m.mu.Unlock()
	}
	var err error
	if m.report != nil {
		err = m.report(req.TaskId)
	}
	m.mu.Lock()
	m.reports = append(m.reports, req.TaskId)
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &masterpb.ReportTaskResultResponse{}, nil
}

func (m *scriptedMaster) Heartbeat(context.Context, *masterpb.HeartbeatRequest) (*masterpb.HeartbeatResponse, error) {
	if m.heartbeat != nil {
		return m.heartbeat()
	}
	return &masterpb.HeartbeatResponse{}, nil
}

// writeIDX writes n 28x28 images and their labels as IDX files, returning
// the images file's path.
func writeIDX(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	var img, lab bytes.Buffer
	for _, v := range []uint32{0x803, uint32(n), 28, 28} {
		binary.Write(&img, binary.BigEndian, v)
	}
	for _, v := range []uint32{0x801, uint32(n)} {
		binary.Write(&lab, binary.BigEndian, v)
	}
	for i := range n {
		img.Write(bytes.Repeat([]byte{byte(i * 37)}, 28*28))
		lab.WriteByte(byte(i % 10))
	}
	path := filepath.Join(dir, "train-images-idx3-ubyte")
	if err := os.WriteFile(path, img.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "train-labels-idx1-ubyte"), lab.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runWorker runs a worker of fashion_mnist.mlp against m and a PS in this
// process, with dataPath preloaded, until it returns.
func runWorker(t *testing.T, m *scriptedMaster, dataPath string) error {
	t.Helper()
	return runWorkerPreloading(t, m, dataPath, "/nonexistent/preloaded-but-never-read")
}

// runWorkerPreloading is runWorker preloading the sources given.
func runWorkerPreloading(t *testing.T, m *scriptedMaster, preload ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	spec, err := reg.Lookup("fashion_mnist.mlp")
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optimizer.Parse(spec.Optimizer)
	if err != nil {
		t.Fatal(err)
	}
	psLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	psCtx, stopPS := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- ps.Serve(psCtx, psLis, ps.Config{NumPS: 1, Optimizer: opt}) }()
	defer func() { stopPS(); <-served }()

	masterLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	masterpb.RegisterMasterServer(g, m)
	go g.Serve(masterLis)
	defer g.Stop()

	w, err := New(Config{WorkerID: 0, MasterAddr: masterLis.Addr().String(), PSAddrs: []string{psLis.Addr().String()},
		ModelDef: "fashion_mnist.mlp", MinibatchSize: 64, HeartbeatInterval: time.Second, MasterTimeout: 5 * time.Second,
		PreloadData: preload}, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return w.Run(ctx)
}

func trainingTask(id int64, path string) *masterpb.GetTaskResponse {
	return &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_TASK, Task: &masterpb.Task{
		Id: id, Type: masterpb.TaskType_TRAINING, Shard: &masterpb.Shard{Name: path, Start: 0, End: 128}}}
}

// The next task is asked for while one trains, saying the worker holds it
// (and the task whose report is still on its way); an early answer other
// than a task is dropped and asked again once every report has landed;
// reports go one at a time, in order.
func TestTasksArePipelined(t *testing.T) {
	path := writeIDX(t, 128)
	wait := &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_WAIT, WaitMs: 10}
	done := &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_DONE}
	script := []*masterpb.GetTaskResponse{trainingTask(1, path), trainingTask(2, path), wait, done}
	m := &scriptedMaster{
		answer: func(n int) *masterpb.GetTaskResponse { return script[min(n, len(script)-1)] },
		report: func(id int64) error {
			if id == 1 {
				time.Sleep(300 * time.Millisecond) // still on its way while task 2 trains
			}
			return nil
		},
	}
	if err := runWorker(t, m, path); err != nil {
		t.Fatal(err)
	}
	want := [][]int64{{}, {1}, {1, 2}, {}}
	if len(m.held) != len(want) {
		t.Fatalf("GetTask held %v, want %v", m.held, want)
	}
	for i := range want {
		if !slices.Equal(m.held[i], want[i]) {
			t.Errorf("GetTask %d said the worker holds %v, want %v (all: %v)", i, m.held[i], want[i], m.held)
		}
	}
	if !slices.Equal(m.reports, []int64{1, 2}) {
		t.Errorf("reports %v, want [1 2]", m.reports)
	}
}

// A report the master refuses (it took the task back) lets the task go and
// the worker goes on; a report that fails otherwise ends the worker, even
// while the next task trains.
func TestReportFailures(t *testing.T) {
	path := writeIDX(t, 128)
	done := &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_DONE}
	script := []*masterpb.GetTaskResponse{trainingTask(1, path), trainingTask(2, path), trainingTask(3, path), done}
	answer := func(n int) *masterpb.GetTaskResponse { return script[min(n, len(script)-1)] }

	refused := &scriptedMaster{answer: answer, report: func(id int64) error {
		if id == 1 {
			return status.Error(codes.FailedPrecondition, "task 1 timed out and went to another worker")
		}
		return nil
	}}
	if err := runWorker(t, refused, path); err != nil {
		t.Fatalf("a refused report: %v, want the worker to go on", err)
	}
	// The last GetTask went out as task 3 started, after task 1's refused
	// report had landed: the worker no longer holds task 1.
	if last := refused.held[len(refused.held)-1]; !slices.Equal(refused.reports, []int64{1, 2, 3}) || slices.Contains(last, 1) {
		t.Errorf("reports %v, GetTasks held %v: want all three reported, task 1 let go", refused.reports, refused.held)
	}

	broken := &scriptedMaster{answer: answer, report: func(id int64) error {
		if id == 2 {
			return status.Error(codes.DataLoss, "the master lost its state")
		}
		return nil
	}}
	err := runWorker(t, broken, path)
	if err == nil || !strings.Contains(err.Error(), "report task 2") || status.Code(err) != codes.DataLoss {
		t.Fatalf("a failed report: %v, want the worker to end with it", err)
	}
	if slices.Contains(broken.reports, 3) {
		t.Errorf("reports %v: task 3 reported after task 2's report failed", broken.reports)
	}
}

// An early DONE is final: the master let the worker go (scaled down) when
// it answered, after the last task's report landed. The worker exits once
// its reports are in, without asking again (the master no longer knows it).
func TestEarlyDoneEndsTheWorker(t *testing.T) {
	path := writeIDX(t, 128)
	done := &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_DONE}
	script := []*masterpb.GetTaskResponse{trainingTask(1, path), done}
	m := &scriptedMaster{answer: func(n int) *masterpb.GetTaskResponse {
		if n >= len(script) {
			t.Errorf("GetTask %d: the worker asked again after DONE", n)
			return done
		}
		return script[n]
	}}
	if err := runWorker(t, m, path); err != nil {
		t.Fatal(err)
	}
	if len(m.held) != 2 || !slices.Equal(m.reports, []int64{1}) {
		t.Errorf("GetTask held %v, reports %v: want two asks and task 1 reported", m.held, m.reports)
	}
}

// A heartbeat's answer can end the worker while its next GetTask is on
// its way (a worker let go hears it from either first): let go, or told
// the job is over, it exits cleanly; refused as unknown (declared lost),
// it ends with the refusal as its error, not with the call the refusal
// interrupted.
func TestHeartbeatEndsTheWorkerMidRequest(t *testing.T) {
	path := writeIDX(t, 128)
	for _, tc := range []struct {
		name    string
		answer  func() (*masterpb.HeartbeatResponse, error)
		wantErr string
	}{
		{"let go", func() (*masterpb.HeartbeatResponse, error) {
			return &masterpb.HeartbeatResponse{Stop: true, LetGo: true}, nil
		}, ""},
		{"job over", func() (*masterpb.HeartbeatResponse, error) { return &masterpb.HeartbeatResponse{Stop: true}, nil }, ""},
		{"refused", func() (*masterpb.HeartbeatResponse, error) {
			return nil, status.Error(codes.NotFound, "unknown worker 0: not launched by this master or already lost")
		}, "master refused heartbeat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &scriptedMaster{
				answer: func(n int) *masterpb.GetTaskResponse { return trainingTask(int64(n+1), path) },
				stall: func(ctx context.Context, n int) {
					if n == 1 {
						<-ctx.Done() // the early ask for task 2 stays on its way
					}
				},
				heartbeat: tc.answer,
			}
			err := runWorker(t, m, path)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("told to stop: %v, want a clean exit", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("refused: %v, want an error saying %q", err, tc.wantErr)
			}
			if !slices.Equal(m.reports, []int64{1}) {
				t.Errorf("reports %v, want task 1's", m.reports)
			}
		})
	}
}

// A preloaded source that failed to open fails the task that reads it,
// whose report says why; the worker goes on, and the next task that reads
// the source opens it again (the file is there by then).
func TestFailedPreloadIsRetried(t *testing.T) {
	path := writeIDX(t, 128)
	late := writeIDX(t, 128)
	dir := filepath.Dir(late)
	if err := os.Rename(dir, dir+".hidden"); err != nil {
		t.Fatal(err)
	}
	done := &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_DONE}
	m := &scriptedMaster{acceptFailures: true, answer: func(n int) *masterpb.GetTaskResponse {
		switch n {
		case 0:
			return trainingTask(1, late)
		case 1:
			// Asked while task 1 is on its way: the file comes back before
			// task 2 can read it.
			if err := os.Rename(dir+".hidden", dir); err != nil {
				t.Error(err)
			}
			return trainingTask(2, late)
		case 2:
			return trainingTask(3, path)
		}
		return done
	}}
	if err := runWorkerPreloading(t, m, late); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.reports, []int64{1, 2, 3}) {
		t.Fatalf("reports %v, want [1 2 3]", m.reports)
	}
	if e := m.failures[1]; !strings.Contains(e, late) || !strings.Contains(e, "no such file") {
		t.Errorf("task 1's report: error %q, want one naming the missing %s", e, late)
	}
	if e, failed := m.failures[2]; failed {
		t.Errorf("task 2 failed (%s): the source was not opened again", e)
	}
}
