package bench

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkPyTorchWorker times one PyTorch training loop
// (bench/pytorch_loop.py: the PyTorch example's CNN, and a 784-256-10
// MLP; minibatches of 64, Adam, one thread) twice: plain, with
// torch.optim in the process, and as the only worker of an elasticdl job
// with one PS (the SDK pushes the gradients, the PS applies Adam, the
// next step pulls). It reports both steps/s and their ratio.
//
//	go test ./bench -run '^$' -bench PyTorchWorker -benchtime 1x -count 3
func BenchmarkPyTorchWorker(b *testing.B) {
	py, bin := pytorchSetup(b)
	for _, model := range []string{"cnn", "mlp"} {
		b.Run(model, func(b *testing.B) {
			var plain, job float64
			for i := 0; i < b.N; i++ {
				plain += loopStepsPerSecond(b, exec.Command(py, "pytorch_loop.py", "--model="+model, "--steps=400"))
				out := b.TempDir()
				cmd := exec.Command(bin, "train", "--worker_command="+py+" pytorch_loop.py --model="+model,
					"--optimizer=adam:learning_rate=0.001", "--training_data="+filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
					"--num_workers=1", "--num_ps_pods=1", "--log_interval=0", "--output="+out)
				job += loopStepsPerSecond(b, cmd)
			}
			b.ReportMetric(plain/float64(b.N), "plain-steps/s")
			b.ReportMetric(job/float64(b.N), "sdk-steps/s")
			b.ReportMetric(job/plain, "sdk/plain")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// pytorchSetup skips b without Fashion-MNIST or python3 with torch and
// grpcio, points python at the SDK (one thread), and builds the binary; it
// returns python3's path and the binary's.
func pytorchSetup(b *testing.B) (py, bin string) {
	b.Helper()
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		b.Skip("Fashion-MNIST not installed")
	}
	py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, grpc").Run(); err != nil {
		b.Skip("no python3-torch and python3-grpcio")
	}
	sdk, _ := filepath.Abs("../python")
	b.Setenv("PYTHONPATH", sdk)
	b.Setenv("OMP_NUM_THREADS", "1")
	return py, buildBinary(b, benchTags())
}

// loopResult is one line a timed loop (pytorch_loop.py, torchrun_ddp.py)
// writes: a process's timed steps.
type loopResult struct {
	Steps, Seconds float64
	Worker         *int // a job's worker
}

// loopStepsPerSecond runs cmd, whose loop writes {"steps", "seconds"} to
// $ELASTICDL_BENCH_OUT, and returns its steps/s (over every line).
func loopStepsPerSecond(b *testing.B, cmd *exec.Cmd) float64 {
	b.Helper()
	var steps, seconds float64
	for _, r := range loopResults(b, cmd) {
		steps, seconds = steps+r.Steps, seconds+r.Seconds
	}
	return steps / seconds
}

// loopResults runs cmd and returns the lines its loops wrote to
// $ELASTICDL_BENCH_OUT.
func loopResults(b *testing.B, cmd *exec.Cmd) []loopResult {
	b.Helper()
	res := filepath.Join(b.TempDir(), "loop.json")
	cmd.Env = append(os.Environ(), "ELASTICDL_BENCH_OUT="+res)
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, o)
	}
	f, err := os.Open(res)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var out []loopResult
	for sc.Scan() {
		var r loopResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			b.Fatal(err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		b.Fatalf("%s wrote no result", strings.Join(cmd.Args, " "))
	}
	return out
}
