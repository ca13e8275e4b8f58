package local

import (
	"fmt"
	"math"
	"math/rand"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"elasticdl/data"
	"elasticdl/internal/export/onnxcheck"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/wire"
	"elasticdl/model"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

// TestExportONNX exports every image model (the zoo's and
// examples/declarative/*.yaml) from a checkpoint with `elasticdl export`,
// checks the file with python3-onnx's checker, and runs it in onnxruntime
// on the whole Fashion-MNIST test set: its probabilities are within 1e-5
// of `elasticdl predict`'s on the same checkpoint, and its accuracy is the
// same. The checkpoints hold each model's initial parameters (seed 3):
// the mapping, not the training, is under test.
func TestExportONNX(t *testing.T) {
	needData(t)
	tools := onnxcheck.Need(t, "../..")
	test := filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz")
	b := readAll(t, test)
	yamls, err := filepath.Glob("../../examples/declarative/*.yaml")
	if err != nil || len(yamls) == 0 {
		t.Fatalf("no YAML models: %v", err)
	}
	defs := []string{"fashion_mnist.mlp", "fashion_mnist.cnn", "fashion_mnist.cnn_wide"}
	for _, y := range yamls {
		abs, _ := filepath.Abs(y)
		defs = append(defs, abs)
	}
	for _, def := range defs {
		t.Run(filepath.Base(def), func(t *testing.T) {
			spec := exportSpec(t, def)
			dir := t.TempDir()
			modelDir := writeInitialModel(t, spec, dir)
			file := filepath.Join(dir, "model.onnx")
			if out, err := exec.Command(binary, "export", "--model_def="+def, "--checkpoint_dir_for_init="+modelDir, "--output="+file).CombinedOutput(); err != nil {
				t.Fatalf("export: %v\n%s", err, out)
			}
			if err := tools.Check(file); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "pred.csv")
			p := startCmd(t, "predict", "--model_def="+def, "--prediction_data="+test, "--checkpoint_dir_for_init="+modelDir, "--prediction_outputs="+out)
			if code := p.wait(3 * time.Minute); code != 0 {
				t.Fatalf("predict: exit code %d\nstderr:\n%s", code, p.stderr.String())
			}
			rows := readPredictions(t, out, spec.NumClasses)
			n := len(b.Labels)
			got, err := tools.Run(file, "probabilities", []onnxcheck.Input{{Name: "features", Dims: spec.BatchShape(n), Floats: b.Features}})
			if err != nil {
				t.Fatal(err)
			}
			compareProbs(t, rows, got, b.Labels, spec.NumClasses)
		})
	}
}

// TestExportONNXCTR exports wide & deep, DeepFM and xDeepFM from
// checkpoints whose tables hold the even ids of the first three quarters
// of the data's id space (random rows, as if trained), and compares
// onnxruntime with `elasticdl predict` on synthetic CTR records: both read
// every other id as zeros (predict's PS with --frozen_tables), so the
// probabilities agree within 1e-5, with the same accuracy and AUCs within
// 1e-5.
func TestExportONNXCTR(t *testing.T) {
	tools := onnxcheck.Need(t, "../..")
	const vocab, records = 40, 3000
	uri := fmt.Sprintf("synthetic-ctr://?records=%d&vocab=%d&seed=1", records, vocab)
	b := readAll(t, uri)
	for _, def := range []string{"ctr.wide_and_deep", "ctr.deepfm", "ctr.xdeepfm"} {
		t.Run(def, func(t *testing.T) {
			spec := zooSpec(t, def)
			dir := t.TempDir()
			modelDir := writeCTRModel(t, spec, dir, int64(spec.NumCategorical())*vocab)
			file := filepath.Join(dir, "model.onnx")
			if out, err := exec.Command(binary, "export", "--model_def="+def, "--checkpoint_dir_for_init="+modelDir, "--output="+file).CombinedOutput(); err != nil {
				t.Fatalf("export: %v\n%s", err, out)
			}
			compareCTR(t, tools, def, modelDir, file, uri, b)
		})
	}
}

