package job

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"elasticdl/data"
	"elasticdl/internal/cluster"
	"elasticdl/internal/master/policy"
	"elasticdl/internal/master/task"
)

func policyConfig(failureRelaunches, workers int) policy.Config {
	return policy.Config{MaxWorkerFailureRelaunches: failureRelaunches, MaxPSRelaunches: 10, MaxTotalWorkerRelaunches: 100 * workers}
}

func launched(rd Ready) []string {
	var out []string
	for _, l := range rd.Launch {
		out = append(out, fmt.Sprintf("%s %d@%d", l.Role, l.ID, l.Index))
	}
	return out
}

func TestStartLaunchesPSThenWorkers(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.NumPS = 2; c.NumWorkers = 3; c.SyncSGD = true })
	rd := h.take()
	if got, want := strings.Join(launched(rd), ","), "ps 0@0,ps 1@1,worker 0@0,worker 1@1,worker 2@2"; got != want {
		t.Fatalf("launches %s, want %s", got, want)
	}
	// The PS start before the workers: they count on all of them.
	if rd.Launch[0].LiveWorkers != 3 {
		t.Errorf("PS live workers %d, want 3", rd.Launch[0].LiveWorkers)
	}
	// Sync SGD: once launched, the PS hear that none runs yet.
	if len(rd.LiveWorkers) != 1 || rd.LiveWorkers[0] != (LiveWorkers{Live: 0, Gen: 1}) {
		t.Errorf("live updates %+v", rd.LiveWorkers)
	}
	if h.j.Phase() != Training {
		t.Errorf("phase %v", h.j.Phase())
	}
}

// Every refused request leaves the state as it was.
func TestBadRequestsLeaveStateUnchanged(t *testing.T) {
	h := newHarness(t, nil)
	held := h.get(0)
	h.step(Heartbeat{Worker: 1})
	for _, c := range []struct {
		name string
		ev   Event
		want error
	}{
		{"get task from unknown worker", GetTask{Worker: 99}, ErrUnknownWorker},
		{"report from unknown worker", ReportTask{Worker: 99, TaskID: held.ID, Result: task.Result{Records: 512}}, ErrUnknownWorker},
		{"report of unknown task", ReportTask{Worker: 0, TaskID: 12345, Result: task.Result{Records: 512}}, ErrRejected},
		{"report of a task another worker holds", ReportTask{Worker: 1, TaskID: held.ID, Result: task.Result{Records: 512}}, ErrRejected},
		{"report of negative records", ReportTask{Worker: 0, TaskID: held.ID, Result: task.Result{Records: -1}}, ErrRejected},
		{"metrics for a training task", ReportEval{Worker: 0, TaskID: held.ID, Records: 1}, ErrRejected},
		{"heartbeat from unknown worker", Heartbeat{Worker: -1}, ErrUnknownWorker},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.t = t
			h.wantRefused(c.ev, c.want)
		})
	}
}

