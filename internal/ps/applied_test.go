package ps

import (
	"context"
	"maps"
	"math/rand"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

func keyed(req *pserverpb.PushGradientsRequest, task int64, index int32) *pserverpb.PushGradientsRequest {
	req.Minibatch = &pserverpb.MinibatchKey{TaskId: task, Index: index}
	return req
}

func appliedOf(t *testing.T, s *Server, tasks ...int64) map[int64][]int32 {
	t.Helper()
	r, err := s.GetApplied(context.Background(), &pserverpb.GetAppliedRequest{TaskIds: tasks})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64][]int32{}
	for _, m := range r.Applied {
		out[m.TaskId] = m.Spans
	}
	return out
}

// TestMinibatchAppliedOnce: a push of a minibatch the shard holds (a task
// redone after its worker died, a retried push) changes nothing.
func TestMinibatchAppliedOnce(t *testing.T) {
	s := newTestServer(t, nil)
	ctx := context.Background()
	if _, err := s.PushModel(ctx, testModel(0)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		task      int64
		index     int32
		duplicate bool
		version   int64
	}{{7, 0, false, 1}, {7, 1, false, 2}, {7, 0, true, 2}, {8, 0, false, 3}, {7, 1, true, 3}, {7, 3, false, 4}} {
		resp, err := s.PushGradients(ctx, keyed(gradPush(0, 0, 1, 1), want.task, want.index))
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Accepted || resp.Duplicate != want.duplicate || resp.Version != want.version {
			t.Fatalf("push %d (task %d, minibatch %d): %+v, want duplicate %v at version %d", i, want.task, want.index, resp, want.duplicate, want.version)
		}
	}
	got := appliedOf(t, s)
	if !slices.Equal(got[7], []int32{0, 2, 3, 4}) || !slices.Equal(got[8], []int32{0, 1}) {
		t.Errorf("applied %v", got)
	}
	if got := appliedOf(t, s, 8, 99); len(got) != 1 || !slices.Equal(got[8], []int32{0, 1}) {
		t.Errorf("applied of tasks 8, 99: %v", got)
	}
	// Without a key nothing is checked (a client that does not say).
	if resp := syncPush(t, s, gradPush(0, 0, 1, 1)); resp.Duplicate || resp.Version != 5 {
		t.Errorf("unkeyed push %+v", resp)
	}
}

// TestSyncMinibatchOnce: in sync SGD a minibatch is held from its push to
// its version's update; a second push of it meanwhile is a duplicate too,
// and adds nothing to the average.
func TestSyncMinibatchOnce(t *testing.T) {
	s := newSyncServer(t, 2, 0, 2, nil)
	if r := syncPush(t, s, keyed(gradPush(0, 0, 1, 1), 1, 0)); r.Duplicate || r.Version != 0 {
		t.Fatalf("first push %+v", r)
	}
	if r := syncPush(t, s, keyed(gradPush(1, 0, 9, 9), 1, 0)); !r.Duplicate || r.Version != 0 {
		t.Fatalf("the same minibatch again, pending: %+v, want a duplicate", r)
	}
	if r := syncPush(t, s, keyed(gradPush(1, 0, 3, 3), 1, 1)); r.Duplicate || r.Version != 1 {
		t.Fatalf("second minibatch %+v, want version 1 applied", r)
	}
	// The average of the two minibatches' gradients, not of three.
	want := testModelAfterAverage(t, []float32{1, 3})
	if p := s.Parameters(); !slices.Equal(p["b"], want) {
		t.Errorf("b = %v, want %v", p["b"], want)
	}
	if got := appliedOf(t, s); !slices.Equal(got[1], []int32{0, 2}) {
		t.Errorf("applied %v", got)
	}
	if r := syncPush(t, s, keyed(gradPush(0, 1, 5, 5), 1, 1)); !r.Duplicate {
		t.Errorf("an applied minibatch again: %+v, want a duplicate", r)
	}
}

