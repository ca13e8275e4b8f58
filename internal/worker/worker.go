// Package worker is a job's training process: it asks the master for tasks,
// reads the task's records, computes gradients against parameters pulled
// from the parameter servers, pushes the gradients back, and reports each
// task. Evaluation tasks compute metrics on the current model instead.
//
// Dense and sparse (recommender) models go through the same loop: a
// model's embeddings, when it has any, pull their rows for each minibatch
// and push their gradient rows along with the dense gradients.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/data"
	"elasticdl/internal/ps/client"
	"elasticdl/internal/rpc"
	"elasticdl/model"
	"elasticdl/nn"
	"elasticdl/proto/masterpb"
	"elasticdl/proto/pserverpb"
)

// Config is one worker's part of the job.
type Config struct {
	WorkerID      int
	MasterAddr    string
	PSAddrs       []string
	ModelDef      string
	ModelParams   string // model.Params syntax; the master's --model_params
	MinibatchSize int
	// Seed makes every worker build the same initial model, so whichever
	// push reaches a PS first, the job starts from the same point.
	Seed int64
	// HeartbeatInterval is how often the worker tells the master it lives.
	HeartbeatInterval time.Duration
	// MasterTimeout is how long the worker keeps retrying an unreachable
	// master before giving up.
	MasterTimeout time.Duration
	// AllReduce: no PS; the worker averages gradients with the others in a
	// ring (see allreduce.go), listening for its peers on CollectiveAddr.
	AllReduce      bool
	CollectiveAddr string
	// Optimizer overrides the model's optimizer spec (AllReduce).
	Optimizer string
	// GlobalBatch is the records of one AllReduce step across the ring,
	// split among its members; 0: MinibatchSize each.
	GlobalBatch int
	// AllReduce checkpoints: the ring's rank 0 writes one every
	// CheckpointSteps steps under CheckpointDir, keeping KeepCheckpointMax
	// versions (0: all).
	CheckpointDir     string
	CheckpointSteps   int64
	KeepCheckpointMax int
	// Modelled compute (experiments): a training minibatch waits its
	// records × ModelledSecondsPerRecord ÷ ModelledCPUs instead of
	// computing, then tells every PS shard it applied it (a push with no
	// gradients): tasks, reports and the exactly-once ledger stay real,
	// the model does not train. 0: real compute.
	ModelledSecondsPerRecord float64
	ModelledCPUs             float64
	// Sync: the PS run sync SGD (--use_async=false), so every step pulls
	// first and a push may be rejected. In async SGD a push answers with
	// the parameters (no pull the next step), and with OverlapPush the
	// next minibatch is computed while the last one's push is on its way:
	// its gradients are then computed on parameters one of this worker's
	// updates older. That costs accuracy (fashion_mnist.cnn, 2 workers, 2
	// epochs: 0.87-0.89 against 0.895), so it is off by default.
	Sync        bool
	OverlapPush bool
	// TransportDType is what dense gradients and parameters travel as
	// between this worker and the PS (--transport_dtype).
	TransportDType pserverpb.DType
	// PSOverGRPC sends pushes and pulls over gRPC rather than over direct
	// connections (--ps_transport=grpc).
	PSOverGRPC bool
	// PreloadData are data sources opened as the worker starts, while it
	// connects, rather than by the first task that reads them.
	PreloadData []string
}

// maxRejectedPushes bounds how often one minibatch is recomputed after the
// PS rejected its gradients (sync SGD: they were computed on a stale model).
const maxRejectedPushes = 100

// Worker trains tasks. Build it with New, then Run it once.
type Worker struct {
	cfg    Config
	spec   model.Spec
	log    *slog.Logger
	net    *nn.Model
	params []*nn.Param
	// tables are the PS tables behind the model's embeddings, each once;
	// grads[i] names the table of embedding i and carries its gradient
	// rows to a push. Both are empty for a dense model.
	tables []client.EmbeddingTable
	grads  []client.SparseGrad

	master    masterpb.MasterClient
	conn      *grpc.ClientConn
	ps        *client.Client
	sources   map[string]*openSource // guarded by sourcesMu
	sourcesMu sync.Mutex
	current   atomic.Int64 // task in progress, for heartbeats
	// held: the tasks got and not yet reported (a PS job's loop), told
	// to the master with every GetTask.
	heldMu sync.Mutex
	held   []int64
	// fresh: the parameters in hand are what the shards answered the last
	// push with (async SGD), so the next task starts without a pull.
	fresh bool
	// shuffleSpare is the features buffer of the last task shuffled (a
	// PS job's), where the next task's shuffle gathers its records.
	shuffleSpare []float32
	// rejected counts gradient pushes the PS declined (sync SGD, stale);
	// each was redone.
	rejected atomic.Int64
	// ar is the AllReduce state (nil in a PS job); rings its collective
	// counters (read by the heartbeat).
	ar    *ringMember
	rings ringCounters
}

