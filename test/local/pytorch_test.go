package local

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"elasticdl/data"
	"elasticdl/internal/proctest"
	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// The PyTorch example's script, from this package's directory.
const pytorchExample = "../../examples/pytorch/train.py"

// pythonWithTorch is an interpreter that has what the Python SDK needs
// (Debian: python3-torch python3-grpcio python3-protobuf), with the SDK
// on its path. Without one the test is skipped — or fails where
// ELASTICDL_REQUIRE_PYTORCH=1 (CI installs the packages).
func pythonWithTorch(t *testing.T) string {
	t.Helper()
	sdk, err := filepath.Abs("../../python")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", sdk)
	for _, py := range []string{os.Getenv("ELASTICDL_PYTHON"), "/usr/bin/python3", "python3"} {
		if py == "" {
			continue
		}
		if err := exec.Command(py, "-c", "import torch, grpc, google.protobuf, elasticdl").Run(); err == nil {
			return py
		}
	}
	msg := "no python3 with torch, grpc and protobuf (apt-get install python3-torch python3-grpcio python3-protobuf)"
	if os.Getenv("ELASTICDL_REQUIRE_PYTORCH") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// pytorchJob is the example's job: 2 Python workers, 1 PS, 2 epochs.
func pytorchJob(py string, extra ...string) []string {
	return append([]string{
		"--worker_command=" + py + " " + pytorchExample,
		"--optimizer=adam:learning_rate=0.002",
		"--training_data=" + filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
		"--validation_data=" + filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"),
		"--num_workers=2", "--num_ps_pods=1", "--num_epochs=2",
	}, extra...)
}

// pythonWorkers are the job's worker processes running script.
func (j *job) pythonWorkers(script string) []int {
	var pids []int
	for _, in := range proctest.Children(j.cmd.Process.Pid, script) {
		pids = append(pids, in.Pid)
	}
	return pids
}

// TestPyTorchFashionMNIST trains the example's CNN with two Python workers
// and one PS, then evaluates and predicts with the model it wrote, through
// the same script.
func TestPyTorchFashionMNIST(t *testing.T) {
	needData(t)
	py := pythonWithTorch(t)
	j := startJob(t, pytorchJob(py)...)
	s := j.succeeded(10 * time.Minute)
	assertExactlyOnce(t, s, 2, 60000)
	if s.Eval == nil || s.Eval.Records != 10000 || s.Eval.Accuracy < 0.88 {
		t.Fatalf("eval = %+v, want 10000 records and accuracy >= 0.88", s.Eval)
	}
	t.Logf("test accuracy %.4f after 2 epochs (model version %d)", s.Eval.Accuracy, s.ModelVersion)
	// 938 minibatches an epoch (117 tasks of 8, one of 2): the PS applied
	// each once.
	if s.ModelVersion != 2*938 || s.WorkerCommand == "" {
		t.Errorf("model version %d, want %d; worker command %q", s.ModelVersion, 2*938, s.WorkerCommand)
	}
	if s.Workers.Launched != 2 || s.Workers.Lost != 0 {
		t.Errorf("workers %+v", s.Workers)
	}

	// The written model, evaluated by the same script: the same accuracy.
	model := filepath.Join(j.out, "model")
	out := t.TempDir()
	ev := exec.Command(binary, "evaluate", "--worker_command="+py+" "+pytorchExample, "--checkpoint_dir_for_init="+model,
		"--validation_data="+filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"), "--num_workers=1", "--output="+out)
	if b, err := ev.CombinedOutput(); err != nil {
		t.Fatalf("evaluate: %v\n%s", err, b)
	}
	es := (&job{t: t, out: out}).summary()
	if es.Eval == nil || es.Eval.Accuracy != s.Eval.Accuracy || es.Eval.Records != 10000 {
		t.Errorf("evaluate job: %+v, want the training job's final accuracy %v", es.Eval, s.Eval.Accuracy)
	}

	// Predict: a row per record, in input order, as accurate as evaluation.
	preds := filepath.Join(out, "predictions.csv")
	pr := exec.Command(binary, "predict", "--worker_command="+py+" "+pytorchExample, "--checkpoint_dir_for_init="+j.out,
		"--prediction_data="+filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"), "--num_classes=10",
		"--prediction_outputs="+preds, "--num_workers=2", "--output="+t.TempDir())
	if b, err := pr.CombinedOutput(); err != nil {
		t.Fatalf("predict: %v\n%s", err, b)
	}
	labels := gunzipPrefix(t, filepath.Join(dataDir, "t10k-labels-idx1-ubyte.gz"), 8+10000)[8:]
	f, err := os.Open(preds)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	rows, correct := 0, 0
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ",")
		idx, _ := strconv.Atoi(fields[0])
		class, _ := strconv.Atoi(fields[1])
		if idx != rows || len(fields) != 12 {
			t.Fatalf("row %d: %q: want index %d and 10 probabilities", rows, sc.Text(), rows)
		}
		if class == int(labels[idx]) {
			correct++
		}
		rows++
	}
	if rows != 10000 || float64(correct)/10000 != s.Eval.Accuracy {
		t.Errorf("predictions: %d rows, accuracy %.4f; want 10000 and the evaluation's %.4f", rows, float64(correct)/10000, s.Eval.Accuracy)
	}
	exportedCNN(t, py, model, s.Eval.Accuracy)
	exportedCNNONNX(t, py, model, preds)
}

