package local

import (
	"encoding/csv"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/data"
	"elasticdl/internal/master"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/wire"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

// startCmd starts `elasticdl <command> --output=OUT args...` (evaluate,
// predict) like startJob does for train.
func startCmd(t *testing.T, command string, args ...string) *job {
	t.Helper()
	out := t.TempDir()
	return startCommand(t, out, append([]string{command, "--output=" + out, "--log_interval=1s"}, args...))
}

func zooSpec(t *testing.T, name string) model.Spec {
	t.Helper()
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	spec, err := reg.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// loadModel builds spec's network with the parameters of the newest
// complete checkpoint under dir: a single-process copy of the model.
func loadModel(t *testing.T, spec model.Spec, dir string) *nn.Model {
	t.Helper()
	set, err := checkpoint.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*pserverpb.Tensor{}
	for _, c := range set.Shards {
		for _, p := range c.GetDenseParameters() {
			byName[p.GetName()] = p
		}
	}
	net := spec.Build(rand.New(rand.NewSource(0)))
	for _, p := range net.Params() {
		tn, ok := byName[p.Name]
		if !ok {
			t.Fatalf("checkpoint lacks %s", p.Name)
		}
		if err := wire.DecodeInto(tn, p.Value.Data); err != nil {
			t.Fatal(err)
		}
	}
	return net
}

type predRow struct {
	index int64
	class int
	probs []float64
}

func readPredictions(t *testing.T, path string, classes int) []predRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := "index,class"
	for k := 0; k < classes; k++ {
		want += ",p" + strconv.Itoa(k)
	}
	if got := strings.Join(recs[0], ","); got != want {
		t.Fatalf("header %q, want %q", got, want)
	}
	rows := make([]predRow, 0, len(recs)-1)
	for i, r := range recs[1:] {
		var row predRow
		row.index, err = strconv.ParseInt(r[0], 10, 64)
		if err != nil || row.index != int64(i) {
			t.Fatalf("row %d has index %q, want %d (input order)", i, r[0], i)
		}
		if row.class, err = strconv.Atoi(r[1]); err != nil {
			t.Fatalf("row %d: class %q", i, r[1])
		}
		for _, s := range r[2:] {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("row %d: probability %q", i, s)
			}
			row.probs = append(row.probs, v)
		}
		rows = append(rows, row)
	}
	return rows
}

