package local

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/master"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/storage/storagetest"
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

// TestS3BadCheckpointDir: a checkpoint directory on S3 that cannot work
// fails the job at start, before anything is launched, with one line
// naming what is wrong.
func TestS3BadCheckpointDir(t *testing.T) {
	needData(t)
	good := storagetest.Location(t)
	bucket := strings.SplitN(strings.TrimPrefix(good, "s3://"), "/", 2)[0]
	for _, c := range []struct {
		name, dir, want string
		env             []string
	}{
		{"no such bucket", "s3://no-such-bucket-elasticdl/ckpt", "s3://no-such-bucket-elasticdl: no such bucket", nil},
		{"no bucket", "s3:///ckpt", "no bucket (want s3://bucket/prefix)", nil},
		{"a query", good + "?region=x", "nothing after the prefix", nil},
		{"wrong secret", good, "s3://" + bucket + ": access denied", []string{"AWS_SECRET_ACCESS_KEY=wrong"}},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			out := t.TempDir()
			cmd := exec.Command(binary, "train", "--model_def=fashion_mnist.mlp",
				"--training_data="+filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"), "--num_workers=1", "--num_ps_pods=1",
				"--output="+out, "--checkpoint_dir="+c.dir, "--checkpoint_steps=10")
			cmd.Env = append(os.Environ(), c.env...)
			b, err := cmd.CombinedOutput()
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if err == nil || len(lines) != 1 || !strings.Contains(lines[0], "--checkpoint_dir: ") || !strings.Contains(lines[0], c.want) {
				t.Fatalf("%v; output:\n%s\nwant one line with --checkpoint_dir: and %q", err, b, c.want)
			}
			if logs, _ := filepath.Glob(filepath.Join(out, "logs", "*-*.log")); len(logs) != 0 {
				t.Errorf("launched %v before failing", logs)
			}
		})
	}
}