// TestPyTorchWorkerKilledTwice kills a Python worker twice (kill -9) while
// it trains: the job finishes, every record is trained once per epoch, the
// PS applied each minibatch once, and the accuracy holds.
func TestPyTorchWorkerKilledTwice(t *testing.T) {
	needData(t)
	py := pythonWithTorch(t)
	j := startJob(t, pytorchJob(py, "--relaunch_on_worker_failure=2")...)
	j.killWorkers(2, 12000, func() []int { return j.pythonWorkers(pytorchExample) })
	s := j.succeeded(10 * time.Minute)
	assertExactlyOnce(t, s, 2, 60000)
	if s.Workers.Lost != 2 || s.Workers.Relaunched != 2 {
		t.Errorf("workers %+v, want 2 lost and 2 relaunched", s.Workers)
	}
	if s.ModelVersion != 2*938 {
		t.Errorf("model version %d, want %d: minibatches applied twice or missed", s.ModelVersion, 2*938)
	}
	if s.Eval == nil || s.Eval.Accuracy < 0.88 {
		t.Fatalf("eval = %+v, want accuracy >= 0.88", s.Eval)
	}
	t.Logf("test accuracy %.4f with two workers killed; tasks %+v", s.Eval.Accuracy, s.Tasks)
}

// TestPythonSDK runs the SDK's own tests (python/tests) against this
// build's parameter server.
func TestPythonSDK(t *testing.T) {
	py := pythonWithTorch(t)
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", "../../python/tests")
	cmd.Env = append(os.Environ(), "ELASTICDL_BINARY="+binary)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python SDK tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestPythonReadersMatchGo reads the same records with the Go workers'
// readers and the SDK's: features, labels, categorical ids, record
// numbers and corrupt records agree exactly, so a Python job trains on
// what a Go job would.
func TestPythonReadersMatchGo(t *testing.T) {
	needData(t)
	py := pythonWithTorch(t)
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "ctr.csv")
	var b strings.Builder
	for i := 0; i < 300; i++ {
		label := strconv.Itoa(i % 2)
		if i == 17 {
			label = "x" // corrupt
		}
		fmt.Fprintf(&b, "%s,%g,%d,, v%d ,w%d,u%d,%s\n", label, float64(i)*0.37-5, i*i, i%7, i%11, i%3, []string{"red", "green", "blue", ""}[i%4])
	}
	writeFile(t, csvPath, []byte(b.String()))
	sources := []string{
		filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"),
		"csv://" + csvPath + "?schema=y:label,a:num,b:num,c:num,d:cat,e:hash(50),f:hash(7),g:cat(red|green|blue)",
		sqliteSnapshot(t), // through `elasticdl data serve`
		parquetSource(t),  // two files, through `elasticdl data serve` too
	}
	for _, src := range sources {
		goBatch, err := readGo(src, 3, 203)
		if err != nil {
			t.Fatal(err)
		}
		// A Go reader's helper killed is replaced at the next read.
		script := `import json, sys; from elasticdl import data
src = data.open_source(sys.argv[1])
r = src.read(3, 203)
if isinstance(src, data.GoSource):
    src._p.kill()
    src._p.wait()
    again = src.read(3, 203)
    assert (again.x == r.x).all() and (again.ids == r.ids).all() and (again.index == r.index).all(), "a new helper read other records"
json.dump({"x": r.x.reshape(len(r), -1).tolist(), "y": r.y.tolist(), "index": r.index.tolist(),
  "ids": None if r.ids is None else [str(v) for v in r.ids.reshape(-1).tolist()], "corrupt": [c[0] for c in r.corrupt]}, sys.stdout)`
		cmd := exec.Command(py, "-c", script, src)
		cmd.Env = append(os.Environ(), "ELASTICDL_BINARY="+binary, "PYTHONPATH=../../python")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: python: %v", src, err)
		}
		var got struct {
			X       [][]float32
			Y       []int32
			Index   []int64
			IDs     []string
			Corrupt []int64
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Y) != goBatch.N || !slices.Equal(got.Y, goBatch.Labels) || !slices.Equal(got.Index, goBatch.Index) {
			t.Fatalf("%s: labels or record numbers differ: python %d records, go %d", src, len(got.Y), goBatch.N)
		}
		per := len(goBatch.Features) / goBatch.N
		for i, row := range got.X {
			if !slices.Equal(row, goBatch.Features[i*per:(i+1)*per]) {
				t.Fatalf("%s: record %d: features differ:\npython %v\ngo     %v", src, goBatch.Index[i], row, goBatch.Features[i*per:(i+1)*per])
			}
		}
		var goIDs []string
		for _, id := range goBatch.Categorical {
			goIDs = append(goIDs, strconv.FormatInt(id, 10))
		}
		if !slices.Equal(got.IDs, goIDs) {
			t.Fatalf("%s: categorical ids differ:\npython %v\ngo     %v", src, got.IDs[:min(len(got.IDs), 14)], goIDs[:min(len(goIDs), 14)])
		}
		var goCorrupt []int64
		for _, c := range goBatch.Corrupt {
			goCorrupt = append(goCorrupt, c.Record)
		}
		if !slices.Equal(got.Corrupt, goCorrupt) {
			t.Fatalf("%s: corrupt records: python %v, go %v", src, got.Corrupt, goCorrupt)
		}
		t.Logf("%s: %d records, %d features and %d ids each, %d corrupt: the same in Python and Go", src, goBatch.N, per, goBatch.NumCategorical, len(goCorrupt))
	}
}

