package local

import (
	be "encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/tfevents"
)

// smallFashionMNIST writes the first n records of a Fashion-MNIST set
// (prefix "train" or "t10k") as IDX files of their own, and returns the
// images file's path: a short job with real data.
func smallFashionMNIST(t *testing.T, dir, prefix string, n int) string {
	t.Helper()
	images := gunzipPrefix(t, filepath.Join(dataDir, prefix+"-images-idx3-ubyte.gz"), 16+784*int64(n))
	labels := gunzipPrefix(t, filepath.Join(dataDir, prefix+"-labels-idx1-ubyte.gz"), 8+int64(n))
	be.BigEndian.PutUint32(images[4:8], uint32(n))
	be.BigEndian.PutUint32(labels[4:8], uint32(n))
	path := filepath.Join(dir, prefix+"-images-idx3-ubyte")
	writeFile(t, path, images)
	writeFile(t, filepath.Join(dir, prefix+"-labels-idx1-ubyte"), labels)
	return path
}

// TestTensorBoardEvents: the TensorBoard files of a 2-epoch job hold the
// loss and accuracy series with the right steps (issue 29, item 4): one
// loss point per training task and one accuracy point per evaluation
// pass, on the model version axis, the last of each at the final version.
func TestTensorBoardEvents(t *testing.T) {
	needData(t)
	const train, perTask = 12000, 64 * 8
	data := t.TempDir()
	tbDir := filepath.Join(t.TempDir(), "tb")
	j := startJob(t, "--model_def=fashion_mnist.mlp",
		"--training_data="+smallFashionMNIST(t, data, "train", train),
		"--validation_data="+smallFashionMNIST(t, data, "t10k", 2000),
		"--num_workers=2", "--num_ps_pods=1", "--num_epochs=2", "--evaluation_steps=100",
		"--tensorboard_log_dir="+tbDir)
	s := j.succeeded(3 * time.Minute)
	files, _ := filepath.Glob(filepath.Join(tbDir, "*"))
	if len(files) != 1 || !strings.HasPrefix(filepath.Base(files[0]), "events.out.tfevents.") {
		t.Fatalf("files in the log dir: %v", files)
	}
	scalars, err := tfevents.ReadScalars(tbDir)
	if err != nil {
		t.Fatal(err)
	}
	series := map[string][]tfevents.Scalar{}
	for _, sc := range scalars {
		series[sc.Tag] = append(series[sc.Tag], sc)
	}
	loss, acc := series["train/loss"], series["eval/accuracy"]
	tasks := 2 * ((train + perTask - 1) / perTask)
	if len(loss) != tasks {
		t.Fatalf("%d loss points, want one per training task: %d", len(loss), tasks)
	}
	for i, p := range loss {
		if i > 0 && p.Step < loss[i-1].Step || math.IsNaN(p.Value) || p.Value <= 0 {
			t.Fatalf("loss point %d: %+v after %+v", i, p, loss[max(i-1, 0)])
		}
	}
	if len(s.Evaluations) < 2 || len(acc) != len(s.Evaluations) || len(series["eval/loss"]) != len(acc) {
		t.Fatalf("%d accuracy and %d eval loss points for the passes %+v", len(acc), len(series["eval/loss"]), s.Evaluations)
	}
	for i, e := range s.Evaluations {
		if acc[i].Step != e.Version || math.Abs(acc[i].Value-e.Accuracy) > 1e-6 {
			t.Errorf("accuracy point %d %+v, pass %+v", i, acc[i], e)
		}
		if i > 0 && acc[i].Step <= acc[i-1].Step {
			t.Errorf("accuracy steps not increasing: %+v", acc)
		}
	}
	final := acc[len(acc)-1]
	if s.Eval == nil || math.Abs(final.Value-s.Eval.Accuracy) > 1e-6 {
		t.Errorf("last accuracy %+v, summary's eval %+v", final, s.Eval)
	}
	if last := loss[len(loss)-1]; last.Step != final.Step || final.Step > s.ModelVersion || final.Step < int64(tasks) {
		t.Errorf("last loss step %d, last accuracy step %d: want both the final version (model version %d)", last.Step, final.Step, s.ModelVersion)
	}
	if len(series["job/workers_running"]) == 0 || len(series["job/ps_running"]) == 0 {
		t.Errorf("no job gauges; tags: %v", keys(series))
	}
	t.Logf("%d loss points to step %d, accuracy %v, tags %v", len(loss), loss[len(loss)-1].Step, acc, keys(series))
}

func keys(m map[string][]tfevents.Scalar) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