// checkAgainstForward compares rows with a single-process forward pass of
// the saved model on the first n records of the data.
func checkAgainstForward(t *testing.T, spec model.Spec, modelDir, dataPath string, rows []predRow, n int) {
	t.Helper()
	net := loadModel(t, spec, modelDir)
	src, err := data.Open(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	b, err := src.Read(0, int64(n))
	if err != nil {
		t.Fatal(err)
	}
	x := &nn.Tensor{Shape: append([]int{n}, spec.InputShape...), Data: b.Features}
	logits := net.Forward(x, false)
	k := spec.NumClasses
	for i := 0; i < n; i++ {
		row := logits.Data[i*k : (i+1)*k]
		if c := nn.Argmax(row); c != rows[i].class {
			t.Errorf("record %d: predicted class %d, single-process forward %d", i, rows[i].class, c)
		}
		probs := nn.AppendSoftmax(nil, row)
		for c, p := range probs {
			if math.Abs(float64(p)-rows[i].probs[c]) > 1e-5 {
				t.Errorf("record %d class %d: probability %g, single-process %g", i, c, rows[i].probs[c], p)
			}
		}
	}
}

// TestEvaluationStepsEvaluateAndPredict trains the mlp with
// --evaluation_steps, then evaluates and predicts with the model it wrote:
// the evaluate job's accuracy is the training job's final one (same model,
// same data), and the predictions, one row per record in input order,
// have that accuracy against the labels and match a single-process
// forward pass.
func TestEvaluationStepsEvaluateAndPredict(t *testing.T) {
	needData(t)
	test := filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz")
	j := startJob(t, append(mlpArgs("1"), "--evaluation_steps=300")...)
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	s := j.summary()
	assertExactlyOnce(t, s, 1, 60000)
	if len(s.Evaluations) < 3 {
		t.Fatalf("evaluation history %+v, want at least 2 passes during training and the final one", s.Evaluations)
	}
	for i, e := range s.Evaluations {
		if e.Records != 10000 || e.MinVersionUsed > e.MaxVersionUsed || e.MinVersionUsed < e.Version || e.Accuracy < 0.5 {
			t.Errorf("pass %d: %+v", i, e)
		}
		if i > 0 && e.Version <= s.Evaluations[i-1].Version {
			t.Errorf("pass versions not increasing: %+v", s.Evaluations)
		}
		if e.Final != (i == len(s.Evaluations)-1) {
			t.Errorf("pass %d final=%v", i, e.Final)
		}
		if !e.Final && e.Version%300 != 0 {
			t.Errorf("pass %d at version %d, not a multiple of 300", i, e.Version)
		}
	}
	last := s.Evaluations[len(s.Evaluations)-1]
	if s.Eval == nil || s.Eval.Accuracy != last.Accuracy || s.Eval.Records != 10000 {
		t.Fatalf("eval %+v, last pass %+v", s.Eval, last)
	}
	if n := strings.Count(j.stderr.String(), "msg=evaluation "); n != len(s.Evaluations) {
		t.Errorf("%d evaluation log lines for %d passes", n, len(s.Evaluations))
	}
	modelDir := filepath.Join(j.out, "model")

	t.Run("evaluate", func(t *testing.T) {
		e := startCmd(t, "evaluate", "--model_def=fashion_mnist.mlp", "--validation_data="+test, "--checkpoint_dir_for_init="+modelDir)
		if code := e.wait(2 * time.Minute); code != 0 {
			t.Fatalf("exit code %d\nstderr:\n%s", code, e.stderr.String())
		}
		es := e.summary()
		if es.Status != "succeeded" || es.Mode != "evaluate" || es.Eval == nil || es.Eval.Records != 10000 || len(es.Epochs) != 0 {
			t.Fatalf("summary %+v, eval %+v", es, es.Eval)
		}
		if math.Abs(es.Eval.Accuracy-s.Eval.Accuracy) > 1e-6 || math.Abs(es.Eval.Loss-s.Eval.Loss) > 1e-4 {
			t.Errorf("evaluate: accuracy %.6f loss %.6f; the training job's final: %.6f, %.6f", es.Eval.Accuracy, es.Eval.Loss, s.Eval.Accuracy, s.Eval.Loss)
		}
		if es.ModelVersion != s.ModelVersion || es.Eval.ModelVersion != s.ModelVersion {
			t.Errorf("evaluated version %d/%d, the model is version %d", es.ModelVersion, es.Eval.ModelVersion, s.ModelVersion)
		}
		if !strings.Contains(e.stdout.String(), "test accuracy") {
			t.Errorf("stdout lacks the metrics:\n%s", e.stdout.String())
		}
	})

	t.Run("predict", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "pred.csv")
		p := startCmd(t, "predict", "--model_def=fashion_mnist.mlp", "--prediction_data="+test, "--checkpoint_dir_for_init="+modelDir, "--prediction_outputs="+out)
		if code := p.wait(2 * time.Minute); code != 0 {
			t.Fatalf("exit code %d\nstderr:\n%s", code, p.stderr.String())
		}
		ps := p.summary()
		if ps.Predictions == nil || ps.Predictions.Records != 10000 || ps.Predictions.Path != out {
			t.Fatalf("predictions %+v", ps.Predictions)
		}
		rows := readPredictions(t, out, 10)
		if len(rows) != 10000 {
			t.Fatalf("%d rows, want 10000", len(rows))
		}
		src, err := data.Open(test)
		if err != nil {
			t.Fatal(err)
		}
		b, err := src.Read(0, 10000)
		src.Close()
		if err != nil {
			t.Fatal(err)
		}
		correct := 0
		for i, r := range rows {
			if r.class == int(b.Labels[i]) {
				correct++
			}
		}
		if acc := float64(correct) / 10000; math.Abs(acc-s.Eval.Accuracy) > 1e-6 {
			t.Errorf("accuracy of the predictions %.6f, evaluation %.6f", acc, s.Eval.Accuracy)
		}
		checkAgainstForward(t, zooSpec(t, "fashion_mnist.mlp"), modelDir, test, rows, 20)
	})
}

// initialCNN writes the cnn's initial model (seed 3) as a checkpoint to
// predict with.
func initialCNN(t *testing.T) (model.Spec, string) {
	t.Helper()
	spec := zooSpec(t, "fashion_mnist.cnn")
	modelDir := t.TempDir()
	c := &pserverpb.Checkpoint{Version: 5, NumShards: 1}
	for _, p := range spec.Build(rand.New(rand.NewSource(3))).Params() {
		c.DenseParameters = append(c.DenseParameters, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
	}
	if _, err := checkpoint.Write(modelDir, c); err != nil {
		t.Fatal(err)
	}
	return spec, modelDir
}

// TestPredictWorkerKilled predicts the training set with the cnn (slow
// enough to kill a worker -9 in the middle): still exactly one row per
// record, in order, the same as a single-process forward pass.
func TestPredictWorkerKilled(t *testing.T) {
	needData(t)
	spec, modelDir := initialCNN(t)
	train := filepath.Join(dataDir, "train-images-idx3-ubyte.gz")
	// A worker killed in the few milliseconds between two tasks holds
	// none, which is correct but does not exercise the requeue: such a run
	// is checked all the same and the kill tried again.
	for attempt := 1; attempt <= 3; attempt++ {
		if predictKillingOneWorker(t, spec, modelDir, train) {
			return
		}
		t.Logf("attempt %d: the killed worker held no task; again", attempt)
	}
	t.Error("in 3 attempts the killed worker never held a task")
}

// predictKillingOneWorker runs one prediction with two workers, kills one
// of them -9, checks the output, and reports whether a task was requeued.
func predictKillingOneWorker(t *testing.T, spec model.Spec, modelDir, train string) bool {
	t.Helper()
	s := predictKilling(t, spec, modelDir, train, "worker", 2, 300*time.Millisecond)
	if s.Workers.Lost != 1 || s.Workers.Relaunched != 1 {
		t.Errorf("workers %+v, want 1 lost and relaunched", s.Workers)
	}
	return s.Tasks.Requeued >= 1
}

// predictKilling predicts train with the cnn of modelDir and two workers;
// once predicting, with n processes of role running, it waits settle and
// kills the first of them -9. The job must succeed with exactly one row
// per record, in order, the same as a single-process forward pass, and no
// temporary file left; its summary is returned.
func predictKilling(t *testing.T, spec model.Spec, modelDir, train, role string, n int, settle time.Duration) master.Summary {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pred.csv")
	p := startCmd(t, "predict", "--model_def=fashion_mnist.cnn", "--prediction_data="+train, "--checkpoint_dir_for_init="+modelDir,
		"--prediction_outputs="+out, "--num_workers=2")
	var victim int
	waitFor(t, time.Minute, "predicting with "+role+"s running", func() bool {
		pids := p.children(role)
		if len(pids) != n || !strings.Contains(p.stderr.String(), "tasks_done=") {
			return false
		}
		victim = pids[0]
		return true
	})
	time.Sleep(settle)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(5 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, p.stderr.String())
	}
	s := p.summary()
	if s.Predictions == nil || s.Predictions.Records != 60000 {
		t.Fatalf("predictions %+v", s.Predictions)
	}
	rows := readPredictions(t, out, 10)
	if len(rows) != 60000 {
		t.Fatalf("%d rows, want 60000", len(rows))
	}
	checkAgainstForward(t, spec, modelDir, train, rows, 10)
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
	return s
}