// sqliteSnapshot is a snapshot, as a job's master makes it, of an SQLite
// table of 300 rows: numbers, text and NULLs.
func sqliteSnapshot(t *testing.T) string {
	db := sqldbtest.Open(t, "sqlite")
	table := db.NewTable(t, "y INTEGER", "a REAL", "b INTEGER", "d TEXT", "e TEXT")
	var rows [][]any
	for i := range 300 {
		var e any = fmt.Sprintf("w%d", i%11)
		if i%9 == 0 {
			e = nil
		}
		rows = append(rows, []any{i % 2, float64(i)*0.37 - 5, i * i, fmt.Sprintf(" v%d ", i%7), e})
	}
	db.Insert(t, table, "y, a, b, d, e", rows...)
	uri, err := sqldb.Prepare(context.Background(), db.Source("table="+table+"&label=y"), "pyreaders")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Drop(context.Background(), uri) })
	return uri
}

func readGo(uri string, start, end int64) (*data.Batch, error) {
	src, err := data.Open(uri)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return src.Read(start, end)
}

// TestPyTorchDeepFM trains the example's PyTorch DeepFM, its embedding
// tables on 2 PS, and elasticdl's ctr.deepfm on the same synthetic CTR
// records (exported as CSV, which both read): the AUCs on the next 20000
// records are within 0.02 of each other, and every record is trained once.
func TestPyTorchDeepFM(t *testing.T) {
	py := pythonWithTorch(t)
	const train = 200_000
	dir := t.TempDir()
	export := func(name, uri string, n int64) string {
		src, err := data.Open(uri)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		schema, _, err := data.ExportCSV(f, src, 0, n)
		if err != nil {
			t.Fatal(err)
		}
		return "csv://" + path + "?schema=" + schema
	}
	trainURI := export("train.csv", ctrURI(ctrAcceptance, train), train)
	testURI := export("test.csv", heldOutURI(ctrAcceptance, train, ctrHeld), ctrHeld)
	common := []string{"--optimizer=adagrad:learning_rate=0.1,initial_accumulator_value=0.001",
		"--training_data=" + trainURI, "--validation_data=" + testURI,
		"--num_workers=2", "--num_ps_pods=2", "--minibatch_size=256"}

	goJob := startJob(t, append([]string{"--model_def=ctr.deepfm"}, common...)...)
	goSummary := goJob.succeeded(5 * time.Minute)
	pyJob := startJob(t, append([]string{"--worker_command=" + py + " ../../examples/pytorch/deepfm.py"}, common...)...)
	pySummary := pyJob.succeeded(10 * time.Minute)
	assertExactlyOnce(t, pySummary, 1, train)
	goAUC, pyAUC := finalAUC(t, goSummary), finalAUC(t, pySummary)
	t.Logf("AUC on %d held-out records: PyTorch DeepFM %.4f, Go ctr.deepfm %.4f; training took %.1fs and %.1fs",
		ctrHeld, pyAUC, goAUC, pySummary.DurationSeconds, goSummary.DurationSeconds)
	if math.Abs(pyAUC-goAUC) > 0.02 || pyAUC < 0.7 {
		t.Errorf("PyTorch DeepFM AUC %.4f, Go %.4f: want within 0.02 (and above 0.7)", pyAUC, goAUC)
	}
	if pySummary.ModelVersion != goSummary.ModelVersion {
		t.Errorf("model versions %d (PyTorch) and %d (Go): the same minibatches, applied once each", pySummary.ModelVersion, goSummary.ModelVersion)
	}
}

