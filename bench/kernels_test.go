package bench

import (
	"encoding/json"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/nn"
)

// BenchmarkKernelsVsTorch times one batch-64 plain-SGD training step
// (zoo.SGDStep: zero grads, forward, softmax cross-entropy, backward,
// value -= lr*grad, as model/zoo's BenchmarkTrainStep) of
// fashion_mnist.mlp, .cnn and .cnn_wide on one thread, and the same step of
// the same models in PyTorch (bench/torch_step.py, torch.set_num_threads(1))
// right before it in the same run. It reports both mean steps/s and their
// ratio (issue 13's target: go/torch >= 1.2), and the ratio of the
// 10th-percentile steps' rates (p10-go/torch), which a shared machine's
// other load disturbs least. Build with the BLAS the workers use:
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
			torch, torchP10 := torchRates(b, py, m.name, secs)
			x, y := zoo.RandomBatch(rand.New(rand.NewSource(1)), 64)
			st := zoo.NewSGDStep(m.spec.Build(rand.New(rand.NewSource(1))), 0.01)
			if _, err := st.Run(x, y); err != nil { // warm the buffers
				b.Fatal(err)
			}
			times := make([]time.Duration, 0, 1<<12)
			b.ReportAllocs()
			for b.Loop() {
				t := time.Now()
				if _, err := st.Run(x, y); err != nil {
					b.Fatal(err)
				}
				if len(times) < cap(times) {
					times = append(times, time.Since(t))
				}
			}
			goRate, goP10 := float64(b.N)/b.Elapsed().Seconds(), zoo.P10Rate(times)
			b.ReportMetric(goRate, "steps/s")
			b.ReportMetric(torch, "torch-steps/s")
			b.ReportMetric(goRate/torch, "go/torch")
			b.ReportMetric(goP10/torchP10, "p10-go/torch")
		})
	}
}

// torchRates runs bench/torch_step.py for one model and returns its mean
// steps/s and the rate of its 10th-percentile step.
func torchRates(b *testing.B, py, model, secs string) (mean, p10 float64) {
	b.Helper()
	cmd := exec.Command(py, "torch_step.py", "--models="+model, "--seconds="+secs)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1")
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("torch_step.py: %v\n%s", err, out)
	}
	var r struct{ Mean, P10 map[string]float64 }
	if err := json.Unmarshal(out, &r); err != nil || r.Mean[model] <= 0 || r.P10[model] <= 0 {
		b.Fatalf("torch_step.py printed %q: %v", out, err)
	}
	return r.Mean[model], r.P10[model]
}
