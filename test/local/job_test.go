package local

import (
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/ps/checkpoint"
)

func mlpArgs(epochs string) []string {
	return []string{
		"--model_def=fashion_mnist.mlp",
		"--training_data=" + filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
		"--validation_data=" + filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"),
		"--num_workers=2", "--num_ps_pods=1", "--num_epochs=" + epochs,
	}
}

func TestTrainMLP(t *testing.T) {
	needData(t)
	j := startJob(t, mlpArgs("1")...)
	var pids []int
	waitFor(t, 60*time.Second, "two workers", func() bool {
		pids = append(j.children("worker"), j.children("ps")...)
		return len(pids) == 3
	})
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	s := j.summary()
	if s.Status != "succeeded" || s.Error != "" {
		t.Fatalf("status %q error %q", s.Status, s.Error)
	}
	assertExactlyOnce(t, s, 1, 60000)
	if s.Eval == nil || s.Eval.Records != 10000 || s.Eval.Accuracy < 0.80 {
		t.Fatalf("eval = %+v, want 10000 records and accuracy >= 0.80", s.Eval)
	}
	if s.Workers.Launched != 2 || s.Workers.Lost != 0 || s.PS.Launched != 1 || s.PS.Lost != 0 {
		t.Errorf("instance counts %+v %+v", s.Workers, s.PS)
	}
	// The model is a one-shard checkpoint a later job can start from.
	wantPath := checkpoint.Path(filepath.Join(j.out, "model"), s.ModelVersion, 0, 1)
	if fi, err := os.Stat(wantPath); err != nil || fi.Size() < 784*256*4 || s.ModelPath != wantPath {
		t.Errorf("model file %s (summary: %s): %v, %v", wantPath, s.ModelPath, fi, err)
	}
	if set, err := checkpoint.Load(filepath.Join(j.out, "model"), nil); err != nil || set.Version != s.ModelVersion {
		t.Errorf("model does not load as a checkpoint: %+v, %v", set, err)
	}
	if !strings.Contains(j.stdout.String(), "test accuracy") {
		t.Errorf("stdout lacks the final report:\n%s", j.stdout.String())
	}
	if !strings.Contains(j.stderr.String(), "msg=progress") {
		t.Errorf("no progress lines on stderr")
	}
	noOrphans(t, pids)
}

// TestOverlapPushBFloat16 trains with both of async SGD's communication
// options: --overlap_push (each worker computes its next minibatch while
// the last one's push is on its way; TestJobUnderRaceDetector runs it
// too, with a worker killed) and --transport_dtype=bfloat16 (gradients
// and parameters travel in half the bytes).
func TestOverlapPushBFloat16(t *testing.T) {
	needData(t)
	j := startJob(t, append(mlpArgs("1"), "--overlap_push", "--transport_dtype=bfloat16")...)
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	s := j.summary()
	assertExactlyOnce(t, s, 1, 60000)
	if s.Eval == nil || s.Eval.Records != 10000 || s.Eval.Accuracy < 0.80 {
		t.Fatalf("eval = %+v, want 10000 records and accuracy >= 0.80", s.Eval)
	}
	if log, err := os.ReadFile(filepath.Join(j.out, "logs", "worker-0.log")); err != nil || !strings.Contains(string(log), "overlap_push=true transport_dtype=bfloat16") {
		t.Errorf("worker-0 does not say it overlaps pushes in bfloat16 (%v):\n%s", err, log)
	}
}

