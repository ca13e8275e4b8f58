package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

// harness drives a Job step by step with a fake clock and keeps what it
// decided.
type harness struct {
	t     *testing.T
	j     *Job
	now   time.Time
	ready Ready // everything decided since the last take
	// saved, ended: Save and Ended were decided (each must come once).
	saved, ended bool
}

// testConfig is a training job on 1000 records: 2 tasks of 512/488, 2
// workers, 1 PS.
func testConfig() Config {
	return Config{
		Mode:             ModeTrain,
		JobName:          "test",
		ModelDef:         "m",
		RecordsPerTask:   512,
		NumWorkers:       2,
		NumPS:            1,
		NumClasses:       10,
		HeartbeatTimeout: time.Minute,
		InitVersion:      -1,
		Policy:           policyConfig(1, 2),
		Tasks: task.Config{
			Training:       []task.Shard{{Name: "train", Records: 1000}},
			RecordsPerTask: 512,
			NumEpochs:      1,
			MaxAttempts:    3,
			TaskTimeout:    5 * time.Minute,
			Shuffle:        true,
		},
		Logger: slog.New(slog.DiscardHandler),
	}
}

func newHarness(t *testing.T, mutate func(*Config)) *harness {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	j, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, j: j, now: time.Unix(1000, 0)}
	h.step(Start{})
	return h
}

// step applies ev, failing the test on a refused request.
func (h *harness) step(ev Event) Reply {
	h.t.Helper()
	r, err := h.try(ev)
	if err != nil {
		h.t.Fatalf("%T%+v: %v", ev, ev, err)
	}
	return r
}

// try applies ev and collects what the core decided.
func (h *harness) try(ev Event) (Reply, error) {
	r, err := h.j.Step(h.now, ev)
	rd := h.j.Ready()
	h.ready.Launch = append(h.ready.Launch, rd.Launch...)
	h.ready.Stop = append(h.ready.Stop, rd.Stop...)
	h.ready.LiveWorkers = append(h.ready.LiveWorkers, rd.LiveWorkers...)
	h.ready.Notices = append(h.ready.Notices, rd.Notices...)
	h.ready.PredictionRows = append(h.ready.PredictionRows, rd.PredictionRows...)
	h.ready.RingRecovered = append(h.ready.RingRecovered, rd.RingRecovered...)
	h.ready.Resized = append(h.ready.Resized, rd.Resized...)
	h.ready.Occurred = append(h.ready.Occurred, rd.Occurred...)
	if rd.CheckApplied != nil {
		h.ready.CheckApplied = rd.CheckApplied
	}
	if rd.Reshard != nil {
		h.ready.Reshard = rd.Reshard
	}
	h.ready.Resharded = append(h.ready.Resharded, rd.Resharded...)
	if rd.Save != nil {
		if h.saved {
			h.t.Fatalf("a second Save: %+v", rd.Save)
		}
		h.saved, h.ready.Save = true, rd.Save
	}
	if rd.Ended {
		if h.ended {
			h.t.Fatal("Ended twice")
		}
		h.ended, h.ready.Ended = true, true
	}
	return r, err
}

// take returns what was decided since the last take, and forgets it.
func (h *harness) take() Ready {
	rd := h.ready
	h.ready = Ready{}
	return rd
}

func (h *harness) advance(d time.Duration) { h.now = h.now.Add(d) }

// get asks for a task for worker w and wants one.
func (h *harness) get(w int) task.Task {
	h.t.Helper()
	a := h.step(GetTask{Worker: w}).Assignment
	if a.Kind != task.KindTask {
		h.t.Fatalf("worker %d got %v, want a task", w, a.Kind)
	}
	return a.Task
}

// kind asks for a task for worker w and returns the kind of answer.
func (h *harness) kind(w int) task.Kind {
	h.t.Helper()
	return h.step(GetTask{Worker: w}).Assignment.Kind
}

// train reports task t trained by w at model version v.
func (h *harness) train(w int, t task.Task, v int64) {
	h.t.Helper()
	h.step(ReportTask{Worker: w, TaskID: t.ID, Result: task.Result{Records: t.Records(), Steps: 8, LossSum: 2}, ModelVersion: v})
}

// evaluate reports evaluation task t by w: metrics, then the task.
func (h *harness) evaluate(w int, t task.Task, v int64, correct float64) {
	h.t.Helper()
	n := t.Records()
	h.step(ReportEval{Worker: w, TaskID: t.ID, Records: n, ModelVersion: v, Sums: map[string]float64{"correct": correct, "loss": float64(n)}})
	h.step(ReportTask{Worker: w, TaskID: t.ID, Result: task.Result{Records: n}, ModelVersion: v})
}

func (h *harness) exit(r cluster.Role, id int, why cluster.ExitReason) {
	h.t.Helper()
	code := -1
	if why == cluster.Completed {
		code = 0
	}
	h.step(Instance{cluster.Event{Role: r, ID: id, Phase: cluster.Exited, ExitCode: code, Reason: why}})
}

func (h *harness) running(r cluster.Role, id int) {
	h.step(Instance{cluster.Event{Role: r, ID: id, Phase: cluster.Running}})
}

func (h *harness) summary() *Summary { return h.j.Summary(0) }

// wantRefused checks that a request is refused with err and changes
// nothing.
func (h *harness) wantRefused(ev Event, want error) {
	h.t.Helper()
	before := h.j.Snapshot()
	cov := h.j.Coverage()
	_, err := h.try(ev)
	if !errors.Is(err, want) {
		h.t.Fatalf("%T%+v: %v, want %v", ev, ev, err, want)
	}
	after := h.j.Snapshot()
	if !equalSnapshots(before, after) || !slices.Equal(cov, h.j.Coverage()) {
		h.t.Fatalf("%T%+v changed the state:\nbefore %+v\nafter  %+v", ev, ev, before, after)
	}
}

func equalSnapshots(a, b Snapshot) bool {
	return a.Progress == b.Progress && a.WorkersRunning == b.WorkersRunning && a.WorkersPending == b.WorkersPending &&
		a.Summary.Tasks == b.Summary.Tasks && a.Summary.Workers == b.Summary.Workers && a.ModelVersion == b.ModelVersion
}

// resumeThroughJSON persists j's State as JSON, resumes a core from it, and
// checks that the resumed core's State is the same; it returns the new
// core and the State's size.
func resumeThroughJSON(cfg Config, j *Job) (*Job, int, error) {
	b, err := json.Marshal(j.State())
	if err != nil {
		return nil, 0, fmt.Errorf("persist: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, 0, fmt.Errorf("reload: %w", err)
	}
	n, err := Resume(cfg, st)
	if err != nil {
		return nil, 0, fmt.Errorf("resume: %w", err)
	}
	again, err := json.Marshal(n.State())
	if err != nil {
		return nil, 0, err
	}
	if string(again) != string(b) {
		return nil, 0, fmt.Errorf("resumed core's state differs:\n%s\nwant\n%s", again, b)
	}
	return n, len(b), nil
}