// TestTrainExportONNXCTR trains ctr.deepfm on 20000 synthetic records with
// --export_format=onnx and compares OUTPUT/model.onnx in onnxruntime with
// `elasticdl predict` on the 5000 held-out records (many of whose ids the
// training never met): within 1e-5, the same accuracy, AUCs within 1e-5.
func TestTrainExportONNXCTR(t *testing.T) {
	tools := onnxcheck.Need(t, "../..")
	held := "synthetic-ctr://?records=5000&offset=20000&seed=1"
	j := startJob(t, "--model_def=ctr.deepfm", "--training_data=synthetic-ctr://?records=20000&seed=1",
		"--num_workers=2", "--num_ps_pods=2", "--num_epochs=1", "--export_format=onnx")
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	b := readAll(t, held)
	if auc := compareCTR(t, tools, "ctr.deepfm", filepath.Join(j.out, "model"), filepath.Join(j.out, "model.onnx"), held, b); auc < 0.6 {
		t.Errorf("held-out AUC %.4f: the model did not train", auc)
	}
}

// TestTrainExportONNXTicdata trains ctr.xdeepfm on ticdata (23 dense, 62
// categorical fields: --model_params) with --export_format=onnx and
// compares the file in onnxruntime with `elasticdl predict` on the 4000
// test records: within 1e-5, the same accuracy, AUCs within 1e-5.
func TestTrainExportONNXTicdata(t *testing.T) {
	tools := onnxcheck.Need(t, "../..")
	c := ticdataCase(t, "ctr.xdeepfm", 2)
	params := "--model_params=" + c.ModelParams
	j := startJob(t, "--model_def=ctr.xdeepfm", params, "--optimizer="+c.Optimizer, "--training_data="+c.train,
		"--num_workers=2", "--num_epochs=2", "--export_format=onnx")
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	b := readAll(t, c.test)
	if auc := compareCTR(t, tools, "ctr.xdeepfm", filepath.Join(j.out, "model"), filepath.Join(j.out, "model.onnx"), c.test, b, params); auc < 0.6 {
		t.Errorf("test AUC %.4f: the model did not train", auc)
	}
}

// compareCTR checks file, predicts uri with the model in modelDir and
// compares onnxruntime's probabilities on b (uri's records) with the
// predictions (extra: more predict flags); it returns onnxruntime's AUC.
func compareCTR(t *testing.T, tools onnxcheck.Tools, def, modelDir, file, uri string, b *data.Batch, extra ...string) float64 {
	t.Helper()
	if err := tools.Check(file); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pred.csv")
	p := startCmd(t, "predict", append([]string{"--model_def=" + def, "--prediction_data=" + uri, "--checkpoint_dir_for_init=" + modelDir, "--prediction_outputs=" + out}, extra...)...)
	if code := p.wait(3 * time.Minute); code != 0 {
		t.Fatalf("predict: exit code %d\nstderr:\n%s", code, p.stderr.String())
	}
	rows := readPredictions(t, out, 2)
	got, err := tools.Run(file, "probabilities", []onnxcheck.Input{
		{Name: "dense", Dims: []int{b.N, len(b.Features) / b.N}, Floats: b.Features},
		{Name: "ids", Dims: []int{b.N, b.NumCategorical}, Int64s: b.Categorical},
	})
	if err != nil {
		t.Fatal(err)
	}
	compareProbs(t, rows, got, b.Labels, 2)
	predScores, ortScores := make([]float64, len(rows)), make([]float64, len(rows))
	for i, r := range rows {
		predScores[i], ortScores[i] = r.probs[1], float64(got[2*i+1])
	}
	// Scores 1e-7 apart may swap two near-tied records: the AUCs agree to
	// 1e-5, not always to the last bit.
	pa, oa := data.AUC(predScores, b.Labels), data.AUC(ortScores, b.Labels)
	if math.Abs(pa-oa) > 1e-5 {
		t.Errorf("AUC: predict %.7f, onnxruntime %.7f", pa, oa)
	}
	t.Logf("AUC: predict %.7f, onnxruntime %.7f", pa, oa)
	return oa
}

