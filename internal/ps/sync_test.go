package ps

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

func newSyncServer(t *testing.T, gradsToWait int, tolerance int64, live int, reg *prometheus.Registry) *Server {
	t.Helper()
	s, err := NewServer(Config{Index: 0, NumPS: 1, Optimizer: sgd(t, "0.5"), Registry: reg,
		Sync: true, GradsToWait: gradsToWait, SyncVersionTolerance: tolerance, LiveWorkers: live})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PushModel(context.Background(), testModel(0)); err != nil {
		t.Fatal(err)
	}
	return s
}

func gradPush(worker int32, version int64, w0, b0 float32) *pserverpb.PushGradientsRequest {
	return &pserverpb.PushGradientsRequest{WorkerId: worker, Version: version, Gradients: []*pserverpb.Tensor{
		wire.EncodeTensor("w", []int{2, 2}, []float32{w0, 0, 0, 0}),
		wire.EncodeTensor("b", []int{2}, []float32{b0, 0}),
	}}
}

func syncPush(t *testing.T, s *Server, req *pserverpb.PushGradientsRequest) *pserverpb.PushGradientsResponse {
	t.Helper()
	resp, err := s.PushGradients(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestSyncConfigValidated(t *testing.T) {
	o := sgd(t, "0.1")
	for _, cfg := range []Config{
		{NumPS: 1, Optimizer: o, Sync: true, GradsToWait: 0},
		{NumPS: 1, Optimizer: o, Sync: true, GradsToWait: 2, SyncVersionTolerance: -1},
	} {
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("NewServer(%+v) accepted", cfg)
		}
	}
}

// N pushes of the current version make one update with their average.
func TestSyncAppliesAverageOfN(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newSyncServer(t, 3, 0, -1, reg)
	for i, g := range []float32{1, 2, 6} {
		resp := syncPush(t, s, gradPush(int32(i), 0, g, -g))
		if !resp.GetAccepted() {
			t.Fatalf("push %d rejected", i)
		}
		wantV := int64(0)
		if i == 2 {
			wantV = 1
		}
		if resp.GetVersion() != wantV || s.Version() != wantV {
			t.Fatalf("after push %d: response version %d, shard %d, want %d", i, resp.GetVersion(), s.Version(), wantV)
		}
		if i < 2 && s.Parameters()["w"][0] != 1 {
			t.Fatalf("after push %d the parameters moved: %v", i, s.Parameters()["w"])
		}
	}
	// mean gradient 3 (w[0]) and -3 (b[0]); lr 0.5.
	p := s.Parameters()
	if p["w"][0] != 1-0.5*3 || p["b"][0] != -1+0.5*3 || p["w"][1] != 2 || p["b"][1] != 1 {
		t.Fatalf("parameters %v, want w[0]=-0.5 b[0]=0.5 and the rest unchanged", p)
	}
	// The next version starts from an empty accumulator.
	for i := range 3 {
		syncPush(t, s, gradPush(int32(i), 1, 1, 0))
	}
	if s.Version() != 2 || s.Parameters()["w"][0] != -1 {
		t.Fatalf("second update: version %d, w[0]=%v; want 2, -1", s.Version(), s.Parameters()["w"][0])
	}
	if got := gather(t, reg)["elasticdl_ps_gradient_pushes_total{outcome=accumulated,shard=0}"]; got != 6 {
		t.Errorf("accumulated pushes metric %v, want 6", got)
	}
}

// A push staler than the tolerance is rejected and changes nothing.
func TestSyncRejectsStale(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newSyncServer(t, 2, 1, -1, reg)
	for v := range int64(2) { // two versions: 0 -> 2
		syncPush(t, s, gradPush(0, v, 1, 0))
		syncPush(t, s, gradPush(1, v, 1, 0))
	}
	before := s.Parameters()
	resp := syncPush(t, s, gradPush(2, 0, 100, 100)) // 2 behind, tolerance 1
	if resp.GetAccepted() || resp.GetVersion() != 2 {
		t.Fatalf("stale push answered accepted=%v version=%d, want false, 2", resp.GetAccepted(), resp.GetVersion())
	}
	if _, acc := s.LiveWorkers(); acc != 0 {
		t.Fatalf("stale push accumulated (%d)", acc)
	}
	// One behind is within tolerance, and counts.
	if resp := syncPush(t, s, gradPush(2, 1, 2, 0)); !resp.GetAccepted() {
		t.Fatal("push 1 version behind rejected with tolerance 1")
	}
	syncPush(t, s, gradPush(0, 2, 4, 0))
	after := s.Parameters()
	if s.Version() != 3 || after["w"][0] != before["w"][0]-0.5*3 || after["b"][0] != before["b"][0] {
		t.Fatalf("version %d, w[0] %v -> %v; want 3 and a step of the mean 3 only", s.Version(), before["w"][0], after["w"][0])
	}
	if got := gather(t, reg)["elasticdl_ps_gradient_pushes_total{outcome=rejected,shard=0}"]; got != 1 {
		t.Errorf("rejected pushes metric %v, want 1", got)
	}
}

// A worker lost mid-version: the master lowers the live count below what
// is accumulated, and the shard applies at once rather than waiting.
func TestSyncLiveWorkersLoweredMidVersion(t *testing.T) {
	s := newSyncServer(t, 3, 0, 3, nil)
	ctx := context.Background()
	syncPush(t, s, gradPush(0, 0, 1, 0))
	syncPush(t, s, gradPush(1, 0, 3, 0))
	if s.Version() != 0 {
		t.Fatal("applied before 3 gradients")
	}
	resp, err := s.SetLiveWorkers(ctx, &pserverpb.SetLiveWorkersRequest{LiveWorkers: 2, Generation: 5})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVersion() != 1 || s.Version() != 1 || s.Parameters()["w"][0] != 1-0.5*2 {
		t.Fatalf("after live=2: version %d, w[0]=%v; want 1, 0", s.Version(), s.Parameters()["w"][0])
	}
	// Now 2 gradients make a version.
	syncPush(t, s, gradPush(0, 1, 1, 0))
	if r := syncPush(t, s, gradPush(1, 1, 1, 0)); r.GetVersion() != 2 {
		t.Fatalf("with 2 live workers, 2 pushes gave version %d, want 2", r.GetVersion())
	}
	// An older generation (a call overtaken by a newer one) is ignored.
	if _, err := s.SetLiveWorkers(ctx, &pserverpb.SetLiveWorkersRequest{LiveWorkers: 3, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	if live, _ := s.LiveWorkers(); live != 2 {
		t.Fatalf("stale generation applied: live %d", live)
	}
	// No worker left: anything accumulated goes in at once; a flush applies
	// what is left (end of training).
	if _, err := s.SetLiveWorkers(ctx, &pserverpb.SetLiveWorkersRequest{LiveWorkers: 3, Generation: 6}); err != nil {
		t.Fatal(err)
	}
	syncPush(t, s, gradPush(0, 2, 1, 0))
	if _, err := s.SetLiveWorkers(ctx, &pserverpb.SetLiveWorkersRequest{LiveWorkers: 3, Generation: 7, Flush: true}); err != nil {
		t.Fatal(err)
	}
	if _, acc := s.LiveWorkers(); acc != 0 || s.Version() != 3 {
		t.Fatalf("after flush: accumulated %d, version %d; want 0, 3", acc, s.Version())
	}
	if _, err := s.SetLiveWorkers(ctx, &pserverpb.SetLiveWorkersRequest{LiveWorkers: -1}); err == nil {
		t.Fatal("negative live workers accepted")
	}
}

// Concurrent pushes: every accepted push is counted exactly once, so the
// version is accepted/N and the parameters moved by exactly that many
// averaged steps.
func TestSyncConcurrentPushes(t *testing.T) {
	const workers, each, n = 8, 50, 4
	s := newSyncServer(t, n, 1<<40, -1, nil)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				req := gradPush(int32(w), s.Version(), 1, 0)
				if _, err := s.PushGradients(context.Background(), req); err != nil {
					t.Error(err)
					return
				}
				_ = s.Parameters()
			}
		}()
	}
	wg.Wait()
	total := workers * each
	if s.Version() != int64(total/n) {
		t.Fatalf("version %d, want %d", s.Version(), total/n)
	}
	if got, want := s.Parameters()["w"][0], 1-0.5*float32(total/n); got != want {
		t.Fatalf("w[0] = %v, want %v", got, want)
	}
}

// Async with --lr_staleness_modulation: a gradient k versions stale moves
// the parameters by lr/k.
func TestAsyncLRStalenessModulation(t *testing.T) {
	s, err := NewServer(Config{NumPS: 1, Optimizer: sgd(t, "0.5"), LRStalenessModulation: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PushModel(context.Background(), testModel(0)); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		syncPush(t, s, gradPush(0, s.Version(), 0, 0))
	}
	syncPush(t, s, gradPush(1, 0, 1, 0)) // 4 versions stale
	if got := s.Parameters()["w"][0]; got != 1-0.5/4 {
		t.Fatalf("w[0] = %v, want %v", got, 1-0.5/4)
	}
	syncPush(t, s, gradPush(1, s.Version(), 1, 0)) // fresh: full step
	if got := s.Parameters()["w"][0]; got != 1-0.5/4-0.5 {
		t.Fatalf("w[0] = %v, want %v", got, 1-0.5/4-0.5)
	}
}
