package master

import (
	"context"
	"fmt"
	"time"

	"elasticdl/internal/master/job"
	"elasticdl/internal/wire"
	"elasticdl/proto/masterpb"
)

// ringGrace is how long a re-forming ring waits for an expected member
// that does not check in (a frozen process): members poll the ring status
// about every 100 ms and check in at once, so only a member that cannot
// is waited for this long.
const ringGrace = 3 * time.Second

// ringWaitMillis is how long a worker whose ring is forming waits before
// asking again: short, since a ring forms as soon as its members check in.
const ringWaitMillis = 50

// JoinRing implements masterpb.MasterServer.
func (m *Master) JoinRing(ctx context.Context, req *masterpb.JoinRingRequest) (*masterpb.RingResponse, error) {
	return m.ringReply(m.step(ctx, job.JoinRing{Worker: int(req.WorkerId), Addr: req.Addr}))
}

// RingStatus implements masterpb.MasterServer.
func (m *Master) RingStatus(ctx context.Context, req *masterpb.RingStatusRequest) (*masterpb.RingResponse, error) {
	return m.ringReply(m.step(ctx, job.RingStatus{Worker: int(req.WorkerId)}))
}

// ReportRingBroken implements masterpb.MasterServer.
func (m *Master) ReportRingBroken(ctx context.Context, req *masterpb.ReportRingBrokenRequest) (*masterpb.RingResponse, error) {
	return m.ringReply(m.step(ctx, job.RingBroken{Worker: int(req.WorkerId), Version: req.Version, Err: req.Error}))
}

func (m *Master) ringReply(reply job.Reply, err error) (*masterpb.RingResponse, error) {
	if err != nil {
		return nil, rpcError(err)
	}
	if reply.LetGo {
		return &masterpb.RingResponse{Leave: true}, nil
	}
	r := reply.Ring
	if r == nil || r.Members == nil {
		resp := &masterpb.RingResponse{WaitMs: ringWaitMillis}
		if r != nil {
			resp.Version, resp.Planned = r.Version, r.Planned
		}
		return resp, nil
	}
	resp := &masterpb.RingResponse{Version: r.Version, Formed: true, Lineage: r.Lineage,
		RestoreDir: r.Restore.Dir, RestoreVersion: r.Restore.Version}
	for _, mb := range r.Members {
		resp.Members = append(resp.Members, &masterpb.RingMember{WorkerId: int32(mb.Worker), Addr: mb.Addr})
	}
	for _, t := range reply.Held {
		resp.Held = append(resp.Held, &masterpb.TaskDone{TaskId: t.ID, Done: t.Done})
	}
	return resp, nil
}

// ReportApplied implements masterpb.MasterServer.
func (m *Master) ReportApplied(ctx context.Context, req *masterpb.ReportAppliedRequest) (*masterpb.ReportAppliedResponse, error) {
	ev := job.ReportApplied{Worker: int(req.WorkerId), Lineage: req.Lineage, Checkpoint: req.Checkpoint}
	for _, st := range req.Steps {
		as := job.AppliedStep{Step: st.Step, RingVersion: st.RingVersion}
		for _, p := range st.Parts {
			as.Parts = append(as.Parts, job.Part{Worker: int(p.WorkerId), Task: p.TaskId, Start: p.Start, End: p.End})
		}
		ev.Steps = append(ev.Steps, as)
	}
	if _, err := m.step(ctx, ev); err != nil {
		return nil, rpcError(err)
	}
	return &masterpb.ReportAppliedResponse{}, nil
}

// SettleRing implements masterpb.MasterServer.
func (m *Master) SettleRing(ctx context.Context, req *masterpb.SettleRingRequest) (*masterpb.RingResponse, error) {
	return m.ringReply(m.step(ctx, job.SettleRing{Worker: int(req.WorkerId), Version: req.Version}))
}

// CommitTask implements masterpb.MasterServer.
func (m *Master) CommitTask(ctx context.Context, req *masterpb.CommitTaskRequest) (*masterpb.CommitTaskResponse, error) {
	ev := job.CommitTask{Worker: int(req.WorkerId), TaskID: req.TaskId, Done: req.Done, OnBehalf: req.OnBehalf, Owner: int(req.OwnerId)}
	if _, err := m.step(ctx, ev); err != nil {
		return nil, rpcError(err)
	}
	return &masterpb.CommitTaskResponse{}, nil
}

// UploadModel implements masterpb.MasterServer. The parameters are kept
// until the core says whose to save; the checksum is recomputed here, so
// that the summary's checksums say what arrived.
func (m *Master) UploadModel(ctx context.Context, req *masterpb.UploadModelRequest) (*masterpb.UploadModelResponse, error) {
	sum := wire.Checksum(req.DenseParameters)
	if req.Checksum != sum {
		return nil, rpcError(fmt.Errorf("%w: worker %d's parameters have checksum %x, it says %x", job.ErrInvalid, req.WorkerId, sum, req.Checksum))
	}
	// A bad upload is refused here, so that another worker's can be saved.
	if err := m.checkParams(req.DenseParameters); err != nil {
		return nil, rpcError(fmt.Errorf("%w: worker %d's model: %v", job.ErrInvalid, req.WorkerId, err))
	}
	m.mu.Lock()
	if m.output.uploads == nil {
		m.output.uploads = map[int]*masterpb.UploadModelRequest{}
	}
	m.output.uploads[int(req.WorkerId)] = req
	m.mu.Unlock()
	if _, err := m.step(ctx, job.ModelUploaded{Worker: int(req.WorkerId), Version: req.Version, Checksum: sum}); err != nil {
		m.mu.Lock()
		delete(m.output.uploads, int(req.WorkerId))
		m.mu.Unlock()
		return nil, rpcError(err)
	}
	return &masterpb.UploadModelResponse{}, nil
}