// TestPSKilled kills the PS (-9) of a job without checkpoints, with the
// default communication, with pushes in flight while the next minibatch
// computes, in bfloat16 (a push may be on its way when the PS dies: its
// worker re-initializes the relaunched shard and pushes again), and with
// pushes and pulls over gRPC instead of direct connections.
func TestPSKilled(t *testing.T) {
	needData(t)
	for name, extra := range map[string][]string{
		"default":               nil,
		"overlap_push,bfloat16": {"--overlap_push", "--transport_dtype=bfloat16"},
		"grpc":                  {"--ps_transport=grpc"},
	} {
		t.Run(name, func(t *testing.T) {
			// Two epochs, progress every 200 ms: an epoch of the mlp trains
			// in under a second, which a 1 s progress line could miss.
			j := startJob(t, append(mlpArgs("2"), append(extra, "--log_interval=200ms")...)...)
			j.killPS(10000)
			s := j.succeeded(5 * time.Minute)
			assertExactlyOnce(t, s, 2, 60000)
			if s.PS.Lost != 1 || s.PS.Launched != 2 {
				t.Errorf("ps %+v, want 2 launched, 1 lost", s.PS)
			}
			// The relaunched PS restarts from a worker's current parameters,
			// which hold an unknown mix of minibatches: the ledger says so.
			if len(s.PS.AppliedUnknown) != 1 || s.PS.AppliedUnknown[0] != 0 {
				t.Errorf("ps applied_unknown %v, want [0]", s.PS.AppliedUnknown)
			}
			if s.Eval == nil || s.Eval.Accuracy < 0.78 {
				t.Errorf("eval %+v, want accuracy >= 0.78", s.Eval)
			}
		})
	}
}