func TestJobRunsToEvaluationThenSaves(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ValidationData, c.ValidationRecords = "val", 1000 })
	t1, t2 := h.get(0), h.get(1)
	if k := h.kind(0); k != task.KindWait {
		t.Fatalf("both tasks held: %v, want wait (never done)", k)
	}
	h.train(0, t1, 3)
	h.train(1, t2, 4)
	if h.j.Phase() != Evaluating {
		t.Fatalf("phase %v, want evaluating", h.j.Phase())
	}
	e1, e2 := h.get(0), h.get(1)
	if e1.Type != task.Evaluation || e1.ModelVersion != 4 {
		t.Fatalf("task %v, want an evaluation at version 4", e1)
	}
	h.evaluate(0, e1, 4, float64(e1.Records())/2)
	if rd := h.take(); rd.Ended || rd.Save != nil {
		t.Fatalf("ended with a task left: %+v", rd)
	}
	h.evaluate(1, e2, 4, float64(e2.Records())/2)
	rd := h.take()
	if !rd.Ended || rd.Save == nil || !rd.Save.Model || h.j.Phase() != Saving {
		t.Fatalf("ready %+v, phase %v: want Ended and Save of the model", rd, h.j.Phase())
	}
	if k := h.kind(0); k != task.KindDone {
		t.Fatalf("worker told %v while saving, want done", k)
	}
	if !h.step(Heartbeat{Worker: 1}).Stop {
		t.Fatal("heartbeat while saving: not told to stop")
	}
	h.step(Saved{ModelPath: "out/model", ModelVersion: 4, Restores: []PSRestore{{PS: 0, Version: 2, Dir: "ckpt"}}})
	s := h.summary()
	if h.j.Phase() != Succeeded || s.Status != "succeeded" || s.ModelPath != "out/model" || s.ModelVersion != 4 || len(s.PS.Restores) != 1 {
		t.Fatalf("phase %v, summary %+v", h.j.Phase(), s)
	}
	if s.Eval == nil || s.Eval.Records != 1000 || s.Eval.Accuracy != 0.5 || s.Eval.Loss != 1 {
		t.Fatalf("eval %+v", s.Eval)
	}
	if len(s.Epochs) != 1 || s.Epochs[0].RecordsTrained != 1000 || s.Epochs[0].RecordsMissed != 0 {
		t.Fatalf("epochs %+v", s.Epochs)
	}
}

func TestSaveFailureFailsTheJob(t *testing.T) {
	h := newHarness(t, nil)
	t1, t2 := h.get(0), h.get(1)
	h.train(0, t1, 1)
	h.train(1, t2, 2)
	h.step(Saved{Err: errors.New("disk full")})
	if s := h.summary(); h.j.Phase() != Failed || s.Status != "failed" || s.Error != "disk full" {
		t.Fatalf("phase %v, summary %q %q", h.j.Phase(), s.Status, s.Error)
	}
}

// A worker killed mid-task: its task goes back to todo, it is relaunched
// in its slot, the new worker gets the lost task first, and the dead one
// can no longer act.
func TestLostWorkerIsRelaunchedAndItsTaskRequeued(t *testing.T) {
	h := newHarness(t, nil)
	h.take()
	held := h.get(0)
	h.exit(cluster.Worker, 0, cluster.Killed)
	rd := h.take()
	if got := launched(rd); len(got) != 1 || got[0] != "worker 2@0" || rd.Launch[0].Relaunch != "worker-0 killed" {
		t.Fatalf("launches %v %+v, want worker 2 in slot 0", got, rd.Launch)
	}
	if len(rd.Notices) != 1 || rd.Notices[0].Reason != "WorkerKilled" || !rd.Notices[0].Warning || !strings.Contains(rd.Notices[0].Message, "relaunching") {
		t.Fatalf("notices %+v", rd.Notices)
	}
	if got := h.get(2); got.ID != held.ID {
		t.Fatalf("relaunched worker got task %d, want the lost task %d", got.ID, held.ID)
	}
	h.wantRefused(GetTask{Worker: 0}, ErrUnknownWorker)
	h.wantRefused(ReportTask{Worker: 0, TaskID: held.ID, Result: task.Result{Records: held.Records()}}, ErrUnknownWorker)
	s := h.summary()
	if s.Workers.Lost != 1 || s.Workers.Relaunched != 1 || s.Workers.Launched != 3 || s.Tasks.Requeued != 1 {
		t.Fatalf("counts %+v %+v", s.Workers, s.Tasks)
	}
}

func TestPreemptedWorkerIsCounted(t *testing.T) {
	h := newHarness(t, nil)
	h.exit(cluster.Worker, 1, cluster.Preempted)
	s := h.summary()
	if s.Workers.Preempted != 1 || s.Workers.Lost != 1 || s.Workers.Relaunched != 1 {
		t.Fatalf("workers %+v", s.Workers)
	}
	if rd := h.take(); rd.Notices[len(rd.Notices)-1].Reason != "WorkerPreempted" {
		t.Fatalf("notices %+v", rd.Notices)
	}
}