// testModelAfterAverage is testModel's b after one update of lr 0.5 (the
// sync server's) with the average of gradients gs.
func testModelAfterAverage(t *testing.T, gs []float32) []float32 {
	t.Helper()
	var sum float32
	for _, g := range gs {
		sum += g
	}
	avg := sum / float32(len(gs))
	return []float32{-1 - 0.5*avg, 1} // gradPush puts its gradient on b[0]
}

// TestCheckpointHoldsTheAppliedMinibatches: a checkpoint is a consistent
// cut of the parameters and the minibatches in them, under concurrent
// pushes; a shard restored from it holds exactly those minibatches.
func TestCheckpointHoldsTheAppliedMinibatches(t *testing.T) {
	dir := t.TempDir()
	shards := newShards(t, 1, Config{CheckpointDir: dir, CheckpointSteps: 10})
	s := shards[0]
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for i := 0; i < 50; i++ {
				// Tasks overlap between workers: duplicates race.
				req := &pserverpb.PushGradientsRequest{}
				for _, name := range slices.Sorted(maps.Keys(ckptParams)) {
					g := make([]float32, ckptParams[name])
					for j := range g {
						g[j] = float32((i+j)%5) - 2
					}
					req.Gradients = append(req.Gradients, wire.EncodeTensor(name, []int{len(g)}, g))
				}
				keyed(req, int64(rng.Intn(3)), int32(rng.Intn(30)))
				// Unavailable: the same minibatch is being applied by
				// another push (the client would retry).
				if _, err := s.PushGradients(context.Background(), req); err != nil && status.Code(err) != codes.Unavailable {
					t.Error(err)
				}
			}
		}(w)
	}
	wg.Wait()
	applied := 0
	for _, sp := range appliedOf(t, s) {
		for i := 0; i+1 < len(sp); i += 2 {
			applied += int(sp[i+1] - sp[i])
		}
	}
	if int64(applied) != s.Version() {
		t.Fatalf("%d minibatches applied, version %d: each applied minibatch is one update", applied, s.Version())
	}
	v := s.Version() / 10 * 10
	waitWritten(t, s, v)
	set, err := checkpoint.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := set.Shards[0]
	inCkpt := 0
	for _, m := range c.Applied {
		for i := 0; i+1 < len(m.Spans); i += 2 {
			inCkpt += int(m.Spans[i+1] - m.Spans[i])
		}
	}
	// Labelled with the version that made it due; pushes that landed
	// before the cut are in it, with their minibatches.
	if inCkpt < int(set.Version) {
		t.Fatalf("checkpoint of version %d holds %d minibatches", set.Version, inCkpt)
	}
	// Written meanwhile: stop the writer and read the newest again.
	s.Close()
	if set, err = checkpoint.Load(dir, nil); err != nil {
		t.Fatal(err)
	}
	c = set.Shards[0]
	r, err := NewServer(Config{Index: 0, NumPS: 1, Optimizer: adam(t), CheckpointDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, want := appliedOf(t, r), map[int64][]int32{}
	held := int64(0)
	for _, m := range c.Applied {
		want[m.TaskId] = m.Spans
		for i := 0; i+1 < len(m.Spans); i += 2 {
			held += int64(m.Spans[i+1] - m.Spans[i])
		}
	}
	// Its version counts the updates the restored parameters hold, also
	// those that landed between the label's version and the snapshot.
	if r.Version() != held {
		t.Fatalf("restored at version %d holding %d minibatches (label %d, cut %d)", r.Version(), held, c.Version, c.CutVersion)
	}
	if len(got) != len(want) {
		t.Fatalf("restored %v, checkpoint %v", got, want)
	}
	for id, sp := range want {
		if !slices.Equal(got[id], sp) {
			t.Fatalf("restored %v, checkpoint %v", got, want)
		}
	}
}

// TestEmptyPushRecordsTheMinibatch: a minibatch with no gradients for a
// shard is recorded as applied, without an update (async: no version; sync:
// not one of the pushes a version averages).
func TestEmptyPushRecordsTheMinibatch(t *testing.T) {
	ctx := context.Background()
	s := newTestServer(t, nil)
	if _, err := s.PushModel(ctx, testModel(0)); err != nil {
		t.Fatal(err)
	}
	empty := func(task int64, index int32) *pserverpb.PushGradientsRequest {
		return keyed(&pserverpb.PushGradientsRequest{}, task, index)
	}
	if r := syncPush(t, s, empty(4, 0)); !r.Accepted || r.Duplicate || r.Version != 0 {
		t.Fatalf("empty push %+v, want accepted at version 0", r)
	}
	if r := syncPush(t, s, keyed(gradPush(0, 0, 1, 1), 4, 0)); !r.Duplicate || r.Version != 0 {
		t.Fatalf("the recorded minibatch with gradients: %+v, want a duplicate", r)
	}
	if got := appliedOf(t, s); !slices.Equal(got[4], []int32{0, 1}) {
		t.Fatalf("applied %v", got)
	}

	sy := newSyncServer(t, 2, 0, 2, nil)
	if r := syncPush(t, sy, empty(1, 0)); !r.Accepted || r.Version != 0 {
		t.Fatalf("sync empty push %+v", r)
	}
	syncPush(t, sy, keyed(gradPush(0, 0, 1, 1), 1, 1))
	if r := syncPush(t, sy, keyed(gradPush(1, 0, 3, 3), 1, 2)); r.Version != 1 {
		t.Fatalf("two pushes with gradients after an empty one: %+v, want version 1", r)
	}
	if want := testModelAfterAverage(t, []float32{1, 3}); !slices.Equal(sy.Parameters()["b"], want) {
		t.Errorf("b = %v, want %v: the empty push is not in the average", sy.Parameters()["b"], want)
	}
	if got := appliedOf(t, sy); !slices.Equal(got[1], []int32{0, 3}) {
		t.Errorf("sync applied %v", got)
	}
}

// TestAppliedBelongsToTheRun: a checkpoint's applied minibatches name the
// run's tasks; a new run on the same directory, or a warm start, holds
// none (its task 1 is not the old run's), while a relaunch of the same run
// holds them.
func TestAppliedBelongsToTheRun(t *testing.T) {
	dir := t.TempDir()
	s := newShards(t, 1, Config{CheckpointDir: dir, CheckpointSteps: 1, Run: "run-a"})[0]
	req := &pserverpb.PushGradientsRequest{}
	for _, name := range slices.Sorted(maps.Keys(ckptParams)) {
		req.Gradients = append(req.Gradients, wire.EncodeTensor(name, []int{ckptParams[name]}, make([]float32, ckptParams[name])))
	}
	if _, err := s.PushGradients(context.Background(), keyed(req, 1, 0)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, c := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"same run", Config{CheckpointDir: dir, Run: "run-a"}, 1},
		{"another run", Config{CheckpointDir: dir, Run: "run-b"}, 0},
		{"warm start", Config{CheckpointDir: t.TempDir(), CheckpointDirForInit: dir, Run: "run-a"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.NumPS, c.cfg.Optimizer = 1, adam(t)
			r, err := NewServer(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got := appliedOf(t, r); len(got) != c.want {
				t.Fatalf("restored applied %v, want %d tasks", got, c.want)
			}
			if r.Version() != 1 {
				t.Fatalf("version %d: the parameters are restored either way", r.Version())
			}
		})
	}
}

// TestReinitMakesAppliedUnknown: a shard initialized from a worker's copy
// of a relaunched shard's parameters says that what it holds is unknown.
func TestReinitMakesAppliedUnknown(t *testing.T) {
	ctx := context.Background()
	for _, reinit := range []bool{false, true} {
		s := newTestServer(t, nil)
		m := testModel(5)
		m.Reinit = reinit
		if _, err := s.PushModel(ctx, m); err != nil {
			t.Fatal(err)
		}
		r, err := s.GetApplied(ctx, &pserverpb.GetAppliedRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Unknown != reinit {
			t.Errorf("reinit %v: unknown %v", reinit, r.Unknown)
		}
	}
}
