package master

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/data"
	"elasticdl/internal/master/job"
	"elasticdl/internal/master/task"
	"elasticdl/proto/masterpb"
)

// waitMillis is how long a worker told to WAIT sleeps before asking again.
const waitMillis = 200

// rpcError gives a refused request its gRPC code.
func rpcError(err error) error {
	switch {
	case errors.Is(err, ErrStateLost):
		// The worker retries: the next master answers.
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, job.ErrUnknownWorker):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, job.ErrRejected):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, job.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// GetTask implements masterpb.MasterServer.
func (m *Master) GetTask(ctx context.Context, req *masterpb.GetTaskRequest) (*masterpb.GetTaskResponse, error) {
	if m.observe.metrics.getTaskLatency != nil {
		start := time.Now()
		defer func() { m.observe.metrics.getTaskLatency.Observe(time.Since(start).Seconds()) }()
	}
	// Never nil: the worker says what it holds (possibly nothing).
	held := append(make([]int64, 0, len(req.HeldTasks)), req.HeldTasks...)
	reply, err := m.step(ctx, job.GetTask{Worker: int(req.WorkerId), Held: held})
	if err != nil {
		return nil, rpcError(err)
	}
	a := reply.Assignment
	switch a.Kind {
	case task.KindTask:
		t := a.Task
		var addrs []string
		var layout int64
		if m.cfg.NumPS > 0 {
			addrs, layout = m.psAddrs()
		}
		return &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_TASK, PsLayout: layout, PsAddrs: addrs, Task: &masterpb.Task{
			Id:    t.ID,
			Type:  toProtoType(t.Type),
			Shard: &masterpb.Shard{Name: t.Shard, Start: t.Start, End: t.End},
			Epoch: int32(t.Epoch),
			// Evaluation: the version the pass was queued at (its key);
			// prediction: the pass number.
			ModelVersion: t.ModelVersion,
			Done:         t.Done,
		}}, nil
	case task.KindWait:
		return &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_WAIT, WaitMs: waitMillis}, nil
	default:
		return &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_DONE}, nil
	}
}

// ReportTaskResult implements masterpb.MasterServer.
func (m *Master) ReportTaskResult(ctx context.Context, req *masterpb.ReportTaskResultRequest) (*masterpb.ReportTaskResultResponse, error) {
	ev := job.ReportTask{
		Worker: int(req.WorkerId),
		TaskID: req.TaskId,
		Result: task.Result{
			Err:     req.Error,
			Records: req.Records,
			Corrupt: req.CorruptRecords,
			LossSum: req.LossSum,
			Steps:   req.Steps,
		},
		ModelVersion:      req.ModelVersion,
		FirstCorruptError: req.FirstCorruptError,
	}
	if p := req.Predictions; p != nil {
		ev.Predictions = &job.Predictions{RecordIndex: p.RecordIndex, PredictedClass: p.PredictedClass,
			Probabilities: p.Probabilities, NumClasses: int(p.NumClasses)}
	}
	if _, err := m.step(ctx, ev); err != nil {
		return nil, rpcError(err)
	}
	return &masterpb.ReportTaskResultResponse{}, nil
}

// ReportEvaluationMetrics implements masterpb.MasterServer.
func (m *Master) ReportEvaluationMetrics(ctx context.Context, req *masterpb.ReportEvaluationMetricsRequest) (*masterpb.ReportEvaluationMetricsResponse, error) {
	ev := job.ReportEval{Worker: int(req.WorkerId), TaskID: req.TaskId, Records: req.Records, Sums: req.Sums, ModelVersion: req.ModelVersion}
	if h := req.ScoreHistogram; h != nil {
		ev.Histogram = &data.ScoreHistogram{Positive: h.Positive, Negative: h.Negative}
	}
	if _, err := m.step(ctx, ev); err != nil {
		return nil, rpcError(err)
	}
	return &masterpb.ReportEvaluationMetricsResponse{}, nil
}

// Heartbeat implements masterpb.MasterServer.
func (m *Master) Heartbeat(ctx context.Context, req *masterpb.HeartbeatRequest) (*masterpb.HeartbeatResponse, error) {
	reply, err := m.step(ctx, job.Heartbeat{Worker: int(req.WorkerId), Collective: job.CollectiveStats{
		Ops: req.AllreduceOps, Bytes: req.AllreduceBytes, Seconds: req.AllreduceSeconds}})
	if err != nil {
		return nil, rpcError(err)
	}
	return &masterpb.HeartbeatResponse{Stop: reply.Stop, LetGo: reply.LetGo}, nil
}

func toProtoType(t task.Type) masterpb.TaskType {
	switch t {
	case task.Training:
		return masterpb.TaskType_TRAINING
	case task.Evaluation:
		return masterpb.TaskType_EVALUATION
	case task.Prediction:
		return masterpb.TaskType_PREDICTION
	}
	return masterpb.TaskType_TASK_TYPE_UNSPECIFIED
}
