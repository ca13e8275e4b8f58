package ps

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps/checkpoint"
	"elasticdl/proto/pserverpb"
)

// restoredFrom is the checkpoint a PS process restored at start.
type restoredFrom struct {
	dir     string
	version int64 // -1: none
}

// SaveModel implements pserverpb.PserverServer: it writes the shard —
// parameters, optimizer slots and embedding tables, as a periodic
// checkpoint holds them — atomically as req.Dir/version-N/variables-i-of-n.ckpt
// labelled N = req.Version, and returns when the file is in place. The
// master calls it on every shard with the same N at the end of training,
// so the final model of a job with embedding tables is a complete
// checkpoint version that --checkpoint_dir_for_init restores (re-sharded
// if the PS count differs). It does not touch the periodic checkpoints.
func (s *Server) SaveModel(_ context.Context, req *pserverpb.SaveModelRequest) (*pserverpb.SaveModelResponse, error) {
	if req.GetDir() == "" || req.GetVersion() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "save model: dir %q, version %d: want a directory and a version >= 0", req.GetDir(), req.GetVersion())
	}
	t := s.table.Load()
	if t == nil {
		return nil, status.Error(codes.FailedPrecondition, "save model: the shard is not initialized")
	}
	start := time.Now()
	s.cut.Lock()
	c := s.snapshot(t, req.GetVersion())
	s.cut.Unlock()
	path, err := checkpoint.Write(req.GetDir(), c)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "save model: %v", err)
	}
	s.log.Info("model saved", "path", path, "version", req.GetVersion(), "shard_version", t.version.Load(),
		"took", time.Since(start).Round(time.Millisecond))
	return &pserverpb.SaveModelResponse{Path: path}, nil
}

// GetApplied implements pserverpb.PserverServer.
func (s *Server) GetApplied(_ context.Context, req *pserverpb.GetAppliedRequest) (*pserverpb.GetAppliedResponse, error) {
	var tasks []int64
	if len(req.GetTaskIds()) > 0 {
		tasks = req.GetTaskIds()
	}
	return &pserverpb.GetAppliedResponse{Applied: s.applied.list(tasks), Version: s.Version(), Unknown: s.appliedUnknown.Load()}, nil
}

// GetStatus implements pserverpb.PserverServer.
func (s *Server) GetStatus(context.Context, *pserverpb.GetStatusRequest) (*pserverpb.GetStatusResponse, error) {
	r := &pserverpb.GetStatusResponse{Version: s.Version(), Initialized: s.table.Load() != nil, RestoredVersion: -1}
	if s.restored.version >= 0 {
		r.Restored, r.RestoredVersion, r.RestoredDir = true, s.restored.version, s.restored.dir
	}
	return r, nil
}