// New checks the configuration and builds the model.
func New(cfg Config, reg *model.Registry, logger *slog.Logger) (*Worker, error) {
	var errs []error
	if cfg.MasterAddr == "" {
		errs = append(errs, errors.New("--master_addr: required"))
	}
	if len(cfg.PSAddrs) == 0 && !cfg.AllReduce {
		errs = append(errs, errors.New("--ps_addrs: required"))
	}
	if cfg.MinibatchSize < 1 {
		errs = append(errs, fmt.Errorf("--minibatch_size: must be at least 1, got %d", cfg.MinibatchSize))
	}
	spec, err := reg.Resolve(cfg.ModelDef, cfg.ModelParams)
	if err != nil {
		errs = append(errs, fmt.Errorf("--model_def/--model_params: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 2 * time.Second
	}
	if cfg.MasterTimeout <= 0 {
		cfg.MasterTimeout = time.Minute
	}
	if logger == nil {
		logger = slog.Default()
	}
	w := &Worker{
		cfg:     cfg,
		spec:    spec,
		log:     logger.With("worker", cfg.WorkerID),
		sources: map[string]*openSource{},
	}
	w.net = spec.Build(rand.New(rand.NewSource(cfg.Seed)))
	w.params = w.net.Params()
	embs := spec.Embeddings()
	if n := len(w.net.Embeddings()); n != len(embs) {
		return nil, fmt.Errorf("model %s: net has %d embeddings, spec describes %d", spec.Name, n, len(embs))
	}
	for _, t := range spec.Sparse.Tables() {
		w.tables = append(w.tables, client.EmbeddingTable{Name: t.Table, Dim: t.Dim, Initializer: t.Initializer})
	}
	for _, e := range embs {
		w.grads = append(w.grads, client.SparseGrad{Table: e.Table})
	}
	return w, nil
}

// Run works until the master says the job is done (nil), ctx ends, or the
// worker cannot go on (an error; the process then exits non-zero and the
// master decides whether to relaunch it).
func (w *Worker) Run(ctx context.Context) error {
	opts := append(rpc.DialOptions(), grpc.WithChainUnaryInterceptor(retryUnavailable(w.cfg.MasterTimeout, w.log)))
	conn, err := grpc.NewClient(w.cfg.MasterAddr, opts...)
	if err != nil {
		return fmt.Errorf("connect to master %s: %w", w.cfg.MasterAddr, err)
	}
	w.conn = conn
	w.master = masterpb.NewMasterClient(conn)
	defer conn.Close()
	for _, name := range w.cfg.PreloadData {
		w.source(name) // opens it in the background
	}
	defer w.closeSources()
	if w.cfg.ModelledSecondsPerRecord > 0 {
		w.log.Info("modelled compute: training minibatches wait instead of computing; the model does not train",
			"seconds_per_record", w.cfg.ModelledSecondsPerRecord, "cpus", w.cfg.ModelledCPUs)
	}
	if w.cfg.AllReduce {
		return w.withHeartbeat(ctx, w.runAllReduce)
	}

	w.log.Info("training with parameter servers", "ps", len(w.cfg.PSAddrs), "sync", w.cfg.Sync, "overlap_push", w.cfg.OverlapPush && !w.cfg.Sync,
		"transport_dtype", strings.ToLower(w.cfg.TransportDType.String()), "ps_over_grpc", w.cfg.PSOverGRPC, "preload_data", w.cfg.PreloadData)
	w.ps, err = client.Dial(ctx, w.cfg.PSAddrs, w.psOptions()...)
	if err != nil {
		return fmt.Errorf("connect to parameter servers: %w", err)
	}
	defer func() { w.ps.Close() }() // the client of the last layout
	if err := w.ps.PushModel(ctx, w.params, w.tables...); err != nil {
		return fmt.Errorf("push initial model: %w", err)
	}
	return w.withHeartbeat(ctx, w.loop)
}

// followLayout re-connects to the PS when a task comes with other PS
// addresses than the worker's (the job re-sharded its PS: the master
// hands out no task until every shard serves the new layout). The new
// client knows nothing of the shards: its next pull fetches everything,
// and PushModel registers the embedding tables with it (the shards are
// initialized: they keep their parameters).
func (w *Worker) followLayout(ctx context.Context, resp *masterpb.GetTaskResponse) error {
	if len(resp.PsAddrs) == 0 || slices.Equal(resp.PsAddrs, w.cfg.PSAddrs) {
		return nil
	}
	c, err := client.Dial(ctx, resp.PsAddrs, w.psOptions()...)
	if err != nil {
		return fmt.Errorf("connect to the re-sharded parameter servers: %w", err)
	}
	if err := c.PushModel(ctx, w.params, w.tables...); err != nil {
		c.Close()
		return fmt.Errorf("register with the re-sharded parameter servers: %w", err)
	}
	w.log.Info("parameter servers re-sharded: routing by the new layout", "layout", resp.PsLayout, "from", len(w.cfg.PSAddrs), "to", len(resp.PsAddrs))
	w.ps.Close()
	w.ps, w.cfg.PSAddrs = c, slices.Clone(resp.PsAddrs)
	w.fresh = false
	return nil
}

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

// retryUnavailable retries a call the master could not take — it is down,
// or a new master is taking over after a crash — with backoff, for up to
// timeout from the first failure; then the call fails with a clear error.
// (A request the dead master had taken is safe to repeat: the master
// answers a repeated GetTask with the same task, and a repeated report of
// a done task is refused without effect.)
func retryUnavailable(timeout time.Duration, log *slog.Logger) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var deadline time.Time
		backoff := 100 * time.Millisecond
		for {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if status.Code(err) != codes.Unavailable {
				return err
			}
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(timeout)
				log.Warn("master unavailable, retrying", "call", method, "for_up_to", timeout, "err", err)
			}
			if now.After(deadline) {
				return fmt.Errorf("master unavailable for %s, the worker's limit: %w", timeout, err)
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		}
	}
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

// modelledMinibatch spends the time n records take on this worker's CPUs
// (modelled compute), then records the minibatch on every shard that
// lacks it, with no gradients: the PS state does not change.
func (w *Worker) modelledMinibatch(ctx context.Context, n int, key *pserverpb.MinibatchKey, leaveOut func(int) bool, report *masterpb.ReportTaskResultRequest) error {
	d := time.Duration(float64(n) * w.cfg.ModelledSecondsPerRecord / w.cfg.ModelledCPUs * float64(time.Second))
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
	}
	if _, _, err := w.ps.PushMinibatch(ctx, nil, nil, w.cfg.WorkerID, client.AllShards, key, leaveOut); err != nil {
		return &fatalError{fmt.Errorf("record minibatch %d of task %d: %w", key.Index, key.TaskId, err)}
	}
	report.Records += int64(n)
	report.Steps++
	return nil
}

