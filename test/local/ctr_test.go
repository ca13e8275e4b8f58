package local

import (
	"fmt"
	"math"
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
)

// ctrAcceptance are the generator parameters of the recommender
// acceptance data (besides records, offset and seed): the default
// generator (13 dense features, 26 fields of 10000 ids, three interacting
// field pairs) with Zipf exponent 2 instead of 1.1, so that the hottest id
// of a field is in half the records and the ids that carry the clicks are
// seen often enough to be learned from 1M records. On the default data an
// oracle that knows the hidden interactions exactly is still 0.016 below
// the ceiling at 1M records; on this data it is 0.002 below (data
// TestCTRLearnableBound, docs/recommenders.md).
const ctrAcceptance = "zipf=2"

// ctrAcceptanceOptimizer is the acceptance job's optimizer: the model's
// adagrad at half its learning rate, which three epochs over the same
// records favour (gap 0.010–0.014 on three held-out ranges, against
// 0.011–0.016 at the default 0.1).
const ctrAcceptanceOptimizer = "adagrad:learning_rate=0.05,initial_accumulator_value=0.001"

// ctrURI is the synthetic CTR data of the recommender tests: seed 1's
// hidden model with the generator parameters params ("" for the
// defaults), the first n records.
func ctrURI(params string, n int64) string {
	return fmt.Sprintf("synthetic-ctr://?records=%d&seed=1", n) + withParams(params)
}

// heldOutURI is the held records that follow the first train ones, of the
// same hidden model: the validation data of the recommender tests.
func heldOutURI(params string, train, held int64) string {
	return fmt.Sprintf("synthetic-ctr://?records=%d&offset=%d&seed=1", held, train) + withParams(params)
}

func withParams(params string) string {
	if params == "" {
		return ""
	}
	return "&" + params
}

const ctrHeld = 20_000

// ctrCeiling is the AUC of the true click probability on the held-out
// records: what a perfect model would reach on them.
func ctrCeiling(t *testing.T, params string, train int64) float64 {
	t.Helper()
	g, err := data.OpenSyntheticCTR(heldOutURI(params, train, ctrHeld))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	return data.CeilingAUC(g, ctrHeld)
}

func envInt64(t *testing.T, name string, def int64) int64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

// ctrArgs trains model with 2 workers and 2 PS on records [0, train) of
// the data of params, in minibatches of 256 (extra may override it),
// evaluating on the next ctrHeld records.
func ctrArgs(model, params string, train, epochs int64, extra ...string) []string {
	return append([]string{"--model_def=" + model, "--training_data=" + ctrURI(params, train),
		"--validation_data=" + heldOutURI(params, train, ctrHeld),
		"--num_workers=2", "--num_ps_pods=2", "--num_epochs=" + strconv.FormatInt(epochs, 10), "--minibatch_size=256"}, extra...)
}

