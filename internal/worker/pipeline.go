package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/proto/masterpb"
)

// Talking with the master: the heartbeat, and a PS job's task loop (the
// next task asked for while one trains, tasks held until their report
// lands). doTask, getTask and report serve the AllReduce loop too.

// withHeartbeat runs work with the heartbeat going; the master's "stop"
// cancels work's context with errJobOver, its "let go" with errLetGo, and
// a refused heartbeat (this worker is unknown: declared lost) with the
// refusal. Work cut short that way ends as the heartbeat said, not with
// the call it interrupted: let go is a clean end, a refusal is the error.
// A job over is work's to end (an AllReduce worker uploads the model).
func (w *Worker) withHeartbeat(ctx context.Context, work func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.heartbeat(ctx, cancel)
	}()
	defer wg.Wait()
	defer cancel(nil)
	err := work(ctx)
	if err == nil || ctx.Err() == nil {
		return err
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errLetGo):
		w.log.Info("let go by the master (scale down): exiting")
		return nil
	case errors.Is(cause, errJobOver), errors.Is(cause, context.Canceled):
		return err
	default:
		return cause
	}
}

var errJobOver = errors.New("the master says the job is over")

func (w *Worker) heartbeat(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		req := &masterpb.HeartbeatRequest{WorkerId: int32(w.cfg.WorkerID), TaskId: w.current.Load()}
		if w.cfg.AllReduce {
			ops, bytes, busy := w.rings.stats()
			req.AllreduceOps, req.AllreduceBytes, req.AllreduceSeconds = ops, bytes, busy.Seconds()
		}
		resp, err := w.master.Heartbeat(ctx, req)
		if err != nil {
			if status.Code(err) == codes.NotFound || status.Code(err) == codes.FailedPrecondition {
				cancel(fmt.Errorf("master refused heartbeat: %w", err))
				return
			}
			w.log.Debug("heartbeat", "err", err)
			continue
		}
		switch {
		case resp.LetGo:
			cancel(errLetGo)
			return
		case resp.Stop:
			cancel(errJobOver)
			return
		}
	}
}

func (w *Worker) loop(ctx context.Context) error {
	// A task cannot start before its data is open: ask for the first one
	// once the preloaded sources are (whether they opened or not: a
	// failure is the task's), so that another worker may take it meanwhile.
	for _, name := range w.cfg.PreloadData {
		select {
		case <-w.source(name).done:
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), errJobOver) {
				return nil
			}
			return context.Cause(ctx)
		}
	}
	err := w.pipelinedLoop(ctx)
	if err != nil && errors.Is(context.Cause(ctx), errJobOver) {
		return nil
	}
	return err
}

// pipelinedLoop runs tasks until the master says the job is done. The
// master's answers cost a durable write each (it persists its state before
// it answers), so they are kept off the task path: while a task trains,
// the next one is asked for (the request says the worker holds the task in
// hand), and a task's report travels while the next task trains. At most
// one report is on its way. A task whose report is lost with the worker
// is done again elsewhere, and the PS shards skip the minibatches they
// hold: exactly once still. A WAIT to an early request is dropped, and
// asked again once the reports have landed; a DONE is final (the job is
// over, or the master let this worker go as it answered), so the worker
// exits once its reports have landed.
func (w *Worker) pipelinedLoop(ctx context.Context) error {
	var (
		next    <-chan taskAnswer // the next task's request, on its way
		reports reportSender
	)
	defer reports.wait()
	for {
		var ans taskAnswer
		if next != nil {
			ans = <-next
			next = nil
			if ans.err == nil && ans.resp.Action == masterpb.GetTaskResponse_WAIT {
				ans.resp = nil // asked early: ask again with nothing on its way
			}
		}
		if ans.err == nil && ans.resp == nil {
			if err := reports.wait(); err != nil {
				return err
			}
			ans.resp, ans.err = w.getTask(ctx)
		}
		if ans.err != nil {
			return ans.err
		}
		resp := ans.resp
		switch resp.Action {
		case masterpb.GetTaskResponse_DONE:
			if err := reports.wait(); err != nil {
				return err
			}
			w.log.Info("job done, exiting", "rejected_pushes", w.rejected.Load())
			return nil
		case masterpb.GetTaskResponse_WAIT:
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(time.Duration(resp.WaitMs) * time.Millisecond):
			}
			continue
		case masterpb.GetTaskResponse_TASK:
		default:
			return fmt.Errorf("master sent unknown action %v", resp.Action)
		}
		w.hold(resp.Task.Id)
		if err := w.followLayout(ctx, resp); err != nil {
			return err
		}
		next = w.askEarly(ctx)
		report, err := w.doTask(ctx, resp.Task)
		if err != nil {
			return err
		}
		if err := reports.wait(); err != nil {
			return err
		}
		reports.send(func() error { return w.report(ctx, report) })
	}
}

