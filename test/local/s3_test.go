package local

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"elasticdl/internal/master"
	"elasticdl/internal/ps/checkpoint"
)

// fromS3 evaluates and predicts with the model the job that returned s
// left in the checkpoint directory ckpt on S3: the final checkpoint is the
// job's model, read back whole.
func fromS3(t *testing.T, ckpt string, s master.Summary) {
	t.Helper()
	set, err := checkpoint.Load(ckpt, nil)
	if err != nil || set.Version != s.ModelVersion {
		t.Fatalf("newest whole checkpoint on S3: %+v, %v; the model is version %d", set, err, s.ModelVersion)
	}
	test := filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz")
	e := startCmd(t, "evaluate", "--model_def=fashion_mnist.mlp", "--validation_data="+test, "--checkpoint_dir_for_init="+ckpt)
	if code := e.wait(2 * time.Minute); code != 0 {
		t.Fatalf("evaluate from %s: exit code %d\nstderr:\n%s", ckpt, code, e.stderr.String())
	}
	es := e.summary()
	if es.Eval == nil || es.Eval.Records != 10000 || es.ModelVersion != s.ModelVersion {
		t.Fatalf("evaluate from %s: summary %+v, eval %+v", ckpt, es, es.Eval)
	}
	if math.Abs(es.Eval.Accuracy-s.Eval.Accuracy) > 1e-6 {
		t.Errorf("evaluate from %s: accuracy %.6f; the training job's final: %.6f", ckpt, es.Eval.Accuracy, s.Eval.Accuracy)
	}
	out := filepath.Join(t.TempDir(), "pred.csv")
	p := startCmd(t, "predict", "--model_def=fashion_mnist.mlp", "--prediction_data="+test, "--checkpoint_dir_for_init="+ckpt, "--prediction_outputs="+out)
	if code := p.wait(2 * time.Minute); code != 0 {
		t.Fatalf("predict from %s: exit code %d\nstderr:\n%s", ckpt, code, p.stderr.String())
	}
	if rows := readPredictions(t, out, 10); len(rows) != 10000 {
		t.Errorf("predict from %s: %d rows, want 10000", ckpt, len(rows))
	}
}
