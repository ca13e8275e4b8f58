package worker

import (
	"context"
	"math"
	"math/rand"
	"testing"
	"time"

	"elasticdl/data"
	"elasticdl/internal/collective"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/proto/masterpb"
)

// A global batch is split among the ring's members, remainder to the
// lowest ranks, whatever the ring's size; the shares always add up to it.
func TestStepShare(t *testing.T) {
	for _, tc := range []struct{ global, size int }{{256, 1}, {256, 2}, {256, 3}, {256, 4}, {256, 5}, {256, 8}, {7, 3}, {2, 4}} {
		var sum int64
		for rank := 0; rank < tc.size; rank++ {
			n := stepShare(tc.global, 64, rank, tc.size)
			if lo := int64(tc.global / tc.size); n < max(lo, 1) || n > lo+1 {
				t.Errorf("global %d, size %d, rank %d: share %d", tc.global, tc.size, rank, n)
			}
			sum += n
		}
		if tc.global >= tc.size && sum != int64(tc.global) {
			t.Errorf("global %d, size %d: shares add up to %d", tc.global, tc.size, sum)
		}
	}
	if n := stepShare(0, 64, 3, 4); n != 64 {
		t.Errorf("no global batch: share %d, want the minibatch", n)
	}
}

// A share computed in minibatch chunks (accumulation) gives the gradient
// of the whole share: what a small ring computes for a large global batch
// is what a large ring would have summed.
func TestChunkedGradientsMatchWhole(t *testing.T) {
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	const n = 50
	b := &data.Batch{N: n, Labels: make([]int32, n)}
	rng := rand.New(rand.NewSource(1))
	task := &ringTask{t: &masterpb.Task{Id: 3}, batch: b}
	grads := func(minibatch int) ([]float32, float32) {
		w, err := New(Config{WorkerID: 0, MasterAddr: "x", ModelDef: "fashion_mnist.mlp", MinibatchSize: minibatch, AllReduce: true, Seed: 5}, reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b.Features == nil {
			b.Features = make([]float32, n*w.spec.InputSize())
			for i := range b.Features {
				b.Features[i] = rng.Float32()
			}
			for i := range b.Labels {
				b.Labels[i] = int32(rng.Intn(10))
			}
		}
		w.ar = oneMemberRing(t, w)
		loss, err := w.gradients(task, 0, n)
		if err != nil {
			t.Fatal(err)
		}
		// The step's gradient, as applyGradients makes it.
		g := append([]float32(nil), w.ar.buf[:w.ar.nGrads]...)
		if records := w.ar.buf[w.ar.nGrads]; !w.ar.mean {
			for i := range g {
				g[i] /= records
			}
		}
		return append(g, w.ar.buf[w.ar.nGrads]), loss
	}
	whole, wholeLoss := grads(n)
	chunked, chunkedLoss := grads(16) // 16+16+16+2
	if math.Abs(float64(wholeLoss-chunkedLoss)) > 1e-5 {
		t.Errorf("loss %v in chunks, %v whole", chunkedLoss, wholeLoss)
	}
	for i := range whole {
		if d := math.Abs(float64(whole[i] - chunked[i])); d > 1e-4*(1+math.Abs(float64(whole[i]))) {
			t.Fatalf("gradient %d: %v in chunks, %v whole", i, chunked[i], whole[i])
		}
	}
	if whole[len(whole)-1] != n || chunked[len(chunked)-1] != n {
		t.Errorf("step records %v and %v, want %d", whole[len(whole)-1], chunked[len(chunked)-1], n)
	}
}

// oneMemberRing gives w a ring of itself (world size 1).
func oneMemberRing(t *testing.T, w *Worker) *ringMember {
	t.Helper()
	ln, err := collective.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ring, err := ln.Form(context.Background(), collective.Config{Rank: 0, Peers: []string{ln.Addr()}, Version: 1, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ring.Close() })
	k := 0
	for _, p := range w.params {
		k += len(p.Value.Data)
	}
	return &ringMember{ln: ln, ring: ring, nGrads: k, buf: make([]float32, k+stepHeader+tagLen)}
}
