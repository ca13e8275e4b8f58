package master

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
	"elasticdl/proto/masterpb"
)

// waitMillis is how long a worker told to WAIT sleeps before asking again.
const waitMillis = 200

// worker returns the live worker making a request and marks it seen. A
// request from a worker this master did not launch, or already gave up
// on, is refused so that it cannot touch the job's state.
func (m *Master) worker(id int32) (*instance, error) {
	w, ok := m.workers[int(id)]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unknown worker %d: not launched by this master or already lost", id)
	}
	w.lastSeen = m.now()
	if !w.running {
		w.running = true
		m.noteRunningLocked(cluster.Worker)
	}
	return w, nil
}

// GetTask implements masterpb.MasterServer.
func (m *Master) GetTask(_ context.Context, req *masterpb.GetTaskRequest) (*masterpb.GetTaskResponse, error) {
	start := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.getTaskLatency != nil {
		defer func() { m.getTaskLatency.Observe(time.Since(start).Seconds()) }()
	}
	if _, err := m.worker(req.WorkerId); err != nil {
		return nil, err
	}
	if m.finished {
		return &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_DONE}, nil
	}
	a := m.disp.Get(int(req.WorkerId), m.now())
	switch a.Kind {
	case task.KindTask:
		t := a.Task
		pt := &masterpb.Task{
			Id:    t.ID,
			Type:  toProtoType(t.Type),
			Shard: &masterpb.Shard{Name: t.Shard, Start: t.Start, End: t.End},
			Epoch: int32(t.Epoch),
			// Evaluation: the version the pass was queued at (its key);
			// prediction: the pass number.
			ModelVersion: t.ModelVersion,
		}
		if t.Type == task.Training && m.trainingStart.IsZero() {
			m.trainingStart = m.now()
		}
		return &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_TASK, Task: pt}, nil
	case task.KindWait:
		return &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_WAIT, WaitMs: waitMillis}, nil
	default:
		return &masterpb.GetTaskResponse{Action: masterpb.GetTaskResponse_DONE}, nil
	}
}

// ReportTaskResult implements masterpb.MasterServer.
func (m *Master) ReportTaskResult(_ context.Context, req *masterpb.ReportTaskResultRequest) (*masterpb.ReportTaskResultResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.worker(req.WorkerId); err != nil {
		return nil, err
	}
	res := task.Result{
		Err:     req.Error,
		Records: req.Records,
		Corrupt: req.CorruptRecords,
		LossSum: req.LossSum,
		Steps:   req.Steps,
	}
	done, _ := m.disp.TaskInfo(req.TaskId)
	var preds *predictionRows
	if done.Type == task.Prediction && req.Error == "" && m.pred != nil {
		// Bad predictions fail the task (it is retried elsewhere, and fails
		// the job after --max_task_attempts) rather than the worker.
		var err error
		if preds, err = m.pred.check(done, req.Predictions, req.CorruptRecords); err != nil {
			res.Err = fmt.Sprintf("invalid predictions: %v", err)
			req.Error = res.Err
		}
	}
	if err := m.disp.Report(int(req.WorkerId), req.TaskId, res, m.now()); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "report of task %d by worker %d: %v", req.TaskId, req.WorkerId, err)
	}
	if req.Error != "" {
		m.summary.Tasks.Failed++
		m.log.Warn("task failed", "task", req.TaskId, "worker", req.WorkerId, "err", req.Error)
		delete(m.evalPending, req.TaskId)
		if err := m.disp.Err(); err != nil {
			m.endLocked(err)
		}
		return &masterpb.ReportTaskResultResponse{}, nil
	}
	m.summary.Tasks.Completed++
	if req.CorruptRecords > 0 {
		m.summary.CorruptRecords += req.CorruptRecords
		if m.summary.FirstCorruptRecord == "" {
			m.summary.FirstCorruptRecord = req.FirstCorruptError
		}
		m.log.Warn("corrupt records skipped", "task", req.TaskId, "count", req.CorruptRecords, "first", req.FirstCorruptError)
	}
	switch done.Type {
	case task.Training:
		if m.summary.FirstTaskTrainedAt == nil {
			t := m.now().UTC()
			m.summary.FirstTaskTrainedAt = &t
		}
		m.announceEpochsLocked()
		m.progress.add(m.now(), req.Records+req.CorruptRecords, req.LossSum, req.Steps)
		m.trainVersion = max(m.trainVersion, req.ModelVersion)
		m.maybeEvaluateLocked()
	case task.Evaluation:
		p := m.passes[done.ModelVersion]
		if em, ok := m.evalPending[req.TaskId]; ok && p != nil {
			p.add(em)
			delete(m.evalPending, req.TaskId)
		}
		if st, ok := m.disp.Evaluation(done.ModelVersion); ok && st.Complete && p != nil {
			r := p.result()
			m.summary.Evaluations = append(m.summary.Evaluations, r)
			auc := "n/a"
			if r.AUC != nil {
				auc = fmt.Sprintf("%.4f", *r.AUC)
			}
			m.log.Info("evaluation", "version", r.Version, "accuracy", fmt.Sprintf("%.4f", r.Accuracy), "auc", auc, "loss", fmt.Sprintf("%.4f", r.Loss),
				"records", r.Records, "versions_used", fmt.Sprintf("%d-%d", r.MinVersionUsed, r.MaxVersionUsed), "final", r.Final)
		}
	case task.Prediction:
		if preds != nil {
			if err := m.pred.add(preds); err != nil {
				m.endLocked(fmt.Errorf("write predictions: %w", err))
				return &masterpb.ReportTaskResultResponse{}, nil
			}
		}
	}
	m.advanceLocked()
	return &masterpb.ReportTaskResultResponse{}, nil
}