// A worker that completes or is stopped on request is not lost.
func TestRequestedAndCompletedExitsAreNotLosses(t *testing.T) {
	h := newHarness(t, nil)
	h.take()
	h.step(Instance{cluster.Event{Role: cluster.Worker, ID: 0, Phase: cluster.Exited, Reason: cluster.Killed, Requested: true}})
	h.exit(cluster.Worker, 1, cluster.Completed)
	rd := h.take()
	s := h.summary()
	if s.Workers.Lost != 0 || len(rd.Launch) != 0 || len(rd.Notices) != 0 {
		t.Fatalf("workers %+v, ready %+v", s.Workers, rd)
	}
	// The last worker gone and none relaunched: the job cannot go on.
	if h.j.Phase() != Failed || !strings.Contains(h.j.Err().Error(), "no workers left") {
		t.Fatalf("phase %v, err %v", h.j.Phase(), h.j.Err())
	}
}

func TestLostPSIsRelaunchedAtItsIndex(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.NumPS = 2 })
	h.take()
	h.exit(cluster.PS, 1, cluster.OOMKilled)
	rd := h.take()
	if got := launched(rd); len(got) != 1 || got[0] != "ps 2@1" {
		t.Fatalf("launches %v, want ps 2 at index 1", got)
	}
	if rd.Notices[0].Reason != "PSOOMKilled" {
		t.Fatalf("notices %+v", rd.Notices)
	}
	if s := h.summary(); s.PS.Lost != 1 || s.PS.Launched != 3 || s.PS.Relaunched != 1 {
		t.Fatalf("ps counts %+v", s.PS)
	}
	// The relaunched PS is the one at index 1 now; the old ID is unknown.
	h.exit(cluster.PS, 1, cluster.Killed)
	if rd := h.take(); len(rd.Launch) != 0 {
		t.Fatalf("a second exit of a replaced PS relaunched %v", launched(rd))
	}
}

func TestPSLostTooOftenFailsTheJob(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Policy.MaxPSRelaunches = 2 })
	for id := 0; id < 3; id++ {
		h.exit(cluster.PS, id, cluster.Killed)
	}
	if h.j.Phase() != Failed || !strings.Contains(h.j.Err().Error(), "ps-2 killed") {
		t.Fatalf("phase %v, err %v", h.j.Phase(), h.j.Err())
	}
}

func TestFailingWorkersEndTheJob(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.NumWorkers = 1 })
	h.exit(cluster.Worker, 0, cluster.Failed)
	if h.j.Phase() == Failed {
		t.Fatal("job failed after the first worker error; one relaunch is allowed")
	}
	h.exit(cluster.Worker, 1, cluster.Failed)
	if h.j.Phase() != Failed || h.j.Err() == nil {
		t.Fatalf("phase %v, err %v: want failed with no workers left", h.j.Phase(), h.j.Err())
	}
	if rd := h.take(); !rd.Ended {
		t.Fatal("a failed job did not end the loop")
	}
}

// A worker that stops talking is stopped and replaced at once; its task
// goes to another worker; its real exit and late requests change nothing.
func TestSilentWorkerIsStoppedAndReplaced(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.HeartbeatTimeout = 10 * time.Second })
	h.take()
	held := h.get(0)
	h.advance(5 * time.Second)
	h.step(Heartbeat{Worker: 1})
	h.advance(6 * time.Second) // worker 0 silent 11 s, worker 1 6 s
	h.step(Tick{})
	rd := h.take()
	if len(rd.Stop) != 1 || rd.Stop[0] != (StopInstance{Role: cluster.Worker, ID: 0}) {
		t.Fatalf("stops %+v, want worker 0", rd.Stop)
	}
	if got := launched(rd); len(got) != 1 || got[0] != "worker 2@0" {
		t.Fatalf("launches %v", got)
	}
	if got := h.get(1); got.ID != held.ID {
		t.Fatalf("got task %d, want %d", got.ID, held.ID)
	}
	h.step(Instance{cluster.Event{Role: cluster.Worker, ID: 0, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed, Requested: true}})
	if s := h.summary(); s.Workers.Lost != 1 || s.Workers.Relaunched != 1 {
		t.Fatalf("workers %+v", s.Workers)
	}
	h.wantRefused(Heartbeat{Worker: 0}, ErrUnknownWorker)
}

