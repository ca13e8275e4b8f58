package ps

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// Sync SGD (Config.UseAsync=false).
//
// The shard sums the gradients pushed for its current version and applies
// their average as one update, bumping the version by one, as soon as it
// holds effectiveN of them, where
//
//	effectiveN = min(GradsToWait, liveWorkers)   (liveWorkers unknown: GradsToWait)
//
// and liveWorkers is what the master last told it (SetLiveWorkers, on every
// worker launch and exit; --live_workers at start). A version therefore
// never waits for a worker that is gone: when liveWorkers drops to or below
// the number of gradients already accumulated, they are applied at once.
// Gradients are counted, not workers: a fast worker may contribute two
// gradients to one version (as in ElasticDL).
//
// A push computed on version v while the shard is at version cur is
// accepted when cur-v <= SyncVersionTolerance and then counts towards the
// current version; otherwise it is rejected (accepted=false, nothing
// applied or accumulated) and the worker re-pulls and recomputes the same
// minibatch. A push never waits: the version moves every effectiveN
// accepted pushes, and a worker's next pull gets whatever is current.
//
// In sync mode every version bump happens under syncMu.
type syncState struct {
	gradsToWait int
	tolerance   int64

	// Guarded by Server.syncMu.
	live       int   // -1: unknown
	generation int64 // highest SetLiveWorkers generation applied
	count      int   // gradients accumulated for the current version
	acc        map[*param][]float32
	scratch    []float32
	sparse     map[*embTable]*sparseAcc
	keys       []minibatch // the minibatches accumulated, held until applied
}

type sparseAcc struct {
	ids   []int64
	grads []float32
}

func (st *syncState) effectiveN() int {
	n := st.gradsToWait
	if st.live >= 0 && st.live < n {
		n = max(st.live, 1)
	}
	return n
}

// pushSync is PushGradients in sync mode, after validation.
func (s *Server) pushSync(t *table, req *pserverpb.PushGradientsRequest, targets []*param, sparse []sparseGrad) (*pserverpb.PushGradientsResponse, error) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	st := s.sync
	cur := t.version.Load()
	if stale := cur - req.GetVersion(); stale > st.tolerance {
		s.metrics.push(pushRejected)
		s.metrics.staleness(stale)
		s.log.Debug("stale gradients rejected", "worker", req.GetWorkerId(), "computed_on", req.GetVersion(), "version", cur)
		return &pserverpb.PushGradientsResponse{Accepted: false, Version: cur}, nil
	}
	if k := req.GetMinibatch(); k != nil {
		key := minibatch{task: k.GetTaskId(), index: k.GetIndex()}
		if resp, err := s.claim(t, key); resp != nil || err != nil {
			return resp, err
		}
		// Held until the version it goes into is applied.
		st.keys = append(st.keys, key)
	}
	grads := req.GetGradients()
	for i, p := range targets {
		a := st.acc[p]
		if a == nil {
			a = make([]float32, len(p.data))
			st.acc[p] = a
		}
		if cap(st.scratch) < len(a) {
			st.scratch = make([]float32, len(a))
		}
		g := st.scratch[:len(a)]
		if err := wire.DecodeInto(grads[i], g); err != nil {
			// Validation makes this unreachable; earlier tensors of this
			// push are already summed.
			s.metrics.push(pushFailed)
			return nil, status.Errorf(codes.Internal, "decode gradient %q: %v", p.name, err)
		}
		for j, x := range g {
			a[j] += x
		}
	}
	for _, g := range sparse {
		sa := st.sparse[g.t]
		if sa == nil {
			sa = &sparseAcc{}
			st.sparse[g.t] = sa
		}
		sa.ids = append(sa.ids, g.ids...)
		sa.grads = append(sa.grads, g.grads...)
	}
	st.count++
	s.metrics.push(pushAccumulated)
	s.metrics.staleness(cur - req.GetVersion())
	v := cur
	if st.count >= st.effectiveN() {
		var err error
		if v, err = s.applyAccumulatedLocked(t); err != nil {
			return nil, err
		}
	}
	return &pserverpb.PushGradientsResponse{Accepted: true, Version: v}, nil
}

// applyAccumulatedLocked applies the average of the accumulated gradients
// as one update and bumps the version; with nothing accumulated it does
// nothing. Caller holds syncMu.
func (s *Server) applyAccumulatedLocked(t *table) (int64, error) {
	st := s.sync
	if st.count == 0 {
		return t.version.Load(), nil
	}
	inv := 1 / float32(st.count)
	for p, a := range st.acc {
		for j := range a {
			a[j] *= inv
		}
		p.mu.Lock()
		err := s.opt.Apply(p.name, p.data, a, 1)
		p.mu.Unlock()
		if err != nil {
			return 0, status.Errorf(codes.Internal, "apply gradient %q: %v", p.name, err)
		}
		clear(a)
	}
	for e, sa := range st.sparse {
		ids, grads := mergeDuplicates(sa.ids, sa.grads, e.dim)
		for j := range grads {
			grads[j] *= inv
		}
		e.apply(s.rule, ids, grads)
		delete(st.sparse, e)
	}
	n := st.count
	st.count = 0
	s.applied.commit(st.keys...)
	st.keys = st.keys[:0]
	// Sync pushes and applies are serialized by syncMu: a snapshot taken
	// here is a consistent cut.
	v := t.version.Add(1)
	if s.saver.due(v) {
		s.saver.offer(s.snapshot(t, v))
	}
	s.metrics.syncUpdate(n)
	return v, nil
}

// SetLiveWorkers records the number of live workers (sync SGD: a version
// waits for at most that many gradients) and applies what is accumulated
// when that is already enough, or when flush is set. In async mode it only
// answers the version.
func (s *Server) SetLiveWorkers(_ context.Context, req *pserverpb.SetLiveWorkersRequest) (*pserverpb.SetLiveWorkersResponse, error) {
	if req.GetLiveWorkers() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "set live workers: %d < 0", req.GetLiveWorkers())
	}
	if s.sync == nil {
		return &pserverpb.SetLiveWorkersResponse{Version: s.Version()}, nil
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	st := s.sync
	if g := req.GetGeneration(); g == 0 || g >= st.generation {
		st.generation = max(st.generation, g)
		if int(req.GetLiveWorkers()) != st.live {
			s.log.Info("live workers", "live", req.GetLiveWorkers(), "was", st.live, "accumulated", st.count)
		}
		st.live = int(req.GetLiveWorkers())
	}
	t := s.table.Load()
	if t == nil {
		return &pserverpb.SetLiveWorkersResponse{Version: -1}, nil
	}
	if st.count > 0 && (req.GetFlush() || st.count >= st.effectiveN()) {
		if _, err := s.applyAccumulatedLocked(t); err != nil {
			return nil, err
		}
	}
	return &pserverpb.SetLiveWorkersResponse{Version: t.version.Load()}, nil
}

// LiveWorkers is the live-worker count the shard uses (-1: unknown, or
// async mode), and Accumulated the gradients waiting for the current
// version (tests).
func (s *Server) LiveWorkers() (live, accumulated int) {
	if s.sync == nil {
		return -1, 0
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	return s.sync.live, s.sync.count
}
