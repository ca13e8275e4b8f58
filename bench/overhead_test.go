package bench

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"elasticdl/internal/ps/optimizer"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/nn"
)

// BenchmarkJobOverhead compares a 1-worker job with its bare compute, side
// by side: the same model's batch-64 steps — forward, backward and the
// model's own optimizer (Adam), no data, no RPC — in this process for 5 s,
// then the job (3 epochs of Fashion-MNIST, one worker, with one PS or an
// AllReduce ring of one), then the bare steps again. Reported: bare
// records/s (the mean of both), the job's records/s, and job/bare (issue 9
// target for the AllReduce mlp: >= 0.85; issue 13 for PS: mlp >= 0.6, cnn
// >= 0.9; ps pushes and pulls over direct connections, ps-grpc over gRPC,
// ps-overlap adds --overlap_push, ps-bf16 --transport_dtype=bfloat16,
// ps-fast both). The bare steps run with the worker's settings: run it with
// OPENBLAS_NUM_THREADS=1 and the BLAS tags of the job's binary:
//
//	OPENBLAS_NUM_THREADS=1 go test -tags "$(hack/blas-tags.sh)" ./bench -run '^$' -bench JobOverhead -benchtime 1x
//
// $ELASTICDL_BENCH_BINARY names a prebuilt binary to run the jobs with
// (another commit's, for a before/after comparison).
func BenchmarkJobOverhead(b *testing.B) {
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		b.Skip("Fashion-MNIST not installed")
	}
	b.Logf("BLAS backend of the bare steps: %s", nn.BLASBackend())
	bin := benchBinary(b)
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		b.Fatal(err)
	}
	for _, strategy := range strategyNames {
		for _, name := range []string{"mlp", "cnn"} {
			b.Run(strategy+"/"+name, func(b *testing.B) {
				spec, err := reg.Lookup("fashion_mnist." + name)
				if err != nil {
					b.Fatal(err)
				}
				before := bareRecordsPerSecond(b, spec, 5*time.Second)
				var job float64
				for i := 0; i < b.N; i++ {
					job += jobRecordsPerSecond(b, bin, append([]string{"--model_def=fashion_mnist." + name, "--num_workers=1",
						"--num_epochs=3"}, strategyArgs(strategy)...))
				}
				job /= float64(b.N)
				after := bareRecordsPerSecond(b, spec, 5*time.Second)
				bare := (before + after) / 2
				b.Logf("bare %.0f then %.0f records/s; job %.0f records/s", before, after, job)
				b.ReportMetric(bare, "bare-records/s")
				b.ReportMetric(job, "job-records/s")
				b.ReportMetric(job/bare, "job/bare")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func bareRecordsPerSecond(b *testing.B, spec model.Spec, d time.Duration) float64 {
	const batch = 64
	rng := rand.New(rand.NewSource(1))
	net := spec.Build(rng)
	opt, err := optimizer.Parse(spec.Optimizer)
	if err != nil {
		b.Fatal(err)
	}
	x := &nn.Tensor{Shape: spec.BatchShape(batch), Data: make([]float32, batch*spec.InputSize())}
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	y := make([]int32, batch)
	for i := range y {
		y[i] = int32(rng.Intn(10))
	}
	var dlogits *nn.Tensor
	step := func() {
		net.ZeroGrads()
		_, d, err := nn.SoftmaxCrossEntropyInto(dlogits, net.Forward(x, true), y)
		if err != nil {
			b.Fatal(err)
		}
		dlogits = d
		net.Backward(d)
		for _, p := range net.Params() {
			if err := opt.Apply(p.Name, p.Value.Data, p.Grad.Data, 1); err != nil {
				b.Fatal(fmt.Errorf("apply %s: %w", p.Name, err))
			}
		}
	}
	step() // warm buffers
	start, steps := time.Now(), 0
	for time.Since(start) < d {
		step()
		steps++
	}
	return float64(steps*batch) / time.Since(start).Seconds()
}

// BenchmarkBareScaling is the machine's own ceiling for a job's 2 ÷ 1
// workers: the bare steps of BenchmarkJobOverhead in one goroutine, then
// in two at once (each its own model, as two workers have), for 5 s each,
// alternated -count times. Reported: records/s of one stream and of both
// together, and their ratio. Two workers with a PS cannot beat two bare
// streams on the same cores; on a 2-core machine the PS and the master
// also need those cores.
//
//	OPENBLAS_NUM_THREADS=1 go test -tags "$(hack/blas-tags.sh)" ./bench -run '^$' -bench BareScaling -benchtime 1x -count 3
func BenchmarkBareScaling(b *testing.B) {
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"mlp", "cnn"} {
		b.Run(name, func(b *testing.B) {
			spec, err := reg.Lookup("fashion_mnist." + name)
			if err != nil {
				b.Fatal(err)
			}
			var one, two float64
			for i := 0; i < b.N; i++ {
				one += bareRecordsPerSecond(b, spec, 5*time.Second)
				rates := make(chan float64, 2)
				for range 2 {
					go func() { rates <- bareRecordsPerSecond(b, spec, 5*time.Second) }()
				}
				two += <-rates + <-rates
			}
			b.ReportMetric(one/float64(b.N), "1-stream-records/s")
			b.ReportMetric(two/float64(b.N), "2-stream-records/s")
			b.ReportMetric(two/one, "2÷1")
			b.ReportMetric(0, "ns/op")
		})
	}
}