// TestPSKilledRestoresCheckpoint kills the PS of a job that checkpoints:
// the relaunched PS restores the newest complete checkpoint (no worker
// re-initializes it), old checkpoints are pruned, and every record is
// still trained exactly once — in the model: the minibatches applied after
// the checkpoint, lost with the PS, are trained again.
func TestPSKilledRestoresCheckpoint(t *testing.T) {
	needData(t)
	ckpt := t.TempDir()
	// Two epochs, progress every 200 ms: an epoch of the mlp trains in
	// under a second, which a 1 s progress line could miss.
	j := startJob(t, append(mlpArgs("2"), "--checkpoint_dir="+ckpt, "--checkpoint_steps=50", "--keep_checkpoint_max=2", "--log_interval=200ms")...)
	var ps []int
	var complete int64
	waitFor(t, 2*time.Minute, "training progress and a checkpoint", func() bool {
		_, done := j.epochRecordsDone()
		ps = j.children("ps")
		set, err := checkpoint.Load(ckpt, nil)
		if err != nil {
			return false
		}
		complete = set.Version
		return done >= 10000 && len(ps) == 1
	})
	if err := syscall.Kill(ps[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the PS with version %d checkpointed", complete)
	s := j.succeeded(5 * time.Minute)
	assertExactlyOnce(t, s, 2, 60000)
	// One async shard: its version counts the minibatches it applied,
	// 2 × ceil(60000/64) once each.
	if s.ModelVersion != 1876 || len(s.PS.AppliedUnknown) != 0 {
		t.Errorf("model version %d, applied_unknown %v: want 1876 minibatches applied once each", s.ModelVersion, s.PS.AppliedUnknown)
	}
	t.Logf("records requeued for the rollback: %d (%d tasks)", s.RecordsRequeuedForRollback, s.Tasks.Reopened)
	if s.PS.Lost != 1 || s.PS.Launched != 2 || s.PS.Relaunched != 1 {
		t.Errorf("ps %+v, want 2 launched, 1 lost, 1 relaunched", s.PS)
	}
	log, err := os.ReadFile(filepath.Join(j.out, "logs", "ps-1.log"))
	if err != nil {
		t.Fatal(err)
	}
	restored := int64(-1)
	for line := range strings.Lines(string(log)) {
		if !strings.Contains(line, `msg="restored checkpoint"`) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "version="); ok {
				restored, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	if restored < complete || restored%50 != 0 {
		t.Errorf("relaunched PS restored version %d, want a multiple of 50 >= %d; its log:\n%s", restored, complete, log)
	}
	workerLogs, _ := filepath.Glob(filepath.Join(j.out, "logs", "worker-*.log"))
	for _, l := range workerLogs {
		if b, _ := os.ReadFile(l); strings.Contains(string(b), "re-initialized relaunched PS") {
			t.Errorf("%s: a worker re-initialized the PS, which should have restored its checkpoint", l)
		}
	}
	if vs, err := checkpoint.Versions(ckpt); err != nil || len(vs) == 0 || len(vs) > 2 {
		t.Errorf("checkpoint versions left %v, %v; want 1 or 2 (--keep_checkpoint_max=2)", vs, err)
	}
	if s.Eval == nil || s.Eval.Accuracy < 0.78 {
		t.Errorf("eval %+v, want accuracy >= 0.78", s.Eval)
	}
}

func TestInterruptStopsEverything(t *testing.T) {
	needData(t)
	j := startJob(t, mlpArgs("3")...)
	var pids []int
	waitFor(t, time.Minute, "training progress", func() bool {
		_, done := j.epochRecordsDone()
		pids = append(j.children("worker"), j.children("ps")...)
		return done > 0 && len(pids) == 3
	})
	j.cmd.Process.Signal(syscall.SIGINT)
	if code := j.wait(30 * time.Second); code == 0 {
		t.Fatalf("interrupted job exited 0")
	}
	s := j.summary()
	if s.Status != "failed" || !strings.Contains(s.Error, "stopped") {
		t.Errorf("summary status %q error %q, want failed/stopped", s.Status, s.Error)
	}
	noOrphans(t, pids)
}

func TestBadInput(t *testing.T) {
	needData(t)
	dir := t.TempDir()
	// An IDX file with a wrong magic number, and its labels file.
	badMagic := filepath.Join(dir, "bad-images-idx3-ubyte")
	writeFile(t, badMagic, []byte{0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 7})
	writeFile(t, filepath.Join(dir, "bad-labels-idx1-ubyte"), []byte{0, 0, 8, 1, 0, 0, 0, 1, 3})
	// A truncated copy of the real test set.
	truncated := filepath.Join(dir, "cut-images-idx3-ubyte")
	writeFile(t, truncated, gunzipPrefix(t, filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"), 16+784*100+300))
	writeFile(t, filepath.Join(dir, "cut-labels-idx1-ubyte"), gunzipPrefix(t, filepath.Join(dataDir, "t10k-labels-idx1-ubyte.gz"), 8+10000))
	noLabels := filepath.Join(dir, "lonely-images-idx3-ubyte")
	writeFile(t, noLabels, gunzipPrefix(t, filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"), 16+784*10000))

	train := "--training_data=" + filepath.Join(dataDir, "train-images-idx3-ubyte.gz")
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing data", []string{"--model_def=fashion_mnist.mlp", "--training_data=" + filepath.Join(dir, "nope-images-idx3-ubyte.gz")}, 1, "no such file"},
		{"missing dataset package", []string{"--model_def=fashion_mnist.mlp", "--training_data=" + dataDir + "/x-images-idx3-ubyte.gz"}, 1, "apt-get install dataset-fashion-mnist"},
		{"wrong magic", []string{"--model_def=fashion_mnist.mlp", "--training_data=" + badMagic}, 1, "magic"},
		{"truncated", []string{"--model_def=fashion_mnist.mlp", "--training_data=" + truncated}, 1, "truncated"},
		{"no labels file", []string{"--model_def=fashion_mnist.mlp", "--training_data=" + noLabels}, 1, "lonely-labels-idx1-ubyte"},
		{"unreadable validation", []string{"--model_def=fashion_mnist.mlp", train, "--validation_data=" + badMagic}, 1, "--validation_data"},
		{"unknown model", []string{"--model_def=fashion_mnist.nope", train}, 1, "fashion_mnist.mlp"},
		{"zero workers", []string{"--model_def=fashion_mnist.mlp", train, "--num_workers=0"}, 2, "--num_workers: must be at least 1"},
		{"negative minibatch", []string{"--model_def=fashion_mnist.mlp", train, "--minibatch_size=-1"}, 2, "--minibatch_size"},
		{"non-numeric epochs", []string{"--model_def=fashion_mnist.mlp", train, "--num_epochs=two"}, 2, "num_epochs"},
		{"unknown flag", []string{"--model_def=fashion_mnist.mlp", train, "--num_wrokers=2"}, 2, "num_wrokers"},
		{"bad optimizer", []string{"--model_def=fashion_mnist.mlp", train, "--optimizer=adamw:learning_rate=1"}, 1, "adamw"},
		{"stray argument", []string{"--model_def=fashion_mnist.mlp", train, "num_workers=2"}, 2, "unexpected argument"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := startJob(t, c.args...)
			code := j.wait(time.Minute)
			stderr := strings.TrimSpace(j.stderr.String())
			if code != c.code {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, c.code, stderr)
			}
			last := stderr[strings.LastIndexByte(stderr, '\n')+1:]
			if !strings.Contains(last, c.want) || !strings.HasPrefix(last, "elasticdl train: ") {
				t.Errorf("last stderr line %q does not contain %q", last, c.want)
			}
			if c.code == 2 {
				return // flag package prints usage lines too
			}
			if n := strings.Count(stderr, "\n") + 1; n != 1 {
				t.Errorf("want one error line, got %d:\n%s", n, stderr)
			}
		})
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func gunzipPrefix(t *testing.T, path string, n int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, n))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestModelledCompute: with --modelled_seconds_per_record the workers wait
// instead of computing (experiments), and everything else is real: the
// master's tasks, the PS recording every minibatch once (the end-of-
// training check counts the ledger from them), the summary. Two workers of
// one CPU each take at least 60,000 × 0.0001 s ÷ 2 = 3 s for the epoch,
// and the model does not learn. AllReduce members model theirs too
// (experiment 5): each waits for its share of a step, the ring still sums
// a full gradient buffer (of zeros) every step, and the ledger counts the
// records.
func TestModelledCompute(t *testing.T) {
	needData(t)
	for name, args := range map[string][]string{"ps": mlpArgs("1"), "allreduce": allReduceArgs("fashion_mnist.mlp", "2", "1")} {
		t.Run(name, func(t *testing.T) {
			j := startJob(t, append(args, "--modelled_seconds_per_record=0.0001")...)
			s := j.succeeded(3 * time.Minute)
			assertExactlyOnce(t, s, 1, 60000)
			if s.TrainingSeconds < 3 {
				t.Errorf("an epoch of modelled compute took %.2f s, want at least 3", s.TrainingSeconds)
			}
			if s.Eval == nil || s.Eval.Accuracy > 0.3 {
				t.Errorf("eval %+v: a modelled job's model does not train", s.Eval)
			}
			log, err := os.ReadFile(filepath.Join(j.out, "logs", "worker-0.log"))
			if err != nil || !strings.Contains(string(log), "seconds_per_record=0.0001 cpus=1") {
				t.Errorf("worker-0's log does not say it models its compute (%v):\n%s", err, log)
			}
			if name == "allreduce" && (s.Ring == nil || s.Ring.MaxWorldSize != 2) {
				t.Errorf("ring %+v: want the two workers in one ring", s.Ring)
			}
		})
	}
}

// TestDeclarativeModel trains a model declared in a YAML file
// (--model_def=examples/declarative/mlp.yaml, no Go) and evaluates its
// saved model as the zoo's fashion_mnist.mlp, whose layers it declares:
// the same accuracy.
func TestDeclarativeModel(t *testing.T) {
	needData(t)
	file, err := filepath.Abs("../../examples/declarative/mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	args := mlpArgs("1")
	for i, a := range args {
		if strings.HasPrefix(a, "--model_def=") {
			args[i] = "--model_def=" + file
		}
	}
	j := startJob(t, args...)
	s := j.succeeded(5 * time.Minute)
	assertExactlyOnce(t, s, 1, 60000)
	if s.Eval == nil || s.Eval.Accuracy < 0.80 || s.ModelDef != file {
		t.Fatalf("model %q, eval %+v: want the file and accuracy >= 0.80", s.ModelDef, s.Eval)
	}
	out := t.TempDir()
	ev := exec.Command(binary, "evaluate", "--model_def=fashion_mnist.mlp", "--checkpoint_dir_for_init="+j.out,
		"--validation_data="+filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"), "--num_workers=1", "--output="+out)
	if b, err := ev.CombinedOutput(); err != nil {
		t.Fatalf("evaluate as fashion_mnist.mlp: %v\n%s", err, b)
	}
	es := (&job{t: t, out: out}).summary()
	if es.Eval == nil || es.Eval.Accuracy != s.Eval.Accuracy {
		t.Errorf("evaluated as the zoo model: %+v, want accuracy %v", es.Eval, s.Eval.Accuracy)
	}
	t.Logf("declared MLP: accuracy %.4f after one epoch, the same as the zoo's model evaluating its checkpoint", s.Eval.Accuracy)
}