// TestPythonProtoCurrent regenerates the SDK's messages from proto/ with
// protoc, as proto/gen.sh does, and compares them with the checked-in
// python/elasticdl/_proto: a .proto changed without them fails here.
func TestPythonProtoCurrent(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		if os.Getenv("ELASTICDL_REQUIRE_PYTORCH") == "1" {
			t.Fatal("protoc not found (apt-get install protobuf-compiler)")
		}
		t.Skip("protoc not found (apt-get install protobuf-compiler)")
	}
	out := t.TempDir()
	for _, svc := range []string{"master", "pserver"} {
		cmd := exec.Command("protoc", "--python_out="+out, svc+".proto")
		cmd.Dir = "../../proto"
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("protoc %s.proto: %v\n%s", svc, err, b)
		}
		got, err := os.ReadFile(filepath.Join(out, svc+"_pb2.py"))
		if err != nil {
			t.Fatal(err)
		}
		got = []byte(strings.Replace(string(got), "\nimport pserver_pb2 as", "\nfrom . import pserver_pb2 as", 1))
		want, err := os.ReadFile(filepath.Join("../../python/elasticdl/_proto", svc+"_pb2.py"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("python/elasticdl/_proto/%s_pb2.py is not what proto/%s.proto generates: run proto/gen.sh", svc, svc)
		}
	}
}

