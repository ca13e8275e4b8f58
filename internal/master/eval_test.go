package master

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/data"
	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/proto/masterpb"
)

func reportTrain(t *testing.T, m *Master, w int32, tk *masterpb.Task, version int64) {
	t.Helper()
	n := tk.Shard.End - tk.Shard.Start
	if _, err := m.ReportTaskResult(context.Background(), &masterpb.ReportTaskResultRequest{WorkerId: w, TaskId: tk.Id, Records: n, Steps: 8, ModelVersion: version}); err != nil {
		t.Fatal(err)
	}
}

func reportEval(t *testing.T, m *Master, w int32, tk *masterpb.Task, version int64, correct float64) {
	t.Helper()
	n := tk.Shard.End - tk.Shard.Start
	ctx := context.Background()
	if _, err := m.ReportEvaluationMetrics(ctx, &masterpb.ReportEvaluationMetricsRequest{WorkerId: w, TaskId: tk.Id, Records: n, ModelVersion: version,
		Sums: map[string]float64{"correct": correct, "loss": float64(n)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: w, TaskId: tk.Id, Records: n, ModelVersion: version}); err != nil {
		t.Fatal(err)
	}
}

// With --evaluation_steps, crossing a multiple of it queues a pass that is
// served before training; the history keeps each pass with the versions
// the workers actually evaluated, then the final pass.
func TestEvaluationDuringTraining(t *testing.T) {
	m, _, _ := newTestMaster(t, func(c *Config) {
		c.ValidationData = c.TrainingData
		c.NumEpochs = 3
		c.EvaluationSteps = 10
	})
	a := getTask(t, m, 0)
	reportTrain(t, m, 0, a, 8) // below 10: nothing
	b := getTask(t, m, 0)
	if b.Type != masterpb.TaskType_TRAINING {
		t.Fatalf("got %v, want training", b)
	}
	reportTrain(t, m, 0, b, 25) // crosses 10 and 20: one pass, at 20
	e1, e2 := getTask(t, m, 0), getTask(t, m, 1)
	if e1.Type != masterpb.TaskType_EVALUATION || e2.Type != masterpb.TaskType_EVALUATION || e1.ModelVersion != 20 {
		t.Fatalf("got %v, %v; want evaluation tasks of version 20", e1, e2)
	}
	reportEval(t, m, 0, e1, 26, 256)
	reportEval(t, m, 1, e2, 27, 244)
	hist := summaryOf(m).Evaluations
	if len(hist) != 1 || hist[0] != (EvalRecord{Version: 20, Accuracy: 0.5, Loss: 1, Records: 1000, MinVersionUsed: 26, MaxVersionUsed: 27, RecordsTrained: 1000}) {
		t.Fatalf("history %+v", hist)
	}
	// Train the rest: 32 crosses 30; the report that ends training
	// queues no periodic pass (the final one follows).
	for trained := 2; ; {
		resp, _ := m.GetTask(context.Background(), &masterpb.GetTaskRequest{WorkerId: 0})
		if resp.Action != masterpb.GetTaskResponse_TASK {
			t.Fatalf("action %v", resp.Action)
		}
		tk := resp.Task
		if tk.Type == masterpb.TaskType_EVALUATION {
			reportEval(t, m, 0, tk, 33, float64(tk.Shard.End-tk.Shard.Start))
			if tk.ModelVersion == 40 {
				t.Fatalf("a periodic pass at the version that ended training: %v", tk)
			}
			select {
			case <-m.ended:
				goto done
			default:
			}
			continue
		}
		trained++
		v := int64(32)
		if trained > 3 {
			v = 39
		}
		if trained == 6 {
			v = 45 // the last (6th) training task crosses 40
		}
		reportTrain(t, m, 0, tk, v)
		if trained == 6 {
			psHoldEverything(t, m)
		}
	}
done:
	s := summaryOf(m)
	if len(s.Evaluations) != 3 {
		t.Fatalf("history %+v", s.Evaluations)
	}
	if s.Evaluations[1].Version != 30 || s.Evaluations[1].Final || !s.Evaluations[2].Final || s.Evaluations[2].Version != 45 {
		t.Fatalf("history %+v", s.Evaluations)
	}
	if s.Eval == nil || s.Eval.Accuracy != 1 || s.Eval.Records != 1000 || s.Eval.ModelVersion != 33 {
		t.Fatalf("eval %+v", s.Eval)
	}
}

func TestEvaluateJob(t *testing.T) {
	init := t.TempDir()
	writeMLPCheckpoint(t, init, 42, nil)
	m, fb, _ := newTestMaster(t, func(c *Config) {
		c.Mode = ModeEvaluate
		c.ValidationData = c.TrainingData
		c.TrainingData = ""
		c.CheckpointDirForInit = init
	})
	if args := strings.Join(fb.launches()[0].Args, " "); !strings.Contains(args, "--checkpoint_dir_for_init="+init) {
		t.Fatalf("PS args %s", args)
	}
	e1, e2 := getTask(t, m, 0), getTask(t, m, 1)
	if e1.Type != masterpb.TaskType_EVALUATION || e1.ModelVersion != 42 {
		t.Fatalf("task %v", e1)
	}
	// A worker killed mid-task: its metrics never count.
	if _, err := m.ReportEvaluationMetrics(context.Background(), &masterpb.ReportEvaluationMetricsRequest{WorkerId: 1, TaskId: e2.Id, Records: 488, ModelVersion: 42,
		Sums: map[string]float64{"correct": 488, "loss": 0}}); err != nil {
		t.Fatal(err)
	}
	m.handleEvent(context.Background(), cluster.Event{Role: cluster.Worker, ID: 1, Index: 1, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed})
	reportEval(t, m, 0, e1, 42, 256)
	e3 := getTask(t, m, 2) // the relaunched worker
	if e3.Id != e2.Id {
		t.Fatalf("got %v, want the lost task", e3)
	}
	reportEval(t, m, 2, e3, 42, 244)
	select {
	case <-m.ended:
	default:
		t.Fatal("evaluate job not finished")
	}
	s := summaryOf(m)
	if s.Eval == nil || s.Eval.Accuracy != 0.5 || s.Eval.Records != 1000 || s.Eval.ModelVersion != 42 || len(s.Epochs) != 0 || s.Mode != ModeEvaluate {
		t.Fatalf("summary %+v eval %+v", s, s.Eval)
	}
	if len(s.Evaluations) != 1 || !s.Evaluations[0].Final {
		t.Fatalf("history %+v", s.Evaluations)
	}
}

func TestEvaluateAndPredictConfig(t *testing.T) {
	base := func(mode string) Config {
		c := DefaultConfig()
		c.Mode, c.ModelDef, c.Output = mode, "m", "o"
		return c
	}
	for _, c := range []struct {
		cfg  func() Config
		want string
	}{
		{func() Config { c := base(ModeEvaluate); c.ValidationData = "v"; return c }, "--checkpoint_dir_for_init: required"},
		{func() Config { c := base(ModeEvaluate); c.CheckpointDirForInit = "x"; return c }, "--validation_data: required"},
		{func() Config {
			c := base(ModePredict)
			c.CheckpointDirForInit = "x"
			c.PredictionOutputs = "p.csv"
			return c
		}, "--prediction_data: required"},
		{func() Config { c := base(ModePredict); c.CheckpointDirForInit = "x"; c.PredictionData = "d"; return c }, "--prediction_outputs: required"},
		{func() Config { c := base(ModeTrain); c.TrainingData = "t"; c.EvaluationSteps = 5; return c }, "--evaluation_steps: needs --validation_data"},
		{func() Config { c := base(ModeTrain); c.TrainingData = "t"; c.EvaluationSteps = -1; return c }, "--evaluation_steps: must not be negative"},
		{func() Config { c := base("serve"); return c }, "unknown job mode"},
		{func() Config { c := base(ModeEvaluate); c.CheckpointDirForInit = "x"; c.ValidationData = "v"; return c }, ""},
	} {
		cfg := c.cfg()
		err := cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}

func predictions(start, end int64, classes int, skip map[int64]bool) *masterpb.Predictions {
	p := &masterpb.Predictions{NumClasses: int32(classes)}
	for i := start; i < end; i++ {
		if skip[i] {
			continue
		}
		p.RecordIndex = append(p.RecordIndex, i)
		p.PredictedClass = append(p.PredictedClass, int32(i%int64(classes)))
		for k := 0; k < classes; k++ {
			v := float32(0)
			if k == int(i%int64(classes)) {
				v = 1
			}
			p.Probabilities = append(p.Probabilities, v)
		}
	}
	return p
}

// predictMLP makes newTestMaster's job a predict job of the mlp, from a
// checkpoint of version 7 into out, as run runID ("" for a new one).
func predictMLP(t *testing.T, out, runID string) func(*Config) {
	init := t.TempDir()
	writeMLPCheckpoint(t, init, 7, nil)
	return func(c *Config) {
		c.Mode = ModePredict
		c.PredictionData, c.TrainingData = c.TrainingData, ""
		c.PredictionOutputs = out
		c.CheckpointDirForInit = init
		if runID != "" {
			c.RunID = runID
		}
	}
}

// Predictions are written in input order whatever order tasks finish in,
// once per record even when a task is redone after its worker was lost,
// and only with the task's accepted report.
func TestPredictJob(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pred.csv")
	m, _, _ := newTestMaster(t, predictMLP(t, out, ""))
	pf, err := newPredictionFile(out, m.spec.NumClasses, "", -1)
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	m.output.pred = pf
	m.mu.Unlock()
	ctx := context.Background()
	p1, p2 := getTask(t, m, 0), getTask(t, m, 1)
	if p1.Type != masterpb.TaskType_PREDICTION || p1.Shard.Start != 0 || p2.Shard.Start != 512 {
		t.Fatalf("tasks %v %v", p1, p2)
	}
	// Bad predictions fail the task: it comes back.
	if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 1, TaskId: p2.Id, Records: 488, Predictions: predictions(512, 999, 10, nil)}); err != nil {
		t.Fatal(err)
	}
	if s := summaryOf(m); s.Tasks.Failed != 1 {
		t.Fatalf("tasks %+v", s.Tasks)
	}
	p2 = getTask(t, m, 1)
	// The second task finishes first (buffered), with a corrupt record.
	if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 1, TaskId: p2.Id, Records: 487, CorruptRecords: 1,
		Predictions: predictions(512, 1000, 10, map[int64]bool{600: true})}); err != nil {
		t.Fatal(err)
	}
	// Worker 0 is lost; its late report is refused and writes nothing.
	m.handleEvent(ctx, cluster.Event{Role: cluster.Worker, ID: 0, Index: 0, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed})
	if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 0, TaskId: p1.Id, Records: 512, Predictions: predictions(0, 512, 10, nil)}); status.Code(err) != codes.NotFound {
		t.Fatalf("late report: %v", err)
	}
	p1b := getTask(t, m, 2)
	if p1b.Id != p1.Id {
		t.Fatalf("got %v", p1b)
	}
	if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 2, TaskId: p1.Id, Records: 512, Predictions: predictions(0, 512, 10, nil)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.ended:
	default:
		t.Fatal("predict job not finished")
	}
	m.step(ctx, m.carryOutSave(ctx, m.output.save)) // commits the predictions
	if s := summaryOf(m); s.Status != "succeeded" {
		t.Fatal(s.Error)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 1001 || lines[0] != "index,class,p0,p1,p2,p3,p4,p5,p6,p7,p8,p9" {
		t.Fatalf("%d lines, header %q", len(lines), lines[0])
	}
	if lines[1] != "0,0,1,0,0,0,0,0,0,0,0,0" || lines[601] != "600,,,,,,,,,,," || lines[1000] != "999,9,0,0,0,0,0,0,0,0,0,1" {
		t.Fatalf("rows %q %q %q", lines[1], lines[601], lines[1000])
	}
	for i, l := range lines[1:] {
		if !strings.HasPrefix(l, strconv.Itoa(i)+",") {
			t.Fatalf("row %d is %q", i, l)
		}
	}
	if p := summaryOf(m).Predictions; p == nil || p.CorruptRecords != 1 {
		t.Fatalf("predictions %+v", p)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*tmp*")); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

func TestPredictionWriterAbortAndIncomplete(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "p.csv")
	pf, err := newPredictionFile(out, 2, "", -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.commit(10); err == nil || !strings.Contains(err.Error(), "only records [0,0) of 10") {
		t.Fatalf("commit of nothing: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left %v", ents)
	}
	// Rows must come in input order (the core releases them so).
	pf, err = newPredictionFile(out, 2, "", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.abort()
	if err := pf.write(&job.PredictionRows{Start: 5, End: 6, Class: []int32{1}, Probs: [][]float32{{0, 1}}}); err == nil || !strings.Contains(err.Error(), "expected 0") {
		t.Fatalf("rows out of order: %v", err)
	}
	if _, err := newPredictionFile(filepath.Join(dir, "missing", "p.csv"), 2, "", -1); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing dir: %v", err)
	}
}

// A binary model's workers send per-task score histograms; the master
// merges them into the pass's AUC (summary eval and history), counting
// only accepted tasks, and refuses histograms that do not merge.
func TestEvaluationAUCFromHistograms(t *testing.T) {
	init := t.TempDir()
	writeMLPCheckpoint(t, init, 7, nil)
	m, _, _ := newTestMaster(t, func(c *Config) {
		c.Mode = ModeEvaluate
		c.ValidationData = c.TrainingData
		c.TrainingData = ""
		c.CheckpointDirForInit = init
	})
	ctx := context.Background()
	e1, e2 := getTask(t, m, 0), getTask(t, m, 1)
	hist := func(tk *masterpb.Task, pos float64) (*masterpb.ScoreHistogram, *data.ScoreHistogram) {
		n := tk.Shard.End - tk.Shard.Start
		h := data.NewScoreHistogram()
		for i := range n {
			// Positives score pos + noise, negatives 0.3 + noise.
			s, label := 0.3+0.4*float64(i%7)/7, int32(0)
			if i%3 == 0 {
				s, label = pos+0.4*float64(i%5)/5, 1
			}
			h.Add(s, label)
		}
		return &masterpb.ScoreHistogram{Positive: h.Positive, Negative: h.Negative}, h
	}
	bad := &masterpb.ScoreHistogram{Positive: []int64{1}, Negative: []int64{0}}
	if _, err := m.ReportEvaluationMetrics(ctx, &masterpb.ReportEvaluationMetricsRequest{WorkerId: 0, TaskId: e1.Id, Records: 1, ModelVersion: 7,
		Sums: map[string]float64{"correct": 1}, ScoreHistogram: bad}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("histogram of 1 bucket: %v, want InvalidArgument", err)
	}
	want := data.NewScoreHistogram()
	for w, tk := range []*masterpb.Task{e1, e2} {
		p, h := hist(tk, 0.4+0.1*float64(w))
		if err := want.Merge(h); err != nil {
			t.Fatal(err)
		}
		n := tk.Shard.End - tk.Shard.Start
		if _, err := m.ReportEvaluationMetrics(ctx, &masterpb.ReportEvaluationMetricsRequest{WorkerId: int32(w), TaskId: tk.Id, Records: n, ModelVersion: 7,
			Sums: map[string]float64{"correct": 0, "loss": 0}, ScoreHistogram: p}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: int32(w), TaskId: tk.Id, Records: n, ModelVersion: 7}); err != nil {
			t.Fatal(err)
		}
	}
	s := summaryOf(m)
	if s.Eval == nil || s.Eval.AUC == nil || *s.Eval.AUC != want.AUC() || len(s.Evaluations) != 1 || s.Evaluations[0].AUC == nil || *s.Evaluations[0].AUC != want.AUC() {
		t.Fatalf("eval %+v, history %+v; want AUC %v", s.Eval, s.Evaluations, want.AUC())
	}
	if a := *s.Eval.AUC; !(a > 0.5 && a < 1) {
		t.Errorf("AUC %v", a)
	}
}

// Data whose shape does not fit a recommender model's schema (dense width,
// number of categorical fields) fails the job before anything is launched.
func TestSparseModelDataSchemaMismatch(t *testing.T) {
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ data, want string }{
		{"synthetic-ctr://?records=100&categorical=10", "records have 10 categorical ids, model ctr.deepfm expects 26 (--model_params: dense=N (dense features, default 13); fields=N"},
		{"synthetic-ctr://?records=100&dense=5", "records have shape [5], model ctr.deepfm expects [13]"},
		{writeIDX(t, 10), "model ctr.deepfm expects [13]"},
	} {
		cfg := DefaultConfig()
		cfg.ModelDef, cfg.TrainingData, cfg.Output = "ctr.deepfm", c.data, t.TempDir()
		fb := newFakeBackend()
		_, err := New(cfg, Deps{Backend: fb, Registry: reg})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New() = %v, want %q", c.data, err, c.want)
		}
		if len(fb.launches()) != 0 {
			t.Errorf("%s: launched %v", c.data, fb.launches())
		}
	}
	// --model_params fit the model to the data, or fail New naming the
	// parameter.
	for params, want := range map[string]string{
		"fields=10;dense=13": "",
		"fields=10;dens=13":  "unknown model parameter dens (known: dense, embedding_dim, fields)",
		"fields=9":           "records have 10 categorical ids, model ctr.deepfm expects 9",
	} {
		cfg := DefaultConfig()
		cfg.ModelDef, cfg.ModelParams, cfg.Output = "ctr.deepfm", params, t.TempDir()
		cfg.TrainingData = "synthetic-ctr://?records=100&categorical=10"
		_, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: reg})
		if (want == "" && err != nil) || (want != "" && (err == nil || !strings.Contains(err.Error(), want))) {
			t.Errorf("--model_params=%s: New() = %v, want %q", params, err, want)
		}
	}
	cfg := DefaultConfig()
	cfg.ModelDef, cfg.TrainingData, cfg.Output = "ctr.deepfm", "synthetic-ctr://?records=100", t.TempDir()
	cfg.ValidationData = "synthetic-ctr://?records=100&categorical=8"
	if _, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: reg}); err == nil || !strings.Contains(err.Error(), "categorical ids") {
		t.Errorf("validation data of another schema: %v", err)
	}
}