// A pending worker is not silent: silence counts from when it runs.
func TestPendingWorkerIsNotSilent(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.HeartbeatTimeout = 10 * time.Second })
	h.take()
	h.advance(time.Hour)
	h.step(Tick{})
	if rd := h.take(); len(rd.Stop) != 0 {
		t.Fatalf("pending workers stopped: %+v", rd.Stop)
	}
	h.running(cluster.Worker, 0)
	h.advance(11 * time.Second)
	h.step(Tick{})
	if rd := h.take(); len(rd.Stop) != 1 || rd.Stop[0].ID != 0 {
		t.Fatalf("stops %+v, want worker 0", rd.Stop)
	}
}

// A task held past the task timeout goes back to todo; the late report of
// the worker that held it is refused.
func TestTimedOutTaskIsRequeued(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Tasks.TaskTimeout = time.Minute; c.HeartbeatTimeout = time.Hour })
	slow := h.get(0)
	h.advance(2 * time.Minute)
	h.step(Tick{})
	if got := h.get(1); got.ID != slow.ID {
		t.Fatalf("got %d, want the timed-out task %d", got.ID, slow.ID)
	}
	// Refused, and counted as a late report (its gradients were pushed).
	if _, err := h.try(ReportTask{Worker: 0, TaskID: slow.ID, Result: task.Result{Records: slow.Records()}}); !errors.Is(err, ErrRejected) {
		t.Fatalf("late report: %v", err)
	}
	if s := h.summary(); s.Tasks.Requeued != 1 || h.j.Snapshot().Progress.LateReports != 1 {
		t.Fatalf("tasks %+v", s.Tasks)
	}
}

func TestLaunchFailure(t *testing.T) {
	h := newHarness(t, nil)
	rd := h.take()
	h.step(LaunchFailed{Launch: rd.Launch[1], Err: errors.New("launch worker-0: quota")})
	if h.j.Phase() != Failed || h.j.Err().Error() != "launch worker-0: quota" {
		t.Fatalf("phase %v err %v", h.j.Phase(), h.j.Err())
	}
	h2 := newHarness(t, nil)
	h2.take()
	h2.exit(cluster.Worker, 0, cluster.Killed)
	relaunch := h2.take().Launch[0]
	h2.step(LaunchFailed{Launch: relaunch, Err: errors.New("launch worker-2: quota")})
	if want := "relaunch after worker-0 killed: launch worker-2: quota"; h2.j.Err() == nil || h2.j.Err().Error() != want {
		t.Fatalf("err %v, want %q", h2.j.Err(), want)
	}
	h2.wantRefused(GetTask{Worker: 2}, ErrUnknownWorker)
}

