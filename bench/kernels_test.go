package bench

import (
	"encoding/json"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"

	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/nn"
)

// BenchmarkKernelsVsTorch times one batch-64 plain-SGD training step
// (zoo.SGDStep: zero grads, forward, softmax cross-entropy, backward,
// value -= lr*grad, as model/zoo's BenchmarkTrainStep) of
// fashion_mnist.mlp, .cnn and .cnn_wide on one thread, and the same step of
// the same models in PyTorch (bench/torch_step.py, torch.set_num_threads(1))
// right before it in the same run. It reports both steps/s and their ratio
// (issue 13's target: go/torch >= 1.2). Build with the BLAS the workers
// use:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test -tags openblas ./bench -run '^$' -bench KernelsVsTorch -benchtime 3s -count 3
//
// ELASTICDL_TORCH_SECONDS sets how long torch is timed per model (default
// 3). It skips when /usr/bin/python3 cannot import torch.
func BenchmarkKernelsVsTorch(b *testing.B) {
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import torch").CombinedOutput(); err != nil {
		b.Skipf("%s cannot import torch (install Debian's python3-torch): %v\n%s", py, err, out)
	}
	secs := os.Getenv("ELASTICDL_TORCH_SECONDS")
	if _, err := strconv.ParseFloat(secs, 64); err != nil {
		secs = "3"
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	nn.SetBLASThreads(1)
	b.Logf("BLAS backend: %s", nn.BLASBackend())
	for _, m := range []struct {
		name string
		spec model.Spec
	}{{"mlp", zoo.MLPSpec()}, {"cnn", zoo.CNNSpec()}, {"cnn_wide", zoo.CNNWideSpec()}} {
		b.Run(m.name, func(b *testing.B) {
			cmd := exec.Command(py, "torch_step.py", "--models="+m.name, "--seconds="+secs)
			cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1")
			out, err := cmd.Output()
			if err != nil {
				b.Fatalf("torch_step.py: %v\n%s", err, out)
			}
			var torch map[string]float64
			if err := json.Unmarshal(out, &torch); err != nil || torch[m.name] <= 0 {
				b.Fatalf("torch_step.py printed %q: %v", out, err)
			}
			x, y := zoo.RandomBatch(rand.New(rand.NewSource(1)), 64)
			st := zoo.NewSGDStep(m.spec.Build(rand.New(rand.NewSource(1))), 0.01)
			if _, err := st.Run(x, y); err != nil { // warm the buffers
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := st.Run(x, y); err != nil {
					b.Fatal(err)
				}
			}
			goRate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(goRate, "steps/s")
			b.ReportMetric(torch[m.name], "torch-steps/s")
			b.ReportMetric(goRate/torch[m.name], "go/torch")
		})
	}
}