// taskAnswer is a GetTask's outcome.
type taskAnswer struct {
	resp *masterpb.GetTaskResponse
	err  error
}

// askEarly asks for the next task now, in the background.
func (w *Worker) askEarly(ctx context.Context) <-chan taskAnswer {
	ch := make(chan taskAnswer, 1)
	go func() {
		resp, err := w.getTask(ctx)
		if err == nil && resp.GetAction() == masterpb.GetTaskResponse_TASK {
			w.readAhead(resp.GetTask())
		}
		ch <- taskAnswer{resp, err}
	}()
	return ch
}

// reportSender sends one report at a time in the background.
type reportSender struct{ done chan error }

func (r *reportSender) send(report func() error) {
	done := make(chan error, 1)
	r.done = done
	go func() { done <- report() }()
}

// wait returns the report's outcome once it has landed (nil when none
// was sent).
func (r *reportSender) wait() error {
	if r.done == nil {
		return nil
	}
	err := <-r.done
	r.done = nil
	return err
}

// hold records a task the master handed out; report lets it go.
func (w *Worker) hold(id int64) {
	w.heldMu.Lock()
	w.held = append(w.held, id)
	w.heldMu.Unlock()
}

func (w *Worker) letGo(id int64) {
	w.heldMu.Lock()
	w.held = slices.DeleteFunc(w.held, func(h int64) bool { return h == id })
	w.heldMu.Unlock()
}

// getTask asks for work, saying what the worker holds: a task the master
// handed out in an answer that never arrived comes again.
func (w *Worker) getTask(ctx context.Context) (*masterpb.GetTaskResponse, error) {
	req := &masterpb.GetTaskRequest{WorkerId: int32(w.cfg.WorkerID)}
	if w.ar != nil {
		for _, rt := range w.ar.book.tasks {
			req.HeldTasks = append(req.HeldTasks, rt.t.Id)
		}
	} else {
		w.heldMu.Lock()
		req.HeldTasks = slices.Clone(w.held)
		w.heldMu.Unlock()
	}
	resp, err := w.master.GetTask(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("get task from master %s: %w", w.cfg.MasterAddr, err)
	}
	return resp, nil
}

// runTask trains or evaluates one task and reports it. Errors that are the
// task's (bad data, NaN loss) are reported to the master, which retries the
// task elsewhere or fails the job; errors that are the worker's (master or
// PS gone, ctx ended) end the worker.
func (w *Worker) runTask(ctx context.Context, t *masterpb.Task) error {
	report, err := w.doTask(ctx, t)
	if err != nil {
		return err
	}
	return w.report(ctx, report)
}

// doTask trains, evaluates or predicts one task and returns its report;
// an error is the worker's.
func (w *Worker) doTask(ctx context.Context, t *masterpb.Task) (*masterpb.ReportTaskResultRequest, error) {
	w.current.Store(t.Id)
	defer w.current.Store(0)
	report := &masterpb.ReportTaskResultRequest{WorkerId: int32(w.cfg.WorkerID), TaskId: t.Id}
	var taskErr error
	switch t.Type {
	case masterpb.TaskType_TRAINING:
		taskErr = w.train(ctx, t, report)
	case masterpb.TaskType_EVALUATION:
		taskErr = w.evaluate(ctx, t, report)
	case masterpb.TaskType_PREDICTION:
		taskErr = w.predict(ctx, t, report)
	default:
		taskErr = fmt.Errorf("task type %v is not supported by this worker", t.Type)
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	var fatal *fatalError
	if errors.As(taskErr, &fatal) {
		return nil, fatal.err
	}
	if taskErr != nil {
		report.Error = taskErr.Error()
		report.Predictions = nil
		w.log.Warn("task failed", "task", t.Id, "err", taskErr)
	}
	report.ModelVersion = w.modelVersion()
	return report, nil
}

// report sends a task's report; the task is then no longer held.
func (w *Worker) report(ctx context.Context, report *masterpb.ReportTaskResultRequest) error {
	_, err := w.master.ReportTaskResult(ctx, report)
	if err == nil || status.Code(err) == codes.FailedPrecondition {
		w.letGo(report.TaskId)
	}
	if err != nil {
		if status.Code(err) == codes.FailedPrecondition {
			// The master took the task back (a timeout), or this is the
			// repeat of a report a master that died had already taken.
			w.log.Warn("report refused", "task", report.TaskId, "err", err)
			return nil
		}
		return fmt.Errorf("report task %d: %w", report.TaskId, err)
	}
	return nil
}