// Sync SGD: the PS hear the number of running workers whenever it may have
// changed, with increasing generations, and a flush at the end of training
// and before the model is saved.
func TestSyncSGDLiveWorkerCounts(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SyncSGD = true; c.ValidationData, c.ValidationRecords = "val", 1000 })
	h.running(cluster.Worker, 0) // 1 running
	first := h.get(1)            // worker 1 talks: 2 running
	h.running(cluster.Worker, 1) // already known to run: nothing
	h.exit(cluster.Worker, 0, cluster.Preempted)
	h.running(cluster.Worker, 2) // the replacement runs
	rd := h.take()
	var got []string
	for _, u := range rd.LiveWorkers {
		got = append(got, fmt.Sprintf("%d/%d/%v", u.Live, u.Gen, u.Flush))
	}
	// start; worker 0 runs; worker 1 runs; worker 0 lost; worker 2 runs.
	if want := "0/1/false 1/2/false 2/3/false 1/4/false 2/5/false"; strings.Join(got, " ") != want {
		t.Fatalf("live updates %s, want %s", strings.Join(got, " "), want)
	}
	h.train(1, first, 9)
	for _, w := range []int{1, 2} {
		for {
			a := h.step(GetTask{Worker: w}).Assignment
			if a.Kind != task.KindTask {
				break
			}
			if a.Task.Type == task.Evaluation {
				h.evaluate(w, a.Task, 9, 0)
			} else {
				h.train(w, a.Task, 9)
			}
		}
	}
	rd = h.take()
	if len(rd.LiveWorkers) != 1 || rd.LiveWorkers[0] != (LiveWorkers{Live: 2, Gen: 6, Flush: true}) {
		t.Fatalf("end of training: live updates %+v, want one flush", rd.LiveWorkers)
	}
	if rd.Save == nil || rd.Save.FlushGen != 7 || rd.Save.FlushLive != 2 {
		t.Fatalf("save %+v, want a flush at generation 7", rd.Save)
	}
	// Saving: counts are no longer sent (Save carries the last one).
	h.exit(cluster.Worker, 1, cluster.Completed)
	if rd := h.take(); len(rd.LiveWorkers) != 0 {
		t.Fatalf("live updates while saving: %+v", rd.LiveWorkers)
	}
}

func TestAsyncSGDSendsNoLiveCounts(t *testing.T) {
	h := newHarness(t, nil)
	h.running(cluster.Worker, 0)
	h.exit(cluster.Worker, 1, cluster.Killed)
	if rd := h.take(); len(rd.LiveWorkers) != 0 {
		t.Fatalf("live updates %+v", rd.LiveWorkers)
	}
}

// With EvaluationSteps, crossing a multiple queues one pass (at the
// highest multiple crossed), served before training; the history records
// the versions the workers actually evaluated; the report that ends
// training queues no periodic pass (the final one follows).
func TestEvaluationDuringTraining(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.ValidationData, c.ValidationRecords = "val", 1000
		c.Tasks.NumEpochs = 3
		c.EvaluationSteps = 10
	})
	h.train(0, h.get(0), 8) // below 10: nothing
	b := h.get(0)
	h.train(0, b, 25) // crosses 10 and 20: one pass, at 20
	e1, e2 := h.get(0), h.get(1)
	if e1.Type != task.Evaluation || e2.Type != task.Evaluation || e1.ModelVersion != 20 {
		t.Fatalf("got %v, %v; want evaluation tasks of version 20", e1, e2)
	}
	h.evaluate(0, e1, 26, 256)
	h.evaluate(1, e2, 27, 244)
	if hist := h.summary().Evaluations; len(hist) != 1 || hist[0] != (EvalRecord{Version: 20, Accuracy: 0.5, Loss: 1, Records: 1000, MinVersionUsed: 26, MaxVersionUsed: 27, RecordsTrained: 1000}) {
		t.Fatalf("history %+v", hist)
	}
	for trained := 2; h.j.Phase() != Saving; {
		tk := h.get(0)
		if tk.Type == task.Evaluation {
			if tk.ModelVersion == 40 {
				t.Fatalf("a periodic pass at the version that ended training: %v", tk)
			}
			h.evaluate(0, tk, 33, float64(tk.Records()))
			continue
		}
		trained++
		v := map[bool]int64{true: 32, false: 39}[trained <= 3]
		if trained == 6 {
			v = 45 // the last training task crosses 40
		}
		h.train(0, tk, v)
	}
	s := h.summary()
	if len(s.Evaluations) != 3 || s.Evaluations[1].Version != 30 || s.Evaluations[1].Final || !s.Evaluations[2].Final || s.Evaluations[2].Version != 45 {
		t.Fatalf("history %+v", s.Evaluations)
	}
	if s.Eval == nil || s.Eval.Accuracy != 1 || s.Eval.Records != 1000 || s.Eval.ModelVersion != 33 {
		t.Fatalf("eval %+v", s.Eval)
	}
}

