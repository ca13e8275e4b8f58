package job

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

// TestScenarios runs the job scenarios in testdata/: scripts of what
// happens to a job (workers asking for and reporting tasks, instances
// running and exiting, time passing), each followed by what the core
// answered and decided, so that a reviewer reads the behaviour without
// reading Go. After a change of behaviour, regenerate them with
//
//	go test ./internal/master/job -run TestScenarios -rewrite
//
// and read the diff.
//
// Commands (w: a worker ID):
//
//	new [workers=N] [ps=N] [records=N] [per-task=N] [epochs=N] [validation=N] [eval-steps=N]
//	    [sync] [mode=evaluate|predict] [heartbeat=DUR] [task-timeout=DUR] [failure-relaunches=N]
//	get w=ID                      ask for a task (held by the script for train/eval/fail)
//	train w=ID [version=V]        report the oldest held task trained
//	eval w=ID [version=V] [correct=F]   metrics, then the report, of the oldest held task
//	fail w=ID [err=MSG]           report the oldest held task failed
//	predict w=ID [corrupt]        report the oldest held prediction task with its rows
//	late w=ID task=ID             a report of a task the worker does not hold
//	heartbeat w=ID
//	running ROLE-ID               the backend says the instance runs
//	exit ROLE-ID REASON [requested]   the backend says it exited (killed, preempted, ...)
//	tick DUR                      time passes, then the master's clock ticks
//	launch-failed N [err=MSG]     the Nth launch of the last command's Ready failed
//	saved [err=MSG] [path=P] [version=V]
//	summary                       counters and the per-epoch ledger
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &scenario{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return s.run(t, d)
		})
	})
}

type scenario struct {
	h        *harness
	held     map[int][]task.Task
	launches []Launch // the last command's
}

func (s *scenario) run(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd == "new" {
		return s.newJob(t, d)
	}
	if s.h == nil {
		d.Fatalf(t, "%s before new", d.Cmd)
	}
	s.h.t = t
	before, failedBefore := s.h.j.Phase(), s.h.j.summary.Tasks.Failed
	var out strings.Builder
	reply, err := s.apply(t, d)
	if s.h.j.summary.Tasks.Failed > failedBefore && reply == "" {
		reply = "the task failed"
	}
	switch {
	case err != nil:
		fmt.Fprintf(&out, "refused: %v\n", errorKind(err))
	case reply != "":
		fmt.Fprintln(&out, reply)
	}
	out.WriteString(s.describeReady())
	if p := s.h.j.Phase(); p != before {
		fmt.Fprintf(&out, "phase: %v\n", p)
		if p == Failed {
			fmt.Fprintf(&out, "error: %v\n", s.h.j.Err())
		}
	}
	if out.Len() == 0 {
		return "ok\n"
	}
	return out.String()
}

func (s *scenario) newJob(t *testing.T, d *datadriven.TestData) string {
	var mutate []func(*Config)
	for _, a := range d.CmdArgs {
		v := ""
		if len(a.Vals) > 0 {
			v = a.Vals[0]
		}
		mutate = append(mutate, configArg(t, d, a.Key, v))
	}
	s.h = newHarness(t, func(c *Config) {
		c.Tasks.Shuffle = false // task IDs in record order: readable scripts
		for _, m := range mutate {
			m(c)
		}
	})
	s.held = map[int][]task.Task{}
	return s.describeReady() + fmt.Sprintf("phase: %v\n", s.h.j.Phase())
}

func configArg(t *testing.T, d *datadriven.TestData, key, v string) func(*Config) {
	n := func() int {
		var x int
		if _, err := fmt.Sscan(v, &x); err != nil {
			d.Fatalf(t, "%s=%q: %v", key, v, err)
		}
		return x
	}
	dur := func() time.Duration {
		x, err := time.ParseDuration(v)
		if err != nil {
			d.Fatalf(t, "%s=%q: %v", key, v, err)
		}
		return x
	}
	switch key {
	case "workers":
		x := n()
		return func(c *Config) { c.NumWorkers = x }
	case "ps":
		x := n()
		return func(c *Config) { c.NumPS = x }
	case "records":
		x := int64(n())
		return func(c *Config) {
			c.Tasks.Training[0].Records, c.PredictionRecords = x, x
			if c.ValidationData != "" && c.Mode == ModeEvaluate {
				c.ValidationRecords = x
			}
		}
	case "per-task":
		x := int64(n())
		return func(c *Config) { c.RecordsPerTask, c.Tasks.RecordsPerTask = x, x }
	case "epochs":
		x := n()
		return func(c *Config) { c.Tasks.NumEpochs = x }
	case "validation":
		x := int64(n())
		return func(c *Config) { c.ValidationData, c.ValidationRecords = "val", x }
	case "eval-steps":
		x := int64(n())
		return func(c *Config) { c.EvaluationSteps = x }
	case "sync":
		return func(c *Config) { c.SyncSGD = true }
	case "heartbeat":
		x := dur()
		return func(c *Config) { c.HeartbeatTimeout = x }
	case "task-timeout":
		x := dur()
		return func(c *Config) { c.Tasks.TaskTimeout = x }
	case "failure-relaunches":
		x := n()
		return func(c *Config) { c.Policy.MaxWorkerFailureRelaunches = x }
	case "mode":
		return func(c *Config) {
			c.Mode = v
			records := c.Tasks.Training[0].Records
			c.Tasks.Training, c.Tasks.NumEpochs = nil, 0
			switch v {
			case ModeEvaluate:
				c.ValidationData, c.ValidationRecords, c.InitVersion = "val", records, 42
			case ModePredict:
				c.PredictionData, c.PredictionRecords, c.PredictionOutputs, c.InitVersion = "pred", records, "p.csv", 42
			}
		}
	}
	d.Fatalf(t, "unknown argument %s", key)
	return nil
}