// writeCTRModel writes spec's initial dense parameters (seed 3) and tables
// holding the even ids of [0, 3/4 space) with random rows as a training
// job's OUTPUT/model.
func writeCTRModel(t *testing.T, spec model.Spec, output string, space int64) string {
	t.Helper()
	c := &pserverpb.Checkpoint{Version: 7, NumShards: 1}
	rng := rand.New(rand.NewSource(3))
	for _, p := range spec.Build(rng).Params() {
		c.DenseParameters = append(c.DenseParameters, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
	}
	for _, e := range spec.Sparse.Tables() {
		et := &pserverpb.EmbeddingTableCheckpoint{Info: &pserverpb.EmbeddingTableInfo{Name: e.Table, Dim: int64(e.Dim), Initializer: e.Initializer}}
		for id := int64(0); id < space*3/4; id += 2 {
			et.Ids = append(et.Ids, id)
		}
		rows := make([]float32, len(et.Ids)*e.Dim)
		for i := range rows {
			rows[i] = 0.2 * (rng.Float32() - 0.5)
		}
		et.Values = wire.EncodeTensor(e.Table, []int{len(et.Ids), e.Dim}, rows)
		c.EmbeddingTables = append(c.EmbeddingTables, et)
	}
	dir := filepath.Join(output, "model")
	if _, err := checkpoint.Write(dir, c); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTrainExportONNX trains the cnn briefly (one epoch of the 10000 test
// records) with --export_format=onnx: the job writes OUTPUT/model.onnx,
// which the checker accepts and onnxruntime runs within 1e-5 of `elasticdl
// predict` on the trained model, with the same accuracy (well above
// chance: a trained model, not initial weights).
func TestTrainExportONNX(t *testing.T) {
	needData(t)
	tools := onnxcheck.Need(t, "../..")
	test := filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz")
	j := startJob(t, "--model_def=fashion_mnist.cnn", "--training_data="+test, "--num_workers=2", "--num_epochs=1", "--export_format=onnx")
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	file := filepath.Join(j.out, "model.onnx")
	if err := tools.Check(file); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pred.csv")
	p := startCmd(t, "predict", "--model_def=fashion_mnist.cnn", "--prediction_data="+test, "--checkpoint_dir_for_init="+j.out, "--prediction_outputs="+out)
	if code := p.wait(3 * time.Minute); code != 0 {
		t.Fatalf("predict: exit code %d\nstderr:\n%s", code, p.stderr.String())
	}
	b := readAll(t, test)
	got, err := tools.Run(file, "probabilities", []onnxcheck.Input{{Name: "features", Dims: []int{b.N, 28, 28, 1}, Floats: b.Features}})
	if err != nil {
		t.Fatal(err)
	}
	rows := readPredictions(t, out, 10)
	if acc := compareProbs(t, rows, got, b.Labels, 10); acc < 0.6 {
		t.Errorf("accuracy %.4f: the model did not train", acc)
	}
}

// compareProbs checks onnxruntime's probabilities against predict's rows:
// max absolute difference and accuracy, which it returns.
func compareProbs(t *testing.T, rows []predRow, got []float32, labels []int32, k int) float64 {
	t.Helper()
	if len(rows) != len(labels) || len(got) != len(labels)*k {
		t.Fatalf("%d predictions, %d onnxruntime values, %d records", len(rows), len(got), len(labels))
	}
	maxDiff, predCorrect, ortCorrect := 0.0, 0, 0
	for i, r := range rows {
		row := got[i*k : (i+1)*k]
		for c, p := range r.probs {
			maxDiff = math.Max(maxDiff, math.Abs(p-float64(row[c])))
		}
		if r.class == int(labels[i]) {
			predCorrect++
		}
		if nn.Argmax(row) == int(labels[i]) {
			ortCorrect++
		}
	}
	if !(maxDiff <= 1e-5) {
		t.Errorf("max |onnxruntime - predict| = %g, want <= 1e-5", maxDiff)
	}
	if predCorrect != ortCorrect {
		t.Errorf("accuracy: predict %d/%d, onnxruntime %d", predCorrect, len(rows), ortCorrect)
	}
	acc := float64(ortCorrect) / float64(len(rows))
	t.Logf("max |onnxruntime - predict| = %.3g over %d records; accuracy %.4f both", maxDiff, len(rows), acc)
	return acc
}

// exportSpec is the spec of a zoo name or a model file.
func exportSpec(t *testing.T, def string) model.Spec {
	t.Helper()
	if model.IsDeclarative(def) {
		s, err := model.LoadDeclarative(def)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return zooSpec(t, def)
}

// writeInitialModel writes spec's initial parameters (seed 3) as a
// training job's OUTPUT/model and returns that directory.
func writeInitialModel(t *testing.T, spec model.Spec, output string) string {
	t.Helper()
	c := &pserverpb.Checkpoint{Version: 7, NumShards: 1}
	for _, p := range spec.Build(rand.New(rand.NewSource(3))).Params() {
		c.DenseParameters = append(c.DenseParameters, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
	}
	dir := filepath.Join(output, "model")
	if _, err := checkpoint.Write(dir, c); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readAll reads every record of a data source.
func readAll(t *testing.T, uri string) *data.Batch {
	t.Helper()
	src, err := data.Open(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	b, err := src.Read(0, src.Len())
	if err != nil {
		t.Fatal(err)
	}
	return b
}