// TestEvaluatePredictBadInput: no checkpoint, or an output directory that
// does not exist, is one clear error line and no job.
func TestEvaluatePredictBadInput(t *testing.T) {
	needData(t)
	test := "--validation_data=" + filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz")
	pdata := "--prediction_data=" + filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz")
	ckpt := t.TempDir()
	if _, err := checkpoint.Write(ckpt, &pserverpb.Checkpoint{Version: 1, NumShards: 1}); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	cases := []struct {
		name, cmd string
		args      []string
		code      int
		want      string
	}{
		{"evaluate without checkpoint", "evaluate", []string{"--model_def=fashion_mnist.mlp", test}, 2, "--checkpoint_dir_for_init: required"},
		{"predict without checkpoint", "predict", []string{"--model_def=fashion_mnist.mlp", pdata, "--prediction_outputs=" + filepath.Join(empty, "p.csv")}, 2, "--checkpoint_dir_for_init: required"},
		{"evaluate from an empty directory", "evaluate", []string{"--model_def=fashion_mnist.mlp", test, "--checkpoint_dir_for_init=" + empty}, 1, "no complete checkpoint"},
		{"evaluate from a missing directory", "evaluate", []string{"--model_def=fashion_mnist.mlp", test, "--checkpoint_dir_for_init=" + filepath.Join(empty, "nope")}, 1, "--checkpoint_dir_for_init"},
		{"evaluate a checkpoint of another model", "evaluate", []string{"--model_def=fashion_mnist.mlp", test, "--checkpoint_dir_for_init=" + ckpt}, 1, "does not fit model"},
		{"predict into a missing directory", "predict", []string{"--model_def=fashion_mnist.mlp", pdata, "--checkpoint_dir_for_init=" + ckpt, "--prediction_outputs=" + filepath.Join(empty, "nope", "p.csv")}, 1, "does not exist"},
		{"predict without outputs", "predict", []string{"--model_def=fashion_mnist.mlp", pdata, "--checkpoint_dir_for_init=" + ckpt}, 2, "--prediction_outputs: required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := startCmd(t, c.cmd, c.args...)
			code := j.wait(time.Minute)
			stderr := strings.TrimSpace(j.stderr.String())
			if code != c.code {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, c.code, stderr)
			}
			if n := strings.Count(stderr, "\n") + 1; n != 1 {
				t.Errorf("want one error line, got %d:\n%s", n, stderr)
			}
			if !strings.Contains(stderr, c.want) || !strings.HasPrefix(stderr, "elasticdl "+c.cmd+": ") {
				t.Errorf("stderr %q does not contain %q", stderr, c.want)
			}
			if _, err := os.Stat(filepath.Join(j.out, "job_summary.json")); err == nil {
				t.Errorf("a job ran")
			}
		})
	}
}

// TestPredictMasterKilled kills -9 the master of a predict job midway: the
// next master keeps the rows the dead one had made durable, drops any it
// wrote after its last persisted state, and the output is still exactly
// one row per record, in order, the same as a single-process forward pass.
func TestPredictMasterKilled(t *testing.T) {
	needData(t)
	spec, modelDir := initialCNN(t)
	s := predictKilling(t, spec, modelDir, filepath.Join(dataDir, "train-images-idx3-ubyte.gz"), "master", 1, 500*time.Millisecond)
	if s.MasterRestarts != 1 {
		t.Errorf("master_restarts %d, want 1", s.MasterRestarts)
	}
}