// apply carries out one command and returns the core's answer.
func (s *scenario) apply(t *testing.T, d *datadriven.TestData) (string, error) {
	h := s.h
	w := -1
	if d.HasArg("w") {
		d.ScanArgs(t, "w", &w)
	}
	var version int64
	if d.HasArg("version") {
		d.ScanArgs(t, "version", &version)
	}
	switch d.Cmd {
	case "get":
		r, err := h.try(GetTask{Worker: w})
		if err != nil || r.Assignment.Kind != task.KindTask {
			return r.Assignment.Kind.String(), err
		}
		s.held[w] = append(s.held[w], r.Assignment.Task)
		return describeTask(r.Assignment.Task), nil
	case "train", "fail", "eval":
		t0 := s.takeHeld(t, d, w)
		ev := ReportTask{Worker: w, TaskID: t0.ID, Result: task.Result{Records: t0.Records(), Steps: 1}, ModelVersion: version}
		if d.Cmd == "fail" {
			msg := "bad record"
			if d.HasArg("err") {
				d.ScanArgs(t, "err", &msg)
			}
			ev.Result = task.Result{Err: msg}
		}
		if d.Cmd == "eval" {
			correct := float64(t0.Records())
			if d.HasArg("correct") {
				d.ScanArgs(t, "correct", &correct)
			}
			if _, err := h.try(ReportEval{Worker: w, TaskID: t0.ID, Records: t0.Records(), ModelVersion: version,
				Sums: map[string]float64{"correct": correct, "loss": float64(t0.Records())}}); err != nil {
				return "", err
			}
		}
		_, err := h.try(ev)
		return "", err
	case "predict":
		t0 := s.takeHeld(t, d, w)
		skip := map[int64]bool{}
		if d.HasArg("corrupt") {
			skip[t0.Start] = true // its first record could not be read
		}
		c := int64(len(skip))
		_, err := h.try(ReportTask{Worker: w, TaskID: t0.ID, Result: task.Result{Records: t0.Records() - c, Corrupt: c},
			Predictions: predictionsOf(t0.Start, t0.End, h.j.cfg.NumClasses, skip)})
		return "", err
	case "late":
		var id int64
		d.ScanArgs(t, "task", &id)
		info, _ := h.j.disp.TaskInfo(id)
		_, err := h.try(ReportTask{Worker: w, TaskID: id, Result: task.Result{Records: info.Records()}})
		return "", err
	case "heartbeat":
		r, err := h.try(Heartbeat{Worker: w})
		return fmt.Sprintf("stop: %v", r.Stop), err
	case "running", "exit":
		ev := cluster.Event{Phase: cluster.Running}
		ev.Role, ev.ID = parseInstance(t, d, d.CmdArgs[0].Key)
		if d.Cmd == "exit" {
			ev.Phase, ev.ExitCode, ev.Requested = cluster.Exited, -1, d.HasArg("requested")
			ev.Reason = parseReason(t, d, d.CmdArgs[1].Key)
			switch ev.Reason {
			case cluster.Completed:
				ev.ExitCode = 0
			case cluster.Failed:
				ev.ExitCode = 1
			}
		}
		_, err := h.try(Instance{ev})
		return "", err
	case "tick":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "tick: %v", err)
		}
		h.advance(dur)
		_, err = h.try(Tick{})
		return "", err
	case "launch-failed":
		var i int
		fmt.Sscan(d.CmdArgs[0].Key, &i)
		msg := "quota exceeded"
		if d.HasArg("err") {
			d.ScanArgs(t, "err", &msg)
		}
		l := s.launches[i-1]
		_, err := h.try(LaunchFailed{Launch: l, Err: fmt.Errorf("launch %s: %s", cluster.InstanceName(l.Role, l.ID), msg)})
		return "", err
	case "saved":
		ev := Saved{ModelVersion: version}
		if d.HasArg("err") {
			var msg string
			d.ScanArgs(t, "err", &msg)
			ev.Err = errors.New(msg)
		}
		if d.HasArg("path") {
			d.ScanArgs(t, "path", &ev.ModelPath)
		}
		_, err := h.try(ev)
		return "", err
	case "summary":
		return describeSummary(h.summary()), nil
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return "", nil
}

func (s *scenario) takeHeld(t *testing.T, d *datadriven.TestData, w int) task.Task {
	if len(s.held[w]) == 0 {
		d.Fatalf(t, "worker %d holds no task", w)
	}
	t0 := s.held[w][0]
	s.held[w] = s.held[w][1:]
	return t0
}

