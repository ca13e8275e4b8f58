package bench

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkWholeJobVsTorch times the whole fashion_mnist.cnn job — 2
// epochs on the local backend, then the test set evaluated, from process
// start to exit — against one PyTorch process training the same network
// the same way (bench/torch_train.py: one thread per core), in the same
// run. Reported: both wall times, both test accuracies, and
// torch-seconds/job-seconds (issue 13 target: > 1, at PyTorch's accuracy).
//
//	go test ./bench -run '^$' -bench WholeJobVsTorch -benchtime 1x -count 2
func BenchmarkWholeJobVsTorch(b *testing.B) {
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		b.Skip("Fashion-MNIST not installed")
	}
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		b.Skip("no python3-torch")
	}
	bin := benchBinary(b)
	jobs := map[string][]string{
		"ps":        {"--num_workers=2", "--num_ps_pods=1"},
		"ps-grpc":   {"--num_workers=2", "--num_ps_pods=1", "--ps_transport=grpc"},
		"ps-bf16":   {"--num_workers=2", "--num_ps_pods=1", "--transport_dtype=bfloat16"},
		"allreduce": {"--num_workers=2", "--distribution_strategy=AllreduceStrategy"},
	}
	for _, strategy := range []string{"ps", "ps-grpc", "ps-bf16", "allreduce"} {
		b.Run(strategy, func(b *testing.B) {
			var torchSec, torchAcc, jobSec, jobAcc float64
			for i := 0; i < b.N; i++ {
				start := time.Now()
				out, err := exec.Command(py, "torch_train.py", "--threads=2", "--data="+dataDir).Output()
				if err != nil {
					b.Fatalf("torch_train.py: %v\n%s", err, out)
				}
				torchSec += time.Since(start).Seconds()
				var res struct{ Accuracy float64 }
				if err := json.Unmarshal(out, &res); err != nil {
					b.Fatalf("torch_train.py printed %q: %v", out, err)
				}
				torchAcc += res.Accuracy

				dir := b.TempDir()
				start = time.Now()
				cmd := exec.Command(bin, append([]string{"train", "--model_def=fashion_mnist.cnn", "--num_epochs=2",
					"--training_data=" + filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
					"--validation_data=" + filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"),
					"--log_interval=0", "--output=" + dir}, jobs[strategy]...)...)
				if o, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("job: %v\n%s", err, o)
				}
				jobSec += time.Since(start).Seconds()
				s := readSummary(b, dir)
				if s.Eval == nil {
					b.Fatal("the job evaluated nothing")
				}
				jobAcc += s.Eval.Accuracy
			}
			n := float64(b.N)
			b.Logf("torch %.1f s (accuracy %.4f); elasticdl %s %.1f s (accuracy %.4f)", torchSec/n, torchAcc/n, strategy, jobSec/n, jobAcc/n)
			b.ReportMetric(torchSec/n, "torch-s")
			b.ReportMetric(jobSec/n, "job-s")
			b.ReportMetric(torchAcc/n, "torch-accuracy")
			b.ReportMetric(jobAcc/n, "job-accuracy")
			b.ReportMetric(torchSec/jobSec, "torch-s/job-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