// fatalError marks a failure of the worker itself, not of the task's data.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

// openSource is a data source being opened, or open.
type openSource struct {
	done chan struct{}
	src  data.Source
	err  error
}

// source returns the source name, opening it in the background the first
// time. A failed open is forgotten once seen, so that a later task tries
// again.
func (w *Worker) source(name string) *openSource {
	w.sourcesMu.Lock()
	defer w.sourcesMu.Unlock()
	if o, ok := w.sources[name]; ok {
		return o
	}
	o := &openSource{done: make(chan struct{})}
	w.sources[name] = o
	go func() {
		defer close(o.done)
		o.src, o.err = data.Open(name)
	}()
	return o
}

func (w *Worker) closeSources() {
	w.sourcesMu.Lock()
	defer w.sourcesMu.Unlock()
	for _, o := range w.sources {
		<-o.done
		if o.err == nil {
			o.src.Close()
		}
	}
}

func (w *Worker) read(t *masterpb.Task, report *masterpb.ReportTaskResultRequest) (*data.Batch, error) {
	s := t.GetShard()
	o := w.source(s.Name)
	<-o.done
	if o.err != nil {
		w.sourcesMu.Lock()
		if w.sources[s.Name] == o {
			delete(w.sources, s.Name)
		}
		w.sourcesMu.Unlock()
		return nil, o.err
	}
	src := o.src
	b, err := src.Read(s.Start, s.End)
	if err != nil {
		return nil, err
	}
	report.CorruptRecords = int64(len(b.Corrupt))
	if len(b.Corrupt) > 0 {
		report.FirstCorruptError = b.Corrupt[0].Error()
	}
	return b, nil
}

