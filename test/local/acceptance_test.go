package local

import (
	"path/filepath"
	"testing"
	"time"
)

// TestAcceptance runs the README's job (fashion_mnist.cnn, 2 workers, 1 PS,
// 2 epochs) and the mlp for 3 epochs, and checks the accuracy the issue
// asks for and the exactly-once ledger.
func TestAcceptance(t *testing.T) {
	needData(t)
	if testing.Short() {
		t.Skip("trains two models on the full data set")
	}
	cases := []struct {
		model    string
		epochs   string
		accuracy float64
	}{
		{"fashion_mnist.cnn", "2", 0.88},
		{"fashion_mnist.mlp", "3", 0.86},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			j := startJob(t,
				"--model_def="+c.model,
				"--training_data="+filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
				"--validation_data="+filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"),
				"--num_workers=2", "--num_ps_pods=1", "--num_epochs="+c.epochs)
			if code := j.wait(10 * time.Minute); code != 0 {
				t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
			}
			s := j.summary()
			n := int(c.epochs[0] - '0')
			assertExactlyOnce(t, s, n, 60000)
			if s.Eval == nil {
				t.Fatal("no evaluation in summary")
			}
			t.Logf("%s %s epochs: accuracy %.4f, loss %.4f, %.0f records/s", c.model, c.epochs, s.Eval.Accuracy, s.Eval.Loss, s.RecordsPerSecond)
			if s.Eval.Accuracy < c.accuracy {
				t.Errorf("accuracy %.4f < %.2f", s.Eval.Accuracy, c.accuracy)
			}
		})
	}
}