func parseInstance(t *testing.T, d *datadriven.TestData, name string) (cluster.Role, int) {
	role, id, ok := strings.Cut(name, "-")
	var n int
	if _, err := fmt.Sscan(id, &n); !ok || err != nil || (role != "worker" && role != "ps") {
		d.Fatalf(t, "instance %q: want worker-N or ps-N", name)
	}
	return cluster.Role(role), n
}

func parseReason(t *testing.T, d *datadriven.TestData, word string) cluster.ExitReason {
	for r := cluster.Completed; r <= cluster.Deleted; r++ {
		if r.String() == word {
			return r
		}
	}
	d.Fatalf(t, "exit reason %q", word)
	return 0
}

func errorKind(err error) string {
	for _, k := range []error{ErrUnknownWorker, ErrRejected, ErrInvalid} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return err.Error()
}

func describeTask(t task.Task) string {
	s := fmt.Sprintf("task %d: %s [%d,%d)", t.ID, t.Type, t.Start, t.End)
	switch t.Type {
	case task.Training:
		s += fmt.Sprintf(" epoch %d", t.Epoch)
	case task.Evaluation:
		s += fmt.Sprintf(" at version %d", t.ModelVersion)
	}
	return s
}

// describeReady lists what the core decided since the last command.
func (s *scenario) describeReady() string {
	rd := s.h.take()
	s.launches = rd.Launch
	var b strings.Builder
	for _, st := range rd.Stop {
		fmt.Fprintf(&b, "stop %s\n", cluster.InstanceName(st.Role, st.ID))
	}
	for _, l := range rd.Launch {
		fmt.Fprintf(&b, "launch %s in slot %d", cluster.InstanceName(l.Role, l.ID), l.Index)
		if l.Role == cluster.PS && s.h.j.cfg.SyncSGD {
			fmt.Fprintf(&b, ", %d live workers", l.LiveWorkers)
		}
		if l.Relaunch != "" {
			fmt.Fprintf(&b, ", replacing %s", l.Relaunch)
		}
		b.WriteString("\n")
	}
	for _, u := range rd.LiveWorkers {
		fmt.Fprintf(&b, "tell the PS: %d live workers (generation %d)", u.Live, u.Gen)
		if u.Flush {
			b.WriteString(", flush")
		}
		b.WriteString("\n")
	}
	for _, n := range rd.Notices {
		kind := "event"
		if n.Warning {
			kind = "warning"
		}
		fmt.Fprintf(&b, "%s %s: %s\n", kind, n.Reason, n.Message)
	}
	for _, r := range rd.PredictionRows {
		fmt.Fprintf(&b, "write prediction rows [%d,%d), %d corrupt\n", r.Start, r.End, r.Corrupt)
	}
	if sv := rd.Save; sv != nil {
		switch {
		case sv.Model:
			fmt.Fprintf(&b, "save the model")
			if s.h.j.cfg.SyncSGD {
				fmt.Fprintf(&b, " after a flush with %d live workers (generation %d)", sv.FlushLive, sv.FlushGen)
			}
			b.WriteString("\n")
		case sv.Predictions:
			fmt.Fprintf(&b, "commit the predictions (%d records)\n", sv.Records)
		}
	}
	if rd.Ended {
		b.WriteString("workers are done\n")
	}
	return b.String()
}

func describeSummary(s *Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status %s", s.Status)
	if s.Error != "" {
		fmt.Fprintf(&b, " (%s)", s.Error)
	}
	fmt.Fprintf(&b, "\nworkers: launched %d, lost %d, relaunched %d, preempted %d, max running %d\n",
		s.Workers.Launched, s.Workers.Lost, s.Workers.Relaunched, s.Workers.Preempted, s.Workers.MaxRunning)
	fmt.Fprintf(&b, "ps: launched %d, lost %d, relaunched %d\n", s.PS.Launched, s.PS.Lost, s.PS.Relaunched)
	fmt.Fprintf(&b, "tasks: completed %d, failed %d, requeued %d\n", s.Tasks.Completed, s.Tasks.Failed, s.Tasks.Requeued)
	for _, e := range s.Epochs {
		fmt.Fprintf(&b, "epoch %d: %d/%d records trained, %d twice, %d missed\n", e.Epoch, e.RecordsTrained, e.Records, e.RecordsTrainedTwice, e.RecordsMissed)
	}
	for _, e := range s.Evaluations {
		fmt.Fprintf(&b, "evaluation at version %d: accuracy %.4g on %d records (versions %d-%d)", e.Version, e.Accuracy, e.Records, e.MinVersionUsed, e.MaxVersionUsed)
		if e.Final {
			b.WriteString(", final")
		}
		b.WriteString("\n")
	}
	if s.ModelPath != "" || s.ModelVersion != 0 {
		fmt.Fprintf(&b, "model %q version %d\n", s.ModelPath, s.ModelVersion)
	}
	if p := s.Predictions; p != nil {
		fmt.Fprintf(&b, "predictions: %d records, %d corrupt\n", p.Records, p.CorruptRecords)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
