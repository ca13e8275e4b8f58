package nn

import (
	"fmt"
	"math/rand"
	"testing"
)

// benchBatches returns k batches of n examples × slots ids in the shape of
// a CTR dataset: every slot is a separate categorical field (the field
// number in the high bits) with Zipf-distributed values, so popular values
// repeat within a batch the way real feature ids do.
func benchBatches(k, n, slots int) [][]int64 {
	rng := rand.New(rand.NewSource(1))
	zipf := rand.NewZipf(rng, 1.1, 1, 1<<20)
	out := make([][]int64, k)
	for b := range out {
		ids := make([]int64, n*slots)
		for i := range ids {
			ids[i] = int64(i%slots)<<40 | int64(zipf.Uint64())
		}
		out[b] = ids
	}
	return out
}

// BenchmarkEmbeddingStep times SetBatch + Forward + Backward + Grad for a
// batch of 512 examples with 26 ids each and Dim 16: CombinerNone looks
// the 26 up as slots ([512,26,16]), CombinerMean averages them as one bag
// per example ([512,16]). Filling Rows (the PS pull) is the caller's cost
// and not included.
func BenchmarkEmbeddingStep(b *testing.B) {
	const n, slots, dim = 512, 26, 16
	batches := benchBatches(8, n, slots)
	bagOffsets := make([]int32, n+1)
	for i := range bagOffsets {
		bagOffsets[i] = int32(i * slots)
	}
	for _, c := range []Combiner{CombinerNone, CombinerMean} {
		b.Run(fmt.Sprintf("%v/n%d_slots%d_dim%d", c, n, slots, dim), func(b *testing.B) {
			e := NewEmbedding("emb", dim, c)
			var offsets []int32
			s := slots
			if c != CombinerNone {
				offsets, s = bagOffsets, 0
			}
			var dy *Tensor
			unique := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				u, err := e.SetBatch(batches[i%len(batches)], offsets, s)
				if err != nil {
					b.Fatal(err)
				}
				unique += len(u)
				y := e.Forward(nil, true)
				dy = ensure(dy, y.Shape...)
				e.Backward(dy)
				e.Grad()
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N*n)/sec, "examples/s")
			b.ReportMetric(float64(b.N*n*slots)/sec, "ids/s")
			b.ReportMetric(float64(unique)/float64(b.N), "unique/batch")
		})
	}
}

// BenchmarkIDDedup compares the per-batch dedup table with a reused Go
// map, the alternative it replaces.
func BenchmarkIDDedup(b *testing.B) {
	batches := benchBatches(8, 512, 26)
	b.Run("idSet", func(b *testing.B) {
		var s idSet
		for i := 0; i < b.N; i++ {
			ids := batches[i%len(batches)]
			s.reset(len(ids))
			next := int32(0)
			for _, id := range ids {
				if _, added := s.index(id, next); added {
					next++
				}
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[int64]int32{}
		for i := 0; i < b.N; i++ {
			clear(m)
			for _, id := range batches[i%len(batches)] {
				if _, ok := m[id]; !ok {
					m[id] = int32(len(m))
				}
			}
		}
	})
}