// minibatches calls fn for consecutive slices of at most MinibatchSize
// records of b: their dense inputs shaped as the model's input, their
// categorical ids (none for a model without embeddings) and labels.
func (w *Worker) minibatches(b *data.Batch, fn func(x *nn.Tensor, ids []int64, labels []int32) error) error {
	nc := w.spec.NumCategorical()
	if nc > 0 && (b.NumCategorical != nc || len(b.Categorical) != b.N*nc) {
		return fmt.Errorf("records have %d categorical ids, model %s expects %d", b.NumCategorical, w.spec.Name, nc)
	}
	per := w.spec.InputSize()
	if len(b.Features) != b.N*per {
		return fmt.Errorf("records have %d dense features, model %s expects %d", len(b.Features)/max(b.N, 1), w.spec.Name, per)
	}
	for lo := 0; lo < b.N; lo += w.cfg.MinibatchSize {
		hi := min(lo+w.cfg.MinibatchSize, b.N)
		x := &nn.Tensor{Shape: w.spec.BatchShape(hi - lo), Data: b.Features[lo*per : hi*per]}
		if err := fn(x, b.Categorical[lo*nc:hi*nc], b.Labels[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// lookup installs a minibatch's ids in every embedding of the model and
// pulls their rows from the PS; a model without embeddings has nothing to
// look up.
func (w *Worker) lookup(ctx context.Context, ids []int64) error {
	for i, e := range w.net.Embeddings() {
		unique, err := e.SetBatch(ids, nil, w.spec.NumCategorical())
		if err != nil {
			return err
		}
		if err := w.ps.PullEmbeddings(ctx, w.grads[i].Table, unique, e.Rows()); err != nil {
			return &fatalError{fmt.Errorf("pull embeddings of table %s: %w", w.grads[i].Table, err)}
		}
	}
	return nil
}

func (w *Worker) train(ctx context.Context, t *masterpb.Task, report *masterpb.ReportTaskResultRequest) error {
	b, err := w.read(t, report)
	if err != nil {
		return err
	}
	// Minibatches mix the task's records in a new order each epoch, as a
	// shuffling data loader would; the master already shuffles task order.
	w.shuffleSpare = shuffle(b, t.Id, t.Epoch, w.shuffleSpare)
	tr := &taskTraining{w: w, t: t, report: report, index: -1}
	err = w.minibatches(b, func(x *nn.Tensor, ids []int64, labels []int32) error {
		// The index-th minibatch of the task's fixed order: a shard applies
		// it once, whoever pushes it, however often.
		tr.index++
		if tr.skip(len(labels)) {
			return nil
		}
		key := &pserverpb.MinibatchKey{TaskId: t.Id, Index: tr.index}
		if w.cfg.ModelledSecondsPerRecord > 0 {
			return w.modelledMinibatch(ctx, len(labels), key, tr.leaveOut(), report)
		}
		if w.cfg.Sync {
			return tr.syncStep(ctx, x, ids, labels, key)
		}
		return tr.asyncStep(ctx, x, ids, labels, key)
	})
	if werr := tr.settle(ctx); err == nil {
		err = werr
	}
	if tr.skipped > 0 {
		w.log.Info("task trained before: minibatches every PS shard held were skipped", "task", t.Id, "skipped", tr.skipped, "minibatches", tr.index+1)
	}
	return err
}

// taskTraining is the state of one training task's minibatches.
type taskTraining struct {
	w      *Worker
	t      *masterpb.Task
	report *masterpb.ReportTaskResultRequest
	index  int32 // of the minibatch in hand
	// held: once a shard says it holds a minibatch of this task (the task
	// was trained before, by a worker that died), which minibatches each
	// shard holds; nil until then.
	held    [][]int32
	skipped int
	// pending is the last minibatch's push (async), not yet answered.
	pending *pendingStep
}

// pendingStep is a pushed minibatch whose answer is still to come.
type pendingStep struct {
	push    *client.PendingPush
	records int
	loss    float32
}

// holds reports whether shard holds the minibatch in hand.
func (tr *taskTraining) holds(shard int) bool { return client.HoldsMinibatch(tr.held[shard], tr.index) }

// leaveOut is the push's Holds: nil until some shard is known to hold
// minibatches of the task.
func (tr *taskTraining) leaveOut() func(int) bool {
	if tr.held == nil {
		return nil
	}
	return tr.holds
}

// skip counts the minibatch in hand as trained when every shard holds it
// already: there is nothing to compute.
func (tr *taskTraining) skip(records int) bool {
	if tr.held == nil {
		return false
	}
	for i := range tr.held {
		if !tr.holds(i) {
			return false
		}
	}
	tr.skipped++
	tr.report.Records += int64(records)
	return true
}

// learn handles a push's answer: after the first duplicate it asks the
// shards which minibatches of the task they hold, to leave those out.
func (tr *taskTraining) learn(ctx context.Context, r client.PushResult) error {
	if !r.Duplicate || tr.held != nil {
		return nil
	}
	held, err := tr.w.ps.Applied(ctx, tr.t.Id)
	if err != nil {
		return &fatalError{fmt.Errorf("minibatches applied of task %d: %w", tr.t.Id, err)}
	}
	tr.held = held
	return nil
}

// compute runs forward and backward on the parameters in hand, leaving the
// gradients in the model (the embeddings' in w.grads).
func (tr *taskTraining) compute(x *nn.Tensor, labels []int32) (float32, error) {
	w := tr.w
	w.net.ZeroGrads()
	loss, dlogits, err := trainingLoss(w.net.Forward(x, true), labels, tr.t)
	if err != nil {
		return 0, err
	}
	w.net.Backward(dlogits)
	for i, e := range w.net.Embeddings() {
		w.grads[i].IDs, w.grads[i].Values = e.Grad()
	}
	return loss, nil
}

func (tr *taskTraining) count(records int, loss float32) {
	tr.report.Records += int64(records)
	tr.report.LossSum += float64(loss)
	tr.report.Steps++
}

// asyncStep trains one minibatch in async SGD: pull (unless the last
// push brought the parameters), compute, push asking for the parameters
// back. With OverlapPush the push is answered while the next minibatch
// computes (settle); otherwise here.
func (tr *taskTraining) asyncStep(ctx context.Context, x *nn.Tensor, ids []int64, labels []int32, key *pserverpb.MinibatchKey) error {
	w := tr.w
	if !w.fresh {
		if _, err := w.ps.Pull(ctx, w.params); err != nil {
			return &fatalError{fmt.Errorf("pull parameters: %w", err)}
		}
	}
	if err := w.lookup(ctx, ids); err != nil {
		return err
	}
	computedOn := w.ps.Versions()
	loss, err := tr.compute(x, labels)
	if err != nil {
		return err
	}
	// The previous minibatch's answer may say the shards hold this one.
	if err := tr.settle(ctx); err != nil {
		return err
	}
	if tr.skip(len(labels)) {
		return nil
	}
	tr.pending = &pendingStep{records: len(labels), loss: loss,
		push: w.ps.StartPush(ctx, client.PushRequest{Params: w.params, Sparse: w.grads, WorkerID: w.cfg.WorkerID, To: client.AllShards,
			Key: key, Holds: tr.leaveOut(), ComputedOn: computedOn, ReturnParameters: true})}
	if !w.cfg.OverlapPush {
		return tr.settle(ctx)
	}
	return nil
}

// settle waits for the pending push's answer and counts its minibatch.
func (tr *taskTraining) settle(ctx context.Context) error {
	p := tr.pending
	if p == nil {
		return nil
	}
	tr.pending = nil
	r, err := p.push.Wait()
	if err != nil {
		tr.w.fresh = false
		return &fatalError{fmt.Errorf("push gradients: %w", err)}
	}
	tr.w.fresh = r.Fresh
	if err := tr.learn(ctx, r); err != nil {
		return err
	}
	// Async shards accept every push.
	tr.count(p.records, p.loss)
	return nil
}

// syncStep trains one minibatch in sync SGD, which may reject gradients
// computed on a stale model: re-pull and redo the minibatch, pushing only
// to the shards that rejected it.
func (tr *taskTraining) syncStep(ctx context.Context, x *nn.Tensor, ids []int64, labels []int32, key *pserverpb.MinibatchKey) error {
	w := tr.w
	to := client.AllShards
	for attempt := 0; ; attempt++ {
		if err := w.lookup(ctx, ids); err != nil {
			return err
		}
		if _, err := w.ps.Pull(ctx, w.params); err != nil {
			return &fatalError{fmt.Errorf("pull parameters: %w", err)}
		}
		loss, err := tr.compute(x, labels)
		if err != nil {
			return err
		}
		r, err := w.ps.StartPush(ctx, client.PushRequest{Params: w.params, Sparse: w.grads, WorkerID: w.cfg.WorkerID, To: to,
			Key: key, Holds: tr.leaveOut()}).Wait()
		if err != nil {
			return &fatalError{fmt.Errorf("push gradients: %w", err)}
		}
		if err := tr.learn(ctx, r); err != nil {
			return err
		}
		if r.Accepted {
			tr.count(len(labels), loss)
			return nil
		}
		to = client.RejectedShards
		w.rejected.Add(1)
		w.log.Debug("stale gradients rejected by the PS; redoing the minibatch", "task", tr.t.Id, "attempt", attempt+1, "rejected_total", w.rejected.Load())
		if attempt >= maxRejectedPushes {
			return &fatalError{fmt.Errorf("push gradients: rejected %d times in a row", attempt+1)}
		}
	}
}

// readAndPull reads an evaluation or prediction task's records and pulls
// the current model to run them through.
func (w *Worker) readAndPull(ctx context.Context, t *masterpb.Task, report *masterpb.ReportTaskResultRequest) (*data.Batch, error) {
	b, err := w.read(t, report)
	if err != nil {
		return nil, err
	}
	if w.ps == nil {
		return b, nil // AllReduce: the model is here
	}
	if _, err := w.ps.Pull(ctx, w.params); err != nil {
		return nil, &fatalError{fmt.Errorf("pull parameters: %w", err)}
	}
	return b, nil
}

// modelVersion is the version of the parameters this worker computes
// with: the PS's, or its own step count in an AllReduce ring.
func (w *Worker) modelVersion() int64 {
	if w.ar != nil {
		return w.ar.steps
	}
	return w.ps.Version()
}

// infer runs the model forward, without training, over b's minibatches
// (pulling their embedding rows first) and hands fn each minibatch's
// logits and labels: what evaluation and prediction share.
func (w *Worker) infer(ctx context.Context, b *data.Batch, fn func(logits *nn.Tensor, labels []int32) error) error {
	return w.minibatches(b, func(x *nn.Tensor, ids []int64, labels []int32) error {
		if err := w.lookup(ctx, ids); err != nil {
			return err
		}
		return fn(w.net.Forward(x, false), labels)
	})
}

func (w *Worker) evaluate(ctx context.Context, t *masterpb.Task, report *masterpb.ReportTaskResultRequest) error {
	b, err := w.readAndPull(ctx, t, report)
	if err != nil {
		return err
	}
	var correct, lossSum float64
	var hist *data.ScoreHistogram // binary models: for the pass's AUC
	err = w.infer(ctx, b, func(logits *nn.Tensor, labels []int32) error {
		loss, _, err := nn.SoftmaxCrossEntropy(logits, labels)
		if err != nil {
			return err
		}
		if len(logits.Shape) == 2 && logits.Shape[1] == 2 {
			if hist == nil {
				hist = data.NewScoreHistogram()
			}
			for r, l := range labels {
				// softmax[1] of two logits.
				hist.Add(1/(1+math.Exp(float64(logits.Data[2*r])-float64(logits.Data[2*r+1]))), l)
			}
		}
		correct += float64(nn.CountCorrect(logits, labels))
		lossSum += float64(loss) * float64(len(labels))
		report.Records += int64(len(labels))
		report.Steps++
		return nil
	})
	if err != nil {
		return err
	}
	report.LossSum = lossSum
	req := &masterpb.ReportEvaluationMetricsRequest{
		WorkerId:     int32(w.cfg.WorkerID),
		TaskId:       t.Id,
		ModelVersion: w.modelVersion(),
		Records:      report.Records,
		Sums:         map[string]float64{"correct": correct, "loss": lossSum},
	}
	if hist != nil {
		req.ScoreHistogram = &masterpb.ScoreHistogram{Positive: hist.Positive, Negative: hist.Negative}
	}
	_, err = w.master.ReportEvaluationMetrics(ctx, req)
	if err != nil {
		return &fatalError{fmt.Errorf("report evaluation metrics of task %d: %w", t.Id, err)}
	}
	return nil
}

// predict computes the model's prediction for every record of the task:
// the predicted class and the class probabilities (softmax of the logits),
// carried back in the task's report.
func (w *Worker) predict(ctx context.Context, t *masterpb.Task, report *masterpb.ReportTaskResultRequest) error {
	b, err := w.readAndPull(ctx, t, report)
	if err != nil {
		return err
	}
	k := w.spec.NumClasses
	p := &masterpb.Predictions{
		NumClasses:     int32(k),
		RecordIndex:    make([]int64, 0, b.N),
		PredictedClass: make([]int32, 0, b.N),
		Probabilities:  make([]float32, 0, b.N*k),
	}
	off := 0
	err = w.infer(ctx, b, func(logits *nn.Tensor, labels []int32) error {
		n := len(labels)
		if len(logits.Data) != n*k {
			return fmt.Errorf("model output has %d values for %d records of %d classes", len(logits.Data), n, k)
		}
		for i := 0; i < n; i++ {
			row := logits.Data[i*k : (i+1)*k]
			p.RecordIndex = append(p.RecordIndex, b.Index[off+i])
			p.PredictedClass = append(p.PredictedClass, int32(nn.Argmax(row)))
			p.Probabilities = appendSoftmax(p.Probabilities, row)
		}
		off += n
		report.Records += int64(n)
		report.Steps++
		return nil
	})
	if err != nil {
		return err
	}
	report.Predictions = p
	return nil
}

// appendSoftmax appends the softmax of logits to dst.
func appendSoftmax(dst []float32, logits []float32) []float32 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	for _, v := range logits {
		dst = append(dst, float32(math.Exp(float64(v)-mx)/sum))
	}
	return dst
}

// shuffle permutes the records of b, reproducibly for a task (the same
// order whoever trains it). The features move into scratch (nil: a new
// buffer), and the buffer they were in is returned for the next task's.
func shuffle(b *data.Batch, taskID int64, epoch int32, scratch []float32) (spare []float32) {
	rng := rand.New(rand.NewSource(taskID*1_000_003 + int64(epoch)))
	perm := make([]int, b.N)
	for i := range perm {
		perm[i] = i
	}
	rng.Shuffle(b.N, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	return b.Permute(perm, scratch)
}

// trainingLoss is the loss of a training minibatch and its gradient; a loss
// that is not finite fails the task, naming its records.
func trainingLoss(logits *nn.Tensor, labels []int32, t *masterpb.Task) (float32, *nn.Tensor, error) {
	loss, dlogits, err := nn.SoftmaxCrossEntropy(logits, labels)
	if err != nil {
		return 0, nil, err
	}
	if math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
		return 0, nil, fmt.Errorf("loss is %v on records [%d,%d) of %s", loss, t.Shard.Start, t.Shard.End, t.Shard.Name)
	}
	return loss, dlogits, nil
}

// psOptions are the PS client's options for this worker's flags.
func (w *Worker) psOptions() []client.Option {
	opts := []client.Option{client.WithTransportDType(w.cfg.TransportDType)}
	if w.cfg.PSOverGRPC {
		opts = append(opts, client.WithGRPCOnly())
	}
	return opts
}