// trainCTR runs a training job to completion and returns its summary, its
// output directory and its training time.
func trainCTR(t *testing.T, args ...string) (master.Summary, string, time.Duration) {
	t.Helper()
	start := time.Now()
	j := startJob(t, args...)
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("train exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	return j.summary(), j.out, time.Since(start)
}

// finalAUC is the AUC of the final evaluation, which must also be the last
// entry of the evaluation history.
func finalAUC(t *testing.T, s master.Summary) float64 {
	t.Helper()
	if s.Status != "succeeded" || s.Eval == nil || s.Eval.AUC == nil || len(s.Evaluations) == 0 {
		t.Fatalf("summary: status %q (%s), eval %+v, evaluations %+v", s.Status, s.Error, s.Eval, s.Evaluations)
	}
	last := s.Evaluations[len(s.Evaluations)-1]
	if !last.Final || last.AUC == nil || *last.AUC != *s.Eval.AUC || s.Eval.Records != ctrHeld {
		t.Errorf("final evaluation %+v does not match eval %+v (auc %v)", last, s.Eval, *s.Eval.AUC)
	}
	return *s.Eval.AUC
}

// TestDeepFMAUC is the recommender acceptance test: ctr.deepfm with 2
// workers and 2 PS on records [0, 1M) of the acceptance data
// (ctrAcceptance), 3 epochs in minibatches of 512 with
// ctrAcceptanceOptimizer, evaluated during the job on the next 20000
// records; the AUC the master aggregates must be within 0.02 of the
// ceiling (the true click probability's AUC on the same records). Then `elasticdl evaluate` of the
// saved OUTPUT/model (PS shards with the embedding tables) must give the
// same AUC.
//
// ELASTICDL_CTR_DATA (generator parameters, "default" for the bare
// generator's), ELASTICDL_CTR_RECORDS, ELASTICDL_CTR_EPOCHS,
// ELASTICDL_CTR_MINIBATCH and ELASTICDL_CTR_OPTIMIZER ("model" for the
// model's own) override the job for measurements; the gap is then only
// checked against a loose 0.12.
func TestDeepFMAUC(t *testing.T) {
	params := ctrAcceptance
	if v, ok := os.LookupEnv("ELASTICDL_CTR_DATA"); ok {
		params = v
		if v == "default" {
			params = ""
		}
	}
	train := envInt64(t, "ELASTICDL_CTR_RECORDS", 1_000_000)
	epochs := envInt64(t, "ELASTICDL_CTR_EPOCHS", 3)
	batch := envInt64(t, "ELASTICDL_CTR_MINIBATCH", 512)
	extra := []string{"--minibatch_size=" + strconv.FormatInt(batch, 10)}
	opt := ctrAcceptanceOptimizer
	if v := os.Getenv("ELASTICDL_CTR_OPTIMIZER"); v != "" {
		opt = v
	}
	if opt != "model" {
		extra = append(extra, "--optimizer="+opt)
	}
	acceptance := params == ctrAcceptance && train == 1_000_000 && epochs == 3 && batch == 512 && opt == ctrAcceptanceOptimizer

	s, out, took := trainCTR(t, ctrArgs("ctr.deepfm", params, train, epochs, extra...)...)
	assertExactlyOnce(t, s, int(epochs), train)
	auc, ceiling := finalAUC(t, s), ctrCeiling(t, params, train)
	gap := ceiling - auc
	t.Logf("ctr.deepfm on %s, %d epochs of minibatches of %d, optimizer %s, 2 workers, 2 PS: held-out AUC %.4f, ceiling %.4f, gap %.4f; job %.1fs, training %.1fs (%.0f records/s)",
		ctrURI(params, train), epochs, batch, opt, auc, ceiling, gap, took.Seconds(), s.TrainingSeconds, s.RecordsPerSecond)

	// The saved model is every PS shard with its embedding rows.
	model := filepath.Join(out, "model")
	set, err := checkpoint.Load(model, nil)
	if err != nil || set.NumShards != 2 || s.ModelPath != checkpoint.VersionDir(model, set.Version) {
		t.Fatalf("saved model %s (summary %q): %+v, %v", model, s.ModelPath, set, err)
	}
	for i, sh := range set.Shards {
		if len(sh.GetEmbeddingTables()) != 2 {
			t.Errorf("model shard %d has %d embedding tables, want 2", i, len(sh.GetEmbeddingTables()))
		}
	}
	e := startCmd(t, "evaluate", "--model_def=ctr.deepfm", "--checkpoint_dir_for_init="+model,
		"--validation_data="+heldOutURI(params, train, ctrHeld), "--num_workers=2", "--num_ps_pods=2")
	if code := e.wait(3 * time.Minute); code != 0 {
		t.Fatalf("evaluate exit code %d\nstderr:\n%s", code, e.stderr.String())
	}
	if got := finalAUC(t, e.summary()); math.Abs(got-auc) > 1e-4 {
		t.Errorf("evaluate of OUTPUT/model: AUC %.6f, the training job's final evaluation %.6f", got, auc)
	}

	// The 0.02 on the acceptance data. Other data and jobs are
	// measurements (the default data's gap is about 0.057 at 1M records,
	// see docs/recommenders.md): only a loose sanity bound.
	maxGap := 0.12
	if acceptance {
		maxGap = 0.02
	}
	if gap > maxGap {
		t.Errorf("held-out AUC %.4f is %.4f below the ceiling %.4f, want within %.2f", auc, gap, ceiling, maxGap)
	}
}

// TestXDeepFM trains ctr.xdeepfm (CIN + linear + DNN) like deepfm on 100k
// records, then predicts the held-out records from OUTPUT/model: one row
// per record, and the AUC of the predicted click probabilities matches the
// job's final evaluation.
func TestXDeepFM(t *testing.T) {
	const train = 100_000
	s, out, took := trainCTR(t, ctrArgs("ctr.xdeepfm", "", train, 1)...)
	assertExactlyOnce(t, s, 1, train)
	auc, ceiling := finalAUC(t, s), ctrCeiling(t, "", train)
	t.Logf("ctr.xdeepfm, %d records: held-out AUC %.4f, ceiling %.4f, gap %.4f; job %.1fs (%.0f training records/s)",
		train, auc, ceiling, ceiling-auc, took.Seconds(), s.RecordsPerSecond)
	if ceiling-auc > 0.12 {
		t.Errorf("held-out AUC %.4f, ceiling %.4f: more than 0.12 below", auc, ceiling)
	}
	pred := filepath.Join(t.TempDir(), "pred.csv")
	p := startCmd(t, "predict", "--model_def=ctr.xdeepfm", "--prediction_data="+heldOutURI("", train, ctrHeld),
		"--checkpoint_dir_for_init="+filepath.Join(out, "model"), "--prediction_outputs="+pred,
		"--num_workers=2", "--num_ps_pods=1", "--minibatch_size=1024")
	if code := p.wait(3 * time.Minute); code != 0 {
		t.Fatalf("predict exit code %d\nstderr:\n%s", code, p.stderr.String())
	}
	rows := readPredictions(t, pred, 2)
	if len(rows) != ctrHeld {
		t.Fatalf("%d predictions, want %d", len(rows), ctrHeld)
	}
	g, err := data.OpenSyntheticCTR(heldOutURI("", train, ctrHeld))
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.Read(0, ctrHeld)
	if err != nil {
		t.Fatal(err)
	}
	scores := make([]float64, ctrHeld)
	for k, r := range rows {
		scores[k] = r.probs[1]
	}
	// Exact AUC of the CSV's probabilities (6 digits) against the master's
	// histogram AUC: equal to well within 1e-3.
	if got := data.AUC(scores, b.Labels); math.Abs(got-auc) > 1e-3 {
		t.Errorf("AUC of the predictions from OUTPUT/model (re-sharded to 1 PS) %.5f, final evaluation %.5f", got, auc)
	}
}

// TestDeepFMPSKilled kills -9 a PS in the middle of a deepfm job with
// checkpoints: the relaunched PS restores the newest complete checkpoint,
// the job finishes with an AUC within 0.01 of the same job undisturbed,
// and the summary records the loss and the restore.
func TestDeepFMPSKilled(t *testing.T) {
	const train = 300_000
	args := func(ckpt string) []string {
		return ctrArgs("ctr.deepfm", "", train, 1, "--checkpoint_dir="+ckpt, "--checkpoint_steps=50")
	}
	base, _, _ := trainCTR(t, args(t.TempDir())...)
	baseAUC := finalAUC(t, base)
	if base.PS.Lost != 0 || len(base.PS.Restores) != 0 {
		t.Errorf("undisturbed job: ps %+v", base.PS)
	}

	ckpt := t.TempDir()
	j := startJob(t, args(ckpt)...)
	var ps []int
	var complete int64
	waitFor(t, 3*time.Minute, "training progress and a checkpoint", func() bool {
		_, done := j.epochRecordsDone()
		ps = j.children("ps")
		set, err := checkpoint.Load(ckpt, nil)
		if err != nil {
			return false
		}
		complete = set.Version
		return done >= train/3 && len(ps) == 2
	})
	// The PS with the lower pid is the first launched: ps-0.
	victim := min(ps[0], ps[1])
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed a PS (pid %d) with version %d checkpointed", victim, complete)
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	s := j.summary()
	assertExactlyOnce(t, s, 1, train)
	auc := finalAUC(t, s)
	t.Logf("AUC: undisturbed %.4f, PS killed %.4f; ps %+v", baseAUC, auc, s.PS)
	if math.Abs(auc-baseAUC) > 0.01 {
		t.Errorf("AUC %.4f with a PS killed, %.4f without: more than 0.01 apart", auc, baseAUC)
	}
	if s.PS.Lost != 1 || s.PS.Relaunched != 1 || len(s.PS.Restores) != 1 {
		t.Fatalf("ps %+v: want 1 lost, 1 relaunched, 1 restore", s.PS)
	}
	if r := s.PS.Restores[0]; r.Version < complete || r.Version%50 != 0 || r.Dir != checkpoint.VersionDir(ckpt, r.Version) {
		t.Errorf("restore %+v: want a version of %s that is a multiple of 50 and >= %d", r, ckpt, complete)
	}
}

// TestDeepFMReshardPS: ctr.deepfm, whose embedding rows live on the PS
// by id mod the number of shards, re-sharded 1 → 3 → 2 PS while training
// (`elasticdl scale --ps`): rows, their Adagrad slots and the dense
// parameters move at each change, every record is trained exactly once,
// and the AUC is within 0.01 of the same job on 1 PS throughout.
func TestDeepFMReshardPS(t *testing.T) {
	const train = 300_000
	args := ctrArgs("ctr.deepfm", "", train, 1, "--num_ps_pods=1")
	base, _, _ := trainCTR(t, args...)
	baseAUC := finalAUC(t, base)

	j := startJob(t, args...)
	scaleAt := func(records int64, ps string) {
		t.Helper()
		waitFor(t, 3*time.Minute, "training progress", func() bool {
			_, done := j.epochRecordsDone()
			return done >= records
		})
		scaleLocal(t, j, "--ps="+ps)
	}
	scaleAt(train/4, "3")
	waitFor(t, time.Minute, "3 PS", func() bool { return strings.Count(j.stderr.String(), "msg=re-sharded") == 1 })
	scaleAt(train/2, "2")
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	s := j.summary()
	assertExactlyOnce(t, s, 1, train)
	auc := finalAUC(t, s)
	t.Logf("AUC: 1 PS %.4f, re-sharded 1 → 3 → 2 %.4f; re-shards %+v", baseAUC, auc, s.PS.Reshards)
	if math.Abs(auc-baseAUC) > 0.01 {
		t.Errorf("AUC %.4f re-sharded, %.4f on 1 PS: more than 0.01 apart", auc, baseAUC)
	}
	if p := s.PS; p.Lost != 0 || len(p.Reshards) != 2 || p.Reshards[0].To != 3 || p.Reshards[1].To != 2 {
		t.Errorf("summary PS %+v: want 1 → 3 → 2, none lost", p)
	}
}

// TestTicdataModelParams trains ctr.wide_and_deep on ticdata (the real
// data set of hack/ticdata.sh) with the --model_params that fit it, then
// evaluates the saved model: with the same parameters it gives the
// training job's final AUC; without them the job fails before launching
// anything, naming --model_params.
func TestTicdataModelParams(t *testing.T) {
	c := ticdataCase(t, "ctr.wide_and_deep", 2)
	params := "--model_params=" + c.ModelParams
	s, out, _ := trainCTR(t, "--model_def=ctr.wide_and_deep", params, "--optimizer="+c.Optimizer,
		"--training_data="+c.train, "--validation_data="+c.test, "--num_workers=2", "--num_epochs=2")
	if s.Status != "succeeded" || s.Eval == nil || s.Eval.AUC == nil || s.ModelParams != "dense=23;fields=62" {
		t.Fatalf("summary: status %q (%s), eval %+v, model_params %q", s.Status, s.Error, s.Eval, s.ModelParams)
	}
	if auc := *s.Eval.AUC; auc < 0.65 || s.Eval.Records != c.TestRecords {
		t.Errorf("final AUC %.4f on %d records: want at least 0.65 on %d", auc, s.Eval.Records, c.TestRecords)
	}
	model := filepath.Join(out, "model")
	e := startCmd(t, "evaluate", "--model_def=ctr.wide_and_deep", params, "--checkpoint_dir_for_init="+model, "--validation_data="+c.test)
	if code := e.wait(3 * time.Minute); code != 0 {
		t.Fatalf("evaluate exit code %d\nstderr:\n%s", code, e.stderr.String())
	}
	if es := e.summary(); es.Eval == nil || es.Eval.AUC == nil || math.Abs(*es.Eval.AUC-*s.Eval.AUC) > 1e-4 {
		t.Errorf("evaluate with %s: eval %+v, want the training job's AUC %.6f", params, es.Eval, *s.Eval.AUC)
	}
	bad := startCmd(t, "evaluate", "--model_def=ctr.wide_and_deep", "--checkpoint_dir_for_init="+model, "--validation_data="+c.test)
	if code := bad.wait(time.Minute); code != 1 || !strings.Contains(bad.stderr.String(), "model ctr.wide_and_deep expects [13] (--model_params: dense=N") {
		t.Errorf("evaluate without --model_params: exit %d, stderr:\n%s", code, bad.stderr.String())
	}
}
