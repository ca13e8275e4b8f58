package local

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/export/onnxcheck"
)

// exportPyTorch exports a PyTorch job's model (checkpoint) by elasticdl
// export --worker_command: the script, with elasticdl.connect() handing
// register() an exporter, writes it as its module's state_dict.
func exportPyTorch(t *testing.T, py, script, checkpoint, params string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.pt")
	cmd := exec.Command(binary, "export", "--worker_command="+py+" "+script, "--checkpoint_dir_for_init="+checkpoint,
		"--model_params="+params, "--output="+path)
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "elasticdl: exported ") {
		t.Fatalf("export: %v\n%s", err, b)
	}
	return path
}

// pyJSON runs a Python program and decodes the JSON it prints into v.
func pyJSON(t *testing.T, py, program string, v any, args ...string) {
	t.Helper()
	out, err := exec.Command(py, append([]string{"-c", program}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("python: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("python printed %q: %v", out, err)
	}
}

// exportedCNN: the example CNN's model exported to a state_dict, loaded
// into the script's own module with no job, classifies the test set with
// the training job's final accuracy to the record (minibatches of 64, as
// the workers evaluate).
func exportedCNN(t *testing.T, py, checkpoint string, accuracy float64) {
	t.Helper()
	path := exportPyTorch(t, py, pytorchExample, checkpoint, "")
	var got struct{ Correct, N int }
	pyJSON(t, py, `import json, sys, torch
sys.path.insert(0, "../../examples/pytorch")
from train import CNN
from elasticdl import data
m = CNN()
m.load_state_dict(torch.load(sys.argv[1]))
m.eval()
r = data.open_source(sys.argv[2]).read(0, 10000)
correct = 0
with torch.no_grad():
    for lo in range(0, len(r), 64):
        correct += int((m(torch.from_numpy(r.x[lo:lo + 64])).argmax(1).numpy() == r.y[lo:lo + 64]).sum())
print(json.dumps({"correct": correct, "n": len(r)}))`, &got, path, filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"))
	if got.N != 10000 || float64(got.Correct)/float64(got.N) != accuracy {
		t.Errorf("the exported CNN: %d of %d right, the job's accuracy %v", got.Correct, got.N, accuracy)
	}
}

// exportedCNNONNX: the example CNN's model exported to ONNX through
// torch.onnx (elasticdl export --worker_command --format=onnx) passes
// python3-onnx's checker, and onnxruntime's probabilities on the test set
// are elasticdl predict's (preds, from the same checkpoint).
func exportedCNNONNX(t *testing.T, py, checkpoint, preds string) {
	t.Helper()
	tools := onnxcheck.Need(t, "../..")
	test := filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz")
	file := filepath.Join(t.TempDir(), "cnn.onnx")
	cmd := exec.Command(binary, "export", "--worker_command="+py+" "+pytorchExample, "--checkpoint_dir_for_init="+checkpoint,
		"--format=onnx", "--data="+test, "--output="+file)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("export to ONNX: %v\n%s", err, b)
	}
	if err := tools.Check(file); err != nil {
		t.Fatal(err)
	}
	b := readAll(t, test)
	got, err := tools.Run(file, "probabilities", []onnxcheck.Input{{Name: "features", Dims: []int{b.N, 28, 28, 1}, Floats: b.Features}})
	if err != nil {
		t.Fatal(err)
	}
	acc := compareProbs(t, readPredictions(t, preds, 10), got, b.Labels, 10)
	t.Logf("the PyTorch CNN through torch.onnx in onnxruntime: accuracy %.4f, as elasticdl predict's", acc)
}

// TestPyTorchExportDeepFM: the PyTorch DeepFM trained on ticdata with its
// embedding tables on 2 PS, exported to a state_dict and loaded into the
// script's own module with no job: its probabilities on the test set are
// elasticdl predict's, on test rows of which 200 hold a value no training
// row has (ids the tables lack read zeros, as from a predict job's PS). A
// checkpoint of another model is refused by name.
func TestPyTorchExportDeepFM(t *testing.T) {
	py := pythonWithTorch(t)
	dir := ticdataDir(t)
	raw, err := os.ReadFile(filepath.Join(dir, "schema"))
	if err != nil {
		t.Fatal(err)
	}
	schema := strings.TrimSpace(string(raw))
	uri := func(part string) string {
		return "csv://" + filepath.Join(dir, part+".csv") + "?header=true&schema=" + schema
	}
	// The test set with a value no training row has in c1 of its first
	// 200 rows: ids the tables lack.
	header, rows := ticCSV(t, dir, "test")
	var b strings.Builder
	b.WriteString(strings.Join(header, ",") + "\n")
	for i, r := range rows {
		if i < 200 {
			r = append([]string(nil), r...)
			r[24] = fmt.Sprintf("novel %d", i)
		}
		b.WriteString(strings.Join(quoteCSV(r), ",") + "\n")
	}
	novel := filepath.Join(t.TempDir(), "test.csv")
	writeFile(t, novel, []byte(b.String()))
	novelURI := "csv://" + novel + "?header=true&schema=" + schema
	const script, params = "../../examples/pytorch/deepfm.py", "dense=23;fields=62"
	j := startJob(t, "--worker_command="+py+" "+script, "--model_params="+params, "--optimizer="+ticOptimizer,
		"--training_data="+uri("train"), "--validation_data="+uri("test"), "--num_workers=2", "--num_ps_pods=2", "--num_epochs=2")
	s := j.succeeded(5 * time.Minute)
	preds := filepath.Join(t.TempDir(), "p.csv")
	pr := exec.Command(binary, "predict", "--worker_command="+py+" "+script, "--model_params="+params, "--checkpoint_dir_for_init="+j.out,
		"--prediction_data="+novelURI, "--num_classes=2", "--prediction_outputs="+preds, "--num_workers=2", "--output="+t.TempDir())
	if b, err := pr.CombinedOutput(); err != nil {
		t.Fatalf("predict: %v\n%s", err, b)
	}
	path := exportPyTorch(t, py, script, filepath.Join(j.out, "model"), params)
	var got struct {
		N       int
		MaxDiff float64 `json:"max_diff"`
		Unseen  int
	}
	pyJSON(t, py, `import csv, json, sys, numpy as np, torch
sys.path.insert(0, "../../examples/pytorch")
from deepfm import DeepFM
from elasticdl import data
m = DeepFM(23, 62)
state = torch.load(sys.argv[1])
m.load_state_dict(state)
m.eval()
r = data.open_source(sys.argv[2]).read(0, 4000)
probs = []
with torch.no_grad():
    for lo in range(0, len(r), 64):
        probs.append(torch.softmax(m(torch.from_numpy(r.x[lo:lo + 64]), torch.from_numpy(r.ids[lo:lo + 64])), 1).numpy())
probs = np.concatenate(probs)
rows = list(csv.reader(open(sys.argv[3])))[1:]
want = np.array([[float(v) for v in row[2:]] for row in rows])
seen = state["embedding._extra_state"]["ids"].numpy()
print(json.dumps({"n": len(rows), "max_diff": float(np.abs(probs - want).max()),
                  "unseen": int((~np.isin(np.unique(r.ids), seen)).sum())}))`, &got, path, novelURI, preds)
	if got.N != 4000 || got.MaxDiff > 1e-6 || got.Unseen != 200 {
		t.Errorf("the exported DeepFM against elasticdl predict: %d rows, max abs difference %g, %d ids not in its tables (want 200)",
			got.N, got.MaxDiff, got.Unseen)
	}
	t.Logf("exported DeepFM: max abs difference %g from elasticdl predict over %d rows (%d test ids not in its tables); the job's AUC %.4f",
		got.MaxDiff, got.N, got.Unseen, *s.Eval.AUC)
	// Through torch.onnx, its tables as LabelEncoder and Gather: onnxruntime
	// gives elasticdl predict's probabilities, the unseen ids' included.
	tools := onnxcheck.Need(t, "../..")
	file := filepath.Join(t.TempDir(), "deepfm.onnx")
	ex := exec.Command(binary, "export", "--worker_command="+py+" "+script, "--model_params="+params,
		"--checkpoint_dir_for_init="+filepath.Join(j.out, "model"), "--format=onnx", "--data="+novelURI, "--output="+file)
	if out, err := ex.CombinedOutput(); err != nil {
		t.Fatalf("export to ONNX: %v\n%s", err, out)
	}
	if err := tools.Check(file); err != nil {
		t.Fatal(err)
	}
	rec := readAll(t, novelURI)
	probs, err := tools.Run(file, "probabilities", []onnxcheck.Input{{Name: "dense", Dims: []int{rec.N, 23}, Floats: rec.Features},
		{Name: "ids", Dims: []int{rec.N, 62}, Int64s: rec.Categorical}})
	if err != nil {
		t.Fatal(err)
	}
	compareProbs(t, readPredictions(t, preds, 2), probs, rec.Labels, 2)
	// The CNN example's module cannot take the DeepFM's checkpoint: one
	// line, and no file.
	other := filepath.Join(t.TempDir(), "cnn.pt")
	cmd := exec.Command(binary, "export", "--worker_command="+py+" "+pytorchExample, "--checkpoint_dir_for_init="+filepath.Join(j.out, "model"),
		"--output="+other)
	bout, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(bout), "holds no parameter 'conv1.weight': a checkpoint of another model?") || strings.Count(string(bout), "\n") != 1 {
		t.Errorf("the CNN from the DeepFM's checkpoint: %v\n%s", err, bout)
	}
	if _, err := os.Stat(other); err == nil {
		t.Error("a refused export wrote its file")
	}
}

// quoteCSV quotes the fields that hold a comma.
func quoteCSV(fields []string) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f
		if strings.ContainsAny(f, ",\"") {
			out[i] = `"` + strings.ReplaceAll(f, `"`, `""`) + `"`
		}
	}
	return out
}