// advanceLocked moves the job on once the work queued so far is done:
// training done → evaluation (when there is validation data) → finished.
func (m *Master) advanceLocked() {
	if err := m.disp.Err(); err != nil {
		m.endLocked(err)
		return
	}
	if !m.disp.Finished() {
		return
	}
	if m.trainingEnd.IsZero() {
		m.trainingEnd = m.now()
		if m.cfg.training() && !m.cfg.UseAsync {
			// Sync SGD: apply the gradients of the last, incomplete
			// version before the final evaluation pulls the model.
			m.sendLiveWorkersLocked(true)
		}
	}
	if m.cfg.ValidationData != "" && !m.evalScheduled {
		m.evalScheduled = true
		if err := m.queueEvalLocked(m.trainVersion, true); err != nil {
			m.endLocked(err)
			return
		}
		m.log.Info("training done, evaluating", "validation_data", m.cfg.ValidationData, "records", m.evalRecords, "version", m.trainVersion)
		return
	}
	m.log.Info("all tasks done")
	m.endLocked(nil)
}

// maybeEvaluateLocked queues an evaluation pass when the model version
// training reports carry has crossed the next multiple of
// --evaluation_steps, unless training is over (the final pass follows).
// Several multiples crossed at once make one pass, at the highest.
func (m *Master) maybeEvaluateLocked() {
	n := m.cfg.EvaluationSteps
	if n <= 0 || m.cfg.ValidationData == "" || m.trainVersion < m.nextEvalAt {
		return
	}
	if p := m.disp.Progress(); p.EpochsDone == p.NumEpochs {
		return
	}
	v := m.trainVersion / n * n
	m.nextEvalAt = v + n
	if err := m.queueEvalLocked(v, false); err != nil {
		m.endLocked(err)
		return
	}
	m.log.Info("evaluating during training", "version", v, "evaluation_steps", n)
}

// ReportEvaluationMetrics implements masterpb.MasterServer. Metrics are held
// until their task is reported successful, so a retried task counts once.
func (m *Master) ReportEvaluationMetrics(_ context.Context, req *masterpb.ReportEvaluationMetricsRequest) (*masterpb.ReportEvaluationMetricsResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.worker(req.WorkerId); err != nil {
		return nil, err
	}
	t, ok := m.heldTask(int(req.WorkerId), req.TaskId)
	if !ok || t.Type != task.Evaluation {
		return nil, status.Errorf(codes.FailedPrecondition, "worker %d reported metrics for task %d, which is not an evaluation task in progress", req.WorkerId, req.TaskId)
	}
	if req.Records < 0 || req.Records > t.End-t.Start {
		return nil, status.Errorf(codes.InvalidArgument, "task %d has %d records, metrics claim %d", req.TaskId, t.End-t.Start, req.Records)
	}
	sums := make(map[string]float64, len(req.Sums))
	for k, v := range req.Sums {
		sums[k] = v
	}
	em := evalMetrics{records: req.Records, sums: sums, version: req.ModelVersion}
	if h := req.ScoreHistogram; h != nil {
		var err error
		if em.hist, err = histFromProto(h, req.Records); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "task %d: %v", req.TaskId, err)
		}
	}
	m.evalPending[req.TaskId] = em
	return &masterpb.ReportEvaluationMetricsResponse{}, nil
}

// heldTask returns the task id if worker holds it now.
func (m *Master) heldTask(worker int, id int64) (task.Task, bool) {
	for _, t := range m.disp.Held(worker) {
		if t.ID == id {
			return t, true
		}
	}
	return task.Task{}, false
}

// Heartbeat implements masterpb.MasterServer.
func (m *Master) Heartbeat(_ context.Context, req *masterpb.HeartbeatRequest) (*masterpb.HeartbeatResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.worker(req.WorkerId); err != nil {
		return nil, err
	}
	return &masterpb.HeartbeatResponse{Stop: m.finished}, nil
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
