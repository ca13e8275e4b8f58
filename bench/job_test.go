package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"elasticdl/internal/master"
)

const dataDir = "/usr/share/datasets/fashion-mnist"

// buildBinary builds elasticdl with the given tags into a temp dir.
func buildBinary(b testing.TB, tags string) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "elasticdl")
	cmd := exec.Command("go", "build", "-tags", tags, "-o", bin, "elasticdl/cmd/elasticdl")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// benchBinary is $ELASTICDL_BENCH_BINARY, a prebuilt binary (another
// commit's, for a before/after comparison), or one built now.
func benchBinary(b testing.TB) string {
	if bin := os.Getenv("ELASTICDL_BENCH_BINARY"); bin != "" {
		return bin
	}
	return buildBinary(b, benchTags())
}

// benchTags are the build tags of the binaries benchmarked:
// $ELASTICDL_BENCH_TAGS, or what hack/blas-tags.sh picks.
func benchTags() string {
	tags := strings.TrimSpace(os.Getenv("ELASTICDL_BENCH_TAGS"))
	if tags == "" {
		out, _ := exec.Command("../hack/blas-tags.sh").Output()
		tags = strings.TrimSpace(string(out))
	}
	return tags
}

// strategyNames are the ways a benchmarked job distributes its training,
// in the order they are run; strategyArgs gives each one's flags.
var strategyNames = []string{"ps", "ps-grpc", "ps-overlap", "ps-bf16", "ps-fast", "allreduce"}

func strategyArgs(name string) []string {
	switch name {
	case "ps":
		return []string{"--num_ps_pods=1"}
	case "ps-grpc":
		return []string{"--num_ps_pods=1", "--ps_transport=grpc"}
	case "ps-overlap":
		return []string{"--num_ps_pods=1", "--overlap_push"}
	case "ps-bf16":
		return []string{"--num_ps_pods=1", "--transport_dtype=bfloat16"}
	case "ps-fast":
		return []string{"--num_ps_pods=1", "--overlap_push", "--transport_dtype=bfloat16"}
	case "allreduce":
		return []string{"--distribution_strategy=AllreduceStrategy"}
	}
	panic("bench: unknown strategy " + name)
}

// BenchmarkLocalJob runs one training epoch of Fashion-MNIST on the local
// backend with 1 and 2 workers and 1 PS, and reports the training
// throughput the job measured itself (records/s between the first task
// handed out and the last one reported; process start-up excluded).
//
//	go test ./bench -run '^$' -bench LocalJob -benchtime 1x
func BenchmarkLocalJob(b *testing.B) {
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		b.Skip("Fashion-MNIST not installed")
	}
	bin := benchBinary(b)
	for _, model := range []string{"mlp", "cnn"} {
		for _, strategy := range strategyNames {
			for _, workers := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%s/workers=%d", model, strategy, workers), func(b *testing.B) {
					localJob(b, bin, append([]string{"--model_def=fashion_mnist." + model, fmt.Sprintf("--num_workers=%d", workers)},
						strategyArgs(strategy)...))
				})
			}
		}
	}
}

// localJob runs a one-epoch training job b.N times and reports its mean
// records/s.
func localJob(b *testing.B, bin string, args []string) {
	var rps float64
	for i := 0; i < b.N; i++ {
		rps += jobRecordsPerSecond(b, bin, append([]string{"--num_epochs=1"}, args...))
	}
	b.ReportMetric(rps/float64(b.N), "records/s")
	b.ReportMetric(0, "ns/op")
}

// jobRecordsPerSecond runs a training job (args: the model, workers,
// epochs...) and returns the records/s it measured itself.
func jobRecordsPerSecond(b *testing.B, bin string, args []string) float64 {
	b.Helper()
	out := b.TempDir()
	cmd := exec.Command(bin, append([]string{"train",
		"--training_data=" + filepath.Join(dataDir, "train-images-idx3-ubyte.gz"),
		"--log_interval=0", "--output=" + out}, args...)...)
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("job: %v\n%s", err, o)
	}
	return readSummary(b, out).RecordsPerSecond
}

// readSummary reads the job_summary.json a job wrote in out.
func readSummary(b *testing.B, out string) master.Summary {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join(out, "job_summary.json"))
	if err != nil {
		b.Fatal(err)
	}
	var s master.Summary
	if err := json.Unmarshal(raw, &s); err != nil {
		b.Fatal(err)
	}
	return s
}