func TestFinalPassAtAPeriodicVersionGetsItsOwnKey(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ValidationData, c.ValidationRecords = "val", 1000; c.EvaluationSteps = 10 })
	if err := h.j.queueEval(10, false); err != nil {
		t.Fatal(err)
	}
	if err := h.j.queueEval(10, true); err != nil {
		t.Fatal(err)
	}
	if h.j.finalKey != 11 || h.j.passes[11].version != 10 || !h.j.passes[11].final {
		t.Fatalf("final key %d, passes %+v", h.j.finalKey, h.j.passes)
	}
}

// An evaluate job: one pass at the checkpoint's version; the metrics of a
// worker killed mid-task never count; nothing to save.
func TestEvaluateJob(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Mode = ModeEvaluate
		c.Tasks.Training, c.Tasks.NumEpochs = nil, 0
		c.ValidationData, c.ValidationRecords = "val", 1000
		c.InitVersion = 42
	})
	if h.j.Phase() != Evaluating {
		t.Fatalf("phase %v", h.j.Phase())
	}
	e1, e2 := h.get(0), h.get(1)
	if e1.Type != task.Evaluation || e1.ModelVersion != 42 {
		t.Fatalf("task %v", e1)
	}
	h.step(ReportEval{Worker: 1, TaskID: e2.ID, Records: 488, ModelVersion: 42, Sums: map[string]float64{"correct": 488}})
	h.exit(cluster.Worker, 1, cluster.Killed)
	h.evaluate(0, e1, 42, 256)
	e3 := h.get(2)
	if e3.ID != e2.ID {
		t.Fatalf("got %v, want the lost task", e3)
	}
	h.evaluate(2, e3, 42, 244)
	rd := h.take()
	if !rd.Ended || rd.Save != nil || h.j.Phase() != Succeeded {
		t.Fatalf("ready %+v phase %v: want ended, nothing to save", rd, h.j.Phase())
	}
	s := h.summary()
	if s.Eval == nil || s.Eval.Accuracy != 0.5 || s.Eval.Records != 1000 || s.Eval.ModelVersion != 42 || len(s.Epochs) != 0 || s.Mode != ModeEvaluate || s.ModelVersion != 42 {
		t.Fatalf("summary %+v eval %+v", s, s.Eval)
	}
}

func TestEvaluationAUCAndBadHistograms(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Mode = ModeEvaluate
		c.Tasks.Training, c.Tasks.NumEpochs = nil, 0
		c.ValidationData, c.ValidationRecords = "val", 1000
	})
	e1, e2 := h.get(0), h.get(1)
	h.wantRefused(ReportEval{Worker: 0, TaskID: e1.ID, Records: 1, Histogram: &data.ScoreHistogram{Positive: []int64{1}, Negative: []int64{0}}}, ErrInvalid)
	h.wantRefused(ReportEval{Worker: 0, TaskID: e1.ID, Records: 513}, ErrInvalid)
	want := data.NewScoreHistogram()
	for w, tk := range []task.Task{e1, e2} {
		hist := data.NewScoreHistogram()
		for i := range tk.Records() {
			s, label := 0.3+0.4*float64(i%7)/7, int32(0)
			if i%3 == 0 {
				s, label = 0.4+0.1*float64(w)+0.4*float64(i%5)/5, 1
			}
			hist.Add(s, label)
		}
		if err := want.Merge(hist); err != nil {
			t.Fatal(err)
		}
		h.step(ReportEval{Worker: w, TaskID: tk.ID, Records: tk.Records(), Sums: map[string]float64{}, Histogram: hist})
		h.step(ReportTask{Worker: w, TaskID: tk.ID, Result: task.Result{Records: tk.Records()}})
	}
	s := h.summary()
	if s.Eval == nil || s.Eval.AUC == nil || *s.Eval.AUC != want.AUC() || *s.Evaluations[0].AUC != want.AUC() {
		t.Fatalf("eval %+v, want AUC %v", s.Eval, want.AUC())
	}
}

