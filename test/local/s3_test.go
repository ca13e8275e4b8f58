package local

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"elasticdl/data"
	"elasticdl/internal/master"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/storage"
	"elasticdl/internal/storage/storagetest"
)

// fromS3 evaluates and predicts with the model the job that returned s
// left in the checkpoint directory ckpt on S3 (its final checkpoint is the
// job's model, read back whole), and checks the model the job saved in
// ckpt/output is that one too.
func fromS3(t *testing.T, ckpt string, s master.Summary) {
	t.Helper()
	set, err := checkpoint.Load(ckpt, nil)
	if err != nil || set.Version != s.ModelVersion {
		t.Fatalf("newest whole checkpoint on S3: %v; the model is version %d", err, s.ModelVersion)
	}
	saved, err := checkpoint.Load(ckpt+"/output/model", nil)
	if err != nil || saved.Version != s.ModelVersion || s.ModelPath != checkpoint.Path(ckpt+"/output/model", s.ModelVersion, 0, 1) {
		t.Fatalf("the saved model on S3: %v; the summary's model %s, version %d", err, s.ModelPath, s.ModelVersion)
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

// TestS3TicdataParquet trains ctr.wide_and_deep on ticdata twice, side by
// side: from its CSV files, and from Parquet copies of them on S3 (the
// workers read row groups by ranged GETs). The two reach the same AUC;
// the throughput ratio is logged (bench/RESULTS.md has the figures).
func TestS3TicdataParquet(t *testing.T) {
	c := ticdataCase(t, "ctr.wide_and_deep", 2)
	store, loc := storagetest.Store(t)
	uris := map[string]string{}
	for name, uri := range map[string]string{"train": c.train, "test": c.test} {
		src, err := data.Open(uri)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, corrupt, err := data.ExportParquet(&b, src, 0, src.Len(), 0)
		src.Close()
		if err != nil || corrupt != 0 {
			t.Fatalf("export %s: %v, %d corrupt", uri, err, corrupt)
		}
		if err := storage.WriteAll(context.Background(), store, "ticdata/"+name+".parquet", b.Bytes()); err != nil {
			t.Fatal(err)
		}
		uris[name] = loc + "/ticdata/" + name + ".parquet"
	}
	run := func(train, test string) (float64, master.Summary) {
		s, _, _ := trainCTR(t, "--model_def=ctr.wide_and_deep", "--model_params="+c.ModelParams, "--optimizer="+c.Optimizer,
			"--training_data="+train, "--validation_data="+test, "--num_workers=2", "--num_epochs=2")
		if s.Status != "succeeded" || s.Eval == nil || s.Eval.AUC == nil || s.Eval.Records != c.TestRecords {
			t.Fatalf("%s: status %q (%s), eval %+v", train, s.Status, s.Error, s.Eval)
		}
		assertExactlyOnce(t, s, 2, c.TrainRecords)
		return *s.Eval.AUC, s
	}
	csvAUC, csv := run(c.train, c.test)
	pqAUC, pq := run(uris["train"], uris["test"])
	t.Logf("AUC: CSV %.4f, Parquet on S3 %.4f; training %.2f s / %.2f s: Parquet on S3 at %.2f× the records/s of local CSV",
		csvAUC, pqAUC, csv.TrainingSeconds, pq.TrainingSeconds, csv.TrainingSeconds/pq.TrainingSeconds)
	if pqAUC < 0.65 || math.Abs(pqAUC-csvAUC) > 0.02 {
		t.Errorf("AUC from Parquet on S3 %.4f, from CSV %.4f: want both ≥ 0.65 and within 0.02", pqAUC, csvAUC)
	}
}

// TestS3ParquetThroughput is a measurement, not a test (bench/RESULTS.md,
// "Parquet on S3"): ELASTICDL_S3_BENCH=N runs N side-by-side pairs of a
// 2-worker, 1-PS ctr.deepfm job on 200,000 generated records, from a
// local CSV file and from a Parquet copy on S3, and logs the ratio of
// their records/s over training.
func TestS3ParquetThroughput(t *testing.T) {
	pairs, _ := strconv.Atoi(os.Getenv("ELASTICDL_S3_BENCH"))
	if pairs < 1 {
		t.Skip("ELASTICDL_S3_BENCH=N runs N pairs")
	}
	store, loc := storagetest.Store(t)
	src, err := data.Open("synthetic-ctr://?records=200000&seed=1")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	csvPath := filepath.Join(t.TempDir(), "train.csv")
	var csv, pq bytes.Buffer
	schema, _, err := data.ExportCSV(&csv, src, 0, src.Len())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(csvPath, csv.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := data.ExportParquet(&pq, src, 0, src.Len(), 0); err != nil {
		t.Fatal(err)
	}
	if err := storage.WriteAll(context.Background(), store, "bench/train.parquet", pq.Bytes()); err != nil {
		t.Fatal(err)
	}
	uris := []string{"csv://" + csvPath + "?schema=" + schema, loc + "/bench/train.parquet"}
	for i := range pairs {
		var secs [2]float64
		for k, uri := range uris {
			s, _, _ := trainCTR(t, "--model_def=ctr.deepfm", "--training_data="+uri, "--validation_data=", "--num_workers=2", "--num_epochs=1")
			assertExactlyOnce(t, s, 1, 200000)
			secs[k] = s.TrainingSeconds
		}
		t.Logf("pair %d: training %.2f s from local CSV, %.2f s from Parquet on S3: %.2f× the records/s", i, secs[0], secs[1], secs[0]/secs[1])
	}
}

// TestS3Output trains with --output on S3: the model, the summary and the
// ONNX export are objects there, the logs and the master's state are in
// --work_dir, and evaluate reads the model back from the output prefix.
// A bucket that does not answer fails the job at start in one line.
func TestS3Output(t *testing.T) {
	needData(t)
	store, loc := storagetest.Store(t)
	test := filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz")
	work := t.TempDir()
	cmd := exec.Command(binary, "train", "--model_def=fashion_mnist.mlp", "--training_data="+test, "--validation_data="+test,
		"--num_workers=2", "--num_ps_pods=1", "--num_epochs=1", "--output="+loc+"/job", "--work_dir="+work, "--export_format=onnx")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("train: %v\n%s", err, b)
	}
	s, err := master.ReadSummary(loc + "/job")
	if err != nil || s.Status != "succeeded" || s.Eval == nil || !strings.HasPrefix(s.ModelPath, loc+"/job/model/version-") {
		t.Fatalf("summary on S3: %+v, %v", s, err)
	}
	for _, name := range []string{"job/job_summary.json", "job/model.onnx", fmt.Sprintf("job/model/version-%d/variables-0-of-1.ckpt", s.ModelVersion)} {
		if _, err := store.Stat(context.Background(), name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if logs, _ := filepath.Glob(filepath.Join(work, "logs", "worker-*.log")); len(logs) != 2 {
		t.Errorf("worker logs in --work_dir: %v", logs)
	}
	e := startCmd(t, "evaluate", "--model_def=fashion_mnist.mlp", "--validation_data="+test, "--checkpoint_dir_for_init="+loc+"/job")
	if code := e.wait(2 * time.Minute); code != 0 {
		t.Fatalf("evaluate: exit code %d\n%s", code, e.stderr.String())
	}
	if es := e.summary(); es.Eval == nil || math.Abs(es.Eval.Accuracy-s.Eval.Accuracy) > 1e-6 || es.ModelVersion != s.ModelVersion {
		t.Errorf("evaluate from %s/job: %+v; the job's: %+v", loc, es.Eval, s.Eval)
	}
	p := startCmd(t, "predict", "--model_def=fashion_mnist.mlp", "--prediction_data="+test, "--checkpoint_dir_for_init="+loc+"/job",
		"--prediction_outputs="+loc+"/pred/out.csv")
	if code := p.wait(2 * time.Minute); code != 0 {
		t.Fatalf("predict to S3: exit code %d\n%s", code, p.stderr.String())
	}
	if b, err := storage.ReadAll(context.Background(), store, "pred/out.csv"); err != nil || bytes.Count(b, []byte("\n")) != 10001 {
		t.Errorf("predictions on S3: %d lines, %v; want a header and 10000 rows", bytes.Count(b, []byte("\n")), err)
	}
	if b, err := exec.Command(binary, "export", "--model_def=fashion_mnist.mlp", "--checkpoint_dir_for_init="+loc+"/job",
		"--output="+loc+"/exported/model.onnx").CombinedOutput(); err != nil {
		t.Fatalf("export to S3: %v\n%s", err, b)
	}
	if _, err := store.Stat(context.Background(), "exported/model.onnx"); err != nil {
		t.Errorf("export to S3: %v", err)
	}
	bad := exec.Command(binary, "train", "--model_def=fashion_mnist.mlp", "--training_data="+test, "--num_workers=1",
		"--num_ps_pods=1", "--output=s3://no-such-bucket-elasticdl/job")
	b, err := bad.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if err == nil || len(lines) != 1 || !strings.Contains(lines[0], "--output: ") || !strings.Contains(lines[0], "no-such-bucket-elasticdl") {
		t.Errorf("a missing bucket: %v\n%s", err, b)
	}
}
