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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"elasticdl/internal/ps/client"
	"elasticdl/internal/rpc"
	"elasticdl/internal/tlsid"
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
	// master before giving up (--master_timeout); a worker that never
	// reached it then exits with the cause (see masterLink).
	MasterTimeout time.Duration
	// AllReduce: no PS; the worker averages gradients with the others in a
	// ring (see allreduce.go), listening for its peers on CollectiveAddr.
	AllReduce      bool
	CollectiveAddr string
	// Creds, when set, make the ring's links mutual TLS between the job's
	// workers (collective.ListenTLS); nil: plaintext.
	Creds *tlsid.Creds
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
	ahead     *aheadRead   // the next task's records, read while one trains; guarded by sourcesMu
	current   atomic.Int64 // task in progress, for heartbeats
	// held: the tasks got and not yet reported (a PS job's loop), told
	// to the master with every GetTask.
	heldMu sync.Mutex
	held   []int64
	// fresh: the parameters in hand are what the shards answered the last
	// push with (async SGD), so the next task starts without a pull.
	fresh bool
	// registered: the model went to the PS of the current layout (with
	// the first task: followLayout).
	registered bool
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
	link := &masterLink{addr: w.cfg.MasterAddr, timeout: w.cfg.MasterTimeout, log: w.log}
	opts := append(rpc.DialOptions(w.cfg.Creds, tlsid.Master), grpc.WithChainUnaryInterceptor(link.retryUnavailable))
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
	// The model goes to the PS with the first task (followLayout), whose
	// answer names the job's current layout: a worker launched while the
	// PS re-shard was given the layout being retired.
	return w.withHeartbeat(ctx, w.loop)
}

// fatalError marks a failure of the worker itself, not of the task's data.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

// modelVersion is the version of the parameters this worker computes
// with: the PS's, or its own step count in an AllReduce ring.
func (w *Worker) modelVersion() int64 {
	if w.ar != nil {
		return w.ar.steps
	}
	return w.ps.Version()
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
