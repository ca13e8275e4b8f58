package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/client"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// Sparse embedding benchmarks (dim 16, Adam), see RESULTS.md:
//
//	go test ./bench -run '^$' -bench Embedding -benchtime 3s
//	go test ./bench -run '^$' -bench EmbeddingMemory -benchtime 1x

const (
	embDim   = 16
	embBatch = 8192    // ids per pull / push
	embVocab = 1 << 20 // ids drawn from [0, embVocab)
)

func embOpt(b *testing.B) optimizer.Optimizer {
	o, err := optimizer.Parse("adam:learning_rate=0.001")
	if err != nil {
		b.Fatal(err)
	}
	return o
}

// startEmbCluster serves numPS shards over loopback gRPC and returns a
// client with the table registered and every row of the vocabulary created.
func startEmbCluster(b *testing.B, numPS int) *client.Client {
	ctx, cancel := context.WithCancel(context.Background())
	var addrs []string
	done := make(chan struct{}, numPS)
	for i := range numPS {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addrs = append(addrs, lis.Addr().String())
		go func() {
			_ = ps.Serve(ctx, lis, ps.Config{Index: i, NumPS: numPS, Optimizer: embOpt(b)})
			done <- struct{}{}
		}()
	}
	c, err := client.Dial(ctx, addrs)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		cancel()
		for range numPS {
			<-done
		}
	})
	tctx, tcancel := context.WithTimeout(ctx, time.Minute)
	defer tcancel()
	if err := c.PushModel(tctx, nil, client.EmbeddingTable{Name: "emb", Dim: embDim}); err != nil {
		b.Fatal(err)
	}
	ids := make([]int64, 1<<16)
	rows := make([]float32, len(ids)*embDim)
	for start := int64(0); start < embVocab; start += int64(len(ids)) {
		for i := range ids {
			ids[i] = start + int64(i)
		}
		if err := c.PullEmbeddings(tctx, "emb", ids, rows); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

func randomIDs(r *rand.Rand, n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = r.Int64N(embVocab)
	}
	return ids
}

// BenchmarkEmbeddingPull: PullEmbeddings of embBatch random ids (client
// dedup, split by id mod numPS, parallel pulls, reassembly).
func BenchmarkEmbeddingPull(b *testing.B) {
	for _, numPS := range []int{1, 2} {
		b.Run(fmt.Sprintf("ps=%d", numPS), func(b *testing.B) {
			c := startEmbCluster(b, numPS)
			r := rand.New(rand.NewPCG(1, 2))
			ids := randomIDs(r, embBatch)
			dst := make([]float32, len(ids)*embDim)
			ctx := context.Background()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			for range b.N {
				if err := c.PullEmbeddings(ctx, "emb", ids, dst); err != nil {
					b.Fatal(err)
				}
			}
			reportRows(b, b.N*embBatch, cpu0)
		})
	}
}

// BenchmarkEmbeddingPush: Push of embBatch random rows (Adam),
// through gRPC.
func BenchmarkEmbeddingPush(b *testing.B) {
	for _, numPS := range []int{1, 2} {
		b.Run(fmt.Sprintf("ps=%d", numPS), func(b *testing.B) {
			c := startEmbCluster(b, numPS)
			r := rand.New(rand.NewPCG(3, 4))
			g := client.SparseGrad{Table: "emb", IDs: randomIDs(r, embBatch), Values: make([]float32, embBatch*embDim)}
			for i := range g.Values {
				g.Values[i] = r.Float32() - 0.5
			}
			ctx := context.Background()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			for range b.N {
				if _, err := c.Push(ctx, nil, []client.SparseGrad{g}, 0, client.AllShards); err != nil {
					b.Fatal(err)
				}
			}
			reportRows(b, b.N*embBatch, cpu0)
		})
	}
}

// BenchmarkEmbeddingApplyServer: one PS's PushGradients handler called
// directly (decode, merge, validate, Adam on each row) on a 1M-row table,
// no network: the server's update ceiling.
func BenchmarkEmbeddingApplyServer(b *testing.B) {
	s, err := ps.NewServer(ps.Config{Index: 0, NumPS: 1, Optimizer: embOpt(b)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.PushModel(ctx, &pserverpb.Model{EmbeddingTableInfos: []*pserverpb.EmbeddingTableInfo{{Name: "emb", Dim: embDim}}}); err != nil {
		b.Fatal(err)
	}
	all := make([]int64, 1<<16)
	for start := int64(0); start < embVocab; start += int64(len(all)) {
		for i := range all {
			all[i] = start + int64(i)
		}
		if _, err := s.PullEmbeddingVectors(ctx, &pserverpb.PullEmbeddingVectorsRequest{Name: "emb", Ids: all}); err != nil {
			b.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	ids := randomIDs(r, embBatch)
	vals := make([]float32, embBatch*embDim)
	req := &pserverpb.PushGradientsRequest{EmbeddingGradients: []*pserverpb.IndexedSlices{{Ids: ids, Values: wire.EncodeTensor("emb", []int{embBatch, embDim}, vals)}}}
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for range b.N {
		if _, err := s.PushGradients(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	reportRows(b, b.N*embBatch, cpu0)
}

// BenchmarkEmbeddingMemory creates 1M rows of dim 16 with Adam slots on one
// PS and reports the heap per row (runtime.MemStats after GC).
func BenchmarkEmbeddingMemory(b *testing.B) {
	for _, spec := range []string{"sgd:learning_rate=0.1", "adam:learning_rate=0.001"} {
		b.Run(spec[:4], func(b *testing.B) {
			const rows = 1 << 20
			o, _ := optimizer.Parse(spec)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s, err := ps.NewServer(ps.Config{Index: 0, NumPS: 1, Optimizer: o})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := s.PushModel(ctx, &pserverpb.Model{EmbeddingTableInfos: []*pserverpb.EmbeddingTableInfo{{Name: "emb", Dim: embDim}}}); err != nil {
				b.Fatal(err)
			}
			ids := make([]int64, 1<<16)
			for start := 0; start < rows; start += len(ids) {
				for i := range ids {
					ids[i] = int64(start+i) * 7919 // spread, not dense
				}
				if _, err := s.PullEmbeddingVectors(ctx, &pserverpb.PullEmbeddingVectorsRequest{Name: "emb", Ids: ids}); err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			perRow := float64(after.HeapAlloc-before.HeapAlloc) / rows
			b.ReportMetric(perRow, "B/row")
			b.ReportMetric(float64(after.HeapObjects-before.HeapObjects), "objects")
			start := time.Now()
			runtime.GC()
			b.ReportMetric(float64(time.Since(start).Microseconds()), "µs/GC")
			runtime.KeepAlive(s)
		})
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportRows reports rows/s (wall clock) and the CPU time per row of the
// whole process (client and servers), which a loaded machine distorts
// less: 1e9 / cpu-ns/row is the rate one free core would sustain.
func reportRows(b *testing.B, rows int, cpu0 time.Duration) {
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(rows), "cpu-ns/row")
}