func predictionsOf(start, end int64, classes int, skip map[int64]bool) *Predictions {
	p := &Predictions{NumClasses: classes}
	for i := start; i < end; i++ {
		if skip[i] {
			continue
		}
		p.RecordIndex = append(p.RecordIndex, i)
		p.PredictedClass = append(p.PredictedClass, int32(i%int64(classes)))
		for k := 0; k < classes; k++ {
			p.Probabilities = append(p.Probabilities, float32(k))
		}
	}
	return p
}

// A predict job releases rows in input order whatever order tasks finish
// in, once per record even when a task is redone after its worker was
// lost, and only with the task's accepted report; bad predictions fail
// the task, which comes back.
func TestPredictionOrdering(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Mode = ModePredict
		c.Tasks.Training, c.Tasks.NumEpochs = nil, 0
		c.PredictionData, c.PredictionRecords, c.PredictionOutputs = "pred", 1000, "p.csv"
		c.InitVersion = 7
		c.Tasks.MaxAttempts = 5
	})
	p1, p2 := h.get(0), h.get(1)
	if p1.Type != task.Prediction || p1.Start != 0 || p2.Start != 512 {
		t.Fatalf("tasks %v %v", p1, p2)
	}
	for _, bad := range []*Predictions{
		predictionsOf(512, 999, 10, nil),            // a record missing
		predictionsOf(512, 1000, 3, nil),            // wrong classes
		predictionsOf(500, 988, 10, nil),            // outside the task
		{NumClasses: 10, RecordIndex: []int64{512}}, // no class
	} {
		h.step(ReportTask{Worker: 1, TaskID: p2.ID, Result: task.Result{Records: 488}, Predictions: bad})
		if got := h.get(1); got.ID != p2.ID {
			t.Fatalf("failed task did not come back: %v", got)
		}
	}
	if s := h.summary(); s.Tasks.Failed != 4 {
		t.Fatalf("tasks %+v", s.Tasks)
	}
	// The second task finishes first (held back), with a corrupt record.
	h.step(ReportTask{Worker: 1, TaskID: p2.ID, Result: task.Result{Records: 487, Corrupt: 1}, Predictions: predictionsOf(512, 1000, 10, map[int64]bool{600: true})})
	if rd := h.take(); len(rd.PredictionRows) != 0 {
		t.Fatalf("rows released out of order: %+v", rd.PredictionRows)
	}
	h.exit(cluster.Worker, 0, cluster.Killed)
	h.wantRefused(ReportTask{Worker: 0, TaskID: p1.ID, Result: task.Result{Records: 512}, Predictions: predictionsOf(0, 512, 10, nil)}, ErrUnknownWorker)
	if got := h.get(2); got.ID != p1.ID {
		t.Fatalf("got %v", got)
	}
	h.step(ReportTask{Worker: 2, TaskID: p1.ID, Result: task.Result{Records: 512}, Predictions: predictionsOf(0, 512, 10, nil)})
	rd := h.take()
	if len(rd.PredictionRows) != 2 || rd.PredictionRows[0].Start != 0 || rd.PredictionRows[1].Start != 512 || rd.PredictionRows[1].Probs[600-512] != nil {
		t.Fatalf("rows %+v", rd.PredictionRows)
	}
	if rd.Save == nil || !rd.Save.Predictions || rd.Save.Records != 1000 {
		t.Fatalf("save %+v", rd.Save)
	}
	h.step(Saved{})
	if p := h.summary().Predictions; p == nil || p.Records != 1000 || p.CorruptRecords != 1 || p.Path != "p.csv" {
		t.Fatalf("predictions %+v", p)
	}
}

