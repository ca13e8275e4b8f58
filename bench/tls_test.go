package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkTLSJob is what mutual TLS costs a job: one epoch of the mlp
// and the cnn with 2 workers, PS and AllReduce, with TLS (the default) and
// without, the two alternating so that both see the same machine.
//
//	go test ./bench -run '^$' -bench TLSJob -benchtime 1x -count 3
func BenchmarkTLSJob(b *testing.B) {
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		b.Skip("Fashion-MNIST not installed")
	}
	bin := benchBinary(b)
	for _, model := range []string{"mlp", "cnn"} {
		for _, strategy := range []string{"ps", "allreduce"} {
			for _, tls := range []bool{true, false} {
				b.Run(fmt.Sprintf("%s/%s/tls=%v", model, strategy, tls), func(b *testing.B) {
					localJob(b, bin, append([]string{"--model_def=fashion_mnist." + model, "--num_workers=2",
						fmt.Sprintf("--tls=%v", tls)}, strategyArgs(strategy)...))
				})
			}
		}
	}
}