// TestPyTorchSyncSGD trains the example with sync SGD (--use_async=false):
// a push computed on a model too stale is rejected, and the SDK redoes its
// minibatch on a fresh pull without the loop noticing. Every record is
// trained once, and the model holds each minibatch once.
func TestPyTorchSyncSGD(t *testing.T) {
	needData(t)
	py := pythonWithTorch(t)
	j := startJob(t, pytorchJob(py, "--num_epochs=1", "--use_async=false", "--grads_to_wait=2")...)
	s := j.succeeded(10 * time.Minute)
	assertExactlyOnce(t, s, 1, 60000)
	if s.Eval == nil || s.Eval.Accuracy < 0.85 {
		t.Fatalf("eval = %+v, want accuracy >= 0.85 after one epoch", s.Eval)
	}
	// Each version averages two workers' pushes: 938 minibatches make at
	// most 938 versions and at least 469.
	if s.ModelVersion < 469 || s.ModelVersion > 938 {
		t.Errorf("model version %d, want 469..938", s.ModelVersion)
	}
	rejected := 0
	logs, _ := filepath.Glob(filepath.Join(j.out, "logs", "worker-*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		var n int
		if i := strings.Index(string(b), "job done; "); i >= 0 {
			fmt.Sscanf(string(b[i+len("job done; "):]), "%d", &n)
			rejected += n
		}
	}
	t.Logf("sync SGD: accuracy %.4f, model version %d, %d stale pushes redone", s.Eval.Accuracy, s.ModelVersion, rejected)
}

// TestPyTorchScale changes a PyTorch job's size while it trains: its PS
// are re-sharded 1 → 2 → 1 (the SDK follows the new layout at its next
// task) and its workers go 2 → 1 → 2. Every record is still trained once
// per epoch, and the accuracy holds.
func TestPyTorchScale(t *testing.T) {
	needData(t)
	py := pythonWithTorch(t)
	j := startJob(t, pytorchJob(py)...)
	progress := func(what string, more int64) {
		t.Helper()
		before := j.recordsDone()
		waitFor(t, 2*time.Minute, what, func() bool { return j.recordsDone() > before+more })
	}
	progress("training", 8000)
	scaleLocal(t, j, "--ps=2")
	waitFor(t, time.Minute, "2 PS", func() bool { return len(j.children("ps")) == 2 && strings.Contains(j.stderr.String(), "re-sharded") })
	progress("training on 2 PS", 8000)
	scaleLocal(t, j, "--workers=1")
	waitFor(t, time.Minute, "1 worker", func() bool { return len(j.pythonWorkers(pytorchExample)) == 1 })
	progress("training with 1 worker", 4000)
	// The workers grow once the PS are back to one: a worker launched
	// while a re-shard is pending registers with the layout being retired,
	// waits 60 s for its stopped shard, fails and is replaced (in the one
	// run that hit it, accuracy 0.8757 against 0.897-0.900): a known gap of
	// the SDK (docs/python.md), not what this test is about.
	scaleLocal(t, j, "--ps=1")
	waitFor(t, time.Minute, "1 PS", func() bool {
		return len(j.children("ps")) == 1 && strings.Count(j.stderr.String(), "msg=re-sharded") == 2
	})
	scaleLocal(t, j, "--workers=2")
	waitFor(t, time.Minute, "2 workers", func() bool { return len(j.pythonWorkers(pytorchExample)) == 2 })
	s := j.succeeded(10 * time.Minute)
	assertExactlyOnce(t, s, 2, 60000)
	if p := s.PS; p.Lost != 0 || len(p.Reshards) != 2 || p.Reshards[0].To != 2 || p.Reshards[1].To != 1 {
		t.Errorf("summary PS %+v: want 1 → 2 → 1, none lost", p)
	}
	if s.Eval == nil || s.Eval.Accuracy < 0.88 {
		t.Fatalf("eval = %+v, want accuracy >= 0.88", s.Eval)
	}
	t.Logf("PyTorch job re-sharded 1 → 2 → 1 PS and scaled 2 → 1 → 2 workers: accuracy %.4f, workers %+v", s.Eval.Accuracy, s.Workers)
}

// TestPyTorchPSKilled kills the PS of a PyTorch job (kill -9), once
// without a checkpoint to restore and once with one. The master relaunches
// it; without a checkpoint the SDK re-initializes it from a worker's
// parameters (the ledger then says the shard's minibatches are unknown),
// with one the shard restores it. Either way the job finishes, every record
// is trained once per epoch, and the accuracy holds. The checkpoint case
// trains two epochs: its restore takes the model back by up to 100 steps,
// and after one epoch its accuracy spread over 0.85-0.88 from run to run
// (a failure in about one run of four at the same threshold).
func TestPyTorchPSKilled(t *testing.T) {
	needData(t)
	py := pythonWithTorch(t)
	for _, c := range []struct {
		name    string
		epochs  int
		extra   []string
		unknown bool
	}{
		{"no checkpoint", 1, nil, true},
		{"checkpoint", 2, []string{"--checkpoint_dir=" + t.TempDir(), "--checkpoint_steps=100"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := startJob(t, pytorchJob(py, append([]string{fmt.Sprintf("--num_epochs=%d", c.epochs)}, c.extra...)...)...)
			j.killPS(20000)
			s := j.succeeded(5 * time.Minute)
			assertExactlyOnce(t, s, c.epochs, 60000)
			if s.PS.Lost != 1 || s.PS.Launched != 2 {
				t.Errorf("ps %+v, want 2 launched, 1 lost", s.PS)
			}
			if got := len(s.PS.AppliedUnknown) == 1; got != c.unknown {
				t.Errorf("ps applied_unknown %v, want it unknown: %v", s.PS.AppliedUnknown, c.unknown)
			}
			if !c.unknown && len(s.PS.Restores) == 0 {
				t.Errorf("ps %+v: the relaunched PS restored no checkpoint", s.PS)
			}
			if s.Eval == nil || s.Eval.Accuracy < 0.85 {
				t.Errorf("eval %+v, want accuracy >= 0.85 after %d epochs", s.Eval, c.epochs)
			}
			t.Logf("PS killed (%s): accuracy %.4f, ps %+v", c.name, s.Eval.Accuracy, s.PS)
		})
	}
}