// Each epoch's end is announced once, in order, when its last task is
// reported.
func TestEpochEndsAnnouncedOnce(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Tasks.NumEpochs = 3 })
	h.take()
	for i := 0; i < 6; i++ { // 2 tasks an epoch
		h.train(0, h.get(0), 1)
		if want := (i + 1) / 2; len(h.ready.Notices) != want {
			t.Fatalf("after %d reports: %d announcements %+v, want %d", i+1, len(h.ready.Notices), h.ready.Notices, want)
		}
	}
	for i, n := range h.take().Notices {
		want := fmt.Sprintf("epoch %d/3: 1000/1000 records trained, 0 twice, 0 missed", i+1)
		if n.Reason != "EpochFinished" || n.Message != want || n.Warning {
			t.Errorf("announcement %d: %+v, want %q", i, n, want)
		}
	}
}

// A task that keeps failing fails the job, loudly.
func TestTaskFailingTooOftenFailsTheJob(t *testing.T) {
	h := newHarness(t, nil)
	for i := 0; i < 3; i++ {
		tk := h.get(0)
		h.step(ReportTask{Worker: 0, TaskID: tk.ID, Result: task.Result{Err: "bad record"}})
	}
	if h.j.Phase() != Failed || !strings.Contains(h.j.Err().Error(), "bad record") {
		t.Fatalf("phase %v err %v", h.j.Phase(), h.j.Err())
	}
	if k := h.kind(1); k != task.KindDone {
		t.Fatalf("worker told %v after the job failed", k)
	}
}

// The first error wins; a stop after the end changes nothing.
func TestFailIsFinal(t *testing.T) {
	h := newHarness(t, nil)
	h.step(Fail{Err: errors.New("job stopped: signal")})
	h.step(Fail{Err: errors.New("later")})
	h.step(Saved{})
	if h.j.Phase() != Failed || h.j.Err().Error() != "job stopped: signal" {
		t.Fatalf("phase %v err %v", h.j.Phase(), h.j.Err())
	}
	// After the end, exits only forget instances: no relaunch, no count.
	h.take()
	h.exit(cluster.Worker, 0, cluster.Killed)
	if rd, s := h.take(), h.summary(); len(rd.Launch) != 0 || s.Workers.Lost != 0 {
		t.Fatalf("launches %v, workers %+v", launched(rd), s.Workers)
	}
}

func TestMaxRunningAndSnapshot(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.NumWorkers = 3 })
	h.running(cluster.Worker, 0)
	h.running(cluster.Worker, 1)
	h.running(cluster.PS, 0)
	h.exit(cluster.Worker, 0, cluster.Killed)
	s := h.j.Snapshot()
	if s.WorkersRunning != 1 || s.WorkersPending != 2 || s.PSRunning != 1 || s.Summary.Workers.MaxRunning != 2 {
		t.Fatalf("snapshot %+v", s)
	}
}

// The summary times the first and the last training task reported done;
// other reports and a failed task move neither.
func TestSummaryTimesFirstAndLastTrainedTask(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ValidationData, c.ValidationRecords = "val", 1000 })
	start := h.now
	if s := h.summary(); s.FirstTaskTrainedAt != nil || s.LastTaskTrainedAt != nil {
		t.Fatalf("before any report: first %v, last %v", s.FirstTaskTrainedAt, s.LastTaskTrainedAt)
	}
	t1, t2 := h.get(0), h.get(1)
	h.advance(time.Second)
	h.train(0, t1, 1)
	h.advance(time.Second)
	h.step(ReportTask{Worker: 1, TaskID: t2.ID, Result: task.Result{Err: "boom"}})
	t2 = h.get(1)
	h.advance(time.Second)
	h.train(1, t2, 2)
	h.advance(time.Second)
	e := h.get(0)
	h.evaluate(0, e, 2, 1)
	s := h.summary()
	if s.FirstTaskTrainedAt == nil || !s.FirstTaskTrainedAt.Equal(start.Add(time.Second)) {
		t.Errorf("first task trained at %v, want %v", s.FirstTaskTrainedAt, start.Add(time.Second))
	}
	if s.LastTaskTrainedAt == nil || !s.LastTaskTrainedAt.Equal(start.Add(3*time.Second)) {
		t.Errorf("last task trained at %v, want %v", s.LastTaskTrainedAt, start.Add(3*time.Second))
	}
}
