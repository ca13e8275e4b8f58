// Package roleflags is the command line of the roles a job's master
// launches: the flags an `elasticdl worker` and an `elasticdl ps` accept,
// as one typed struct per role. The role declares its flags with Register
// and checks them with Validate; the master fills the same struct and
// renders it with Args. Keeping both sides in one place means a flag added
// to a role is a flag the master can pass, under the same name, default
// and meaning.
//
// The package is a leaf (the standard library only), so that the master,
// the command line and the PS server can all depend on it.
package roleflags

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	flag "github.com/spf13/pflag"
)

// The distribution strategies (ElasticDL's names): gradients go to
// parameter servers, or workers average them among themselves.
const (
	StrategyPS        = "ParameterServerStrategy"
	StrategyAllReduce = "AllreduceStrategy"
)

// CheckStrategy checks a --distribution_strategy value.
func CheckStrategy(s string) error {
	return checkEither("distribution_strategy", s, StrategyPS, StrategyAllReduce)
}

// checkEither refuses a value of --flag that is neither a nor b.
func checkEither(flag, v, a, b string) error {
	if v != a && v != b {
		return fmt.Errorf("--%s: %q is not %s or %s", flag, v, a, b)
	}
	return nil
}

// Worker holds every flag of `elasticdl worker`. Start from DefaultWorker.
type Worker struct {
	WorkerID   int    // --worker_id: given by the master; required
	MasterAddr string // --master_addr
	// PSAddrs are the parameter servers in shard order (--ps_addrs,
	// comma-separated); nil when the job has none.
	PSAddrs       []string
	ModelDef      string // --model_def
	ModelParams   string // --model_params (model.Params syntax)
	MinibatchSize int    // --minibatch_size
	Seed          int64  // --seed
	// DistributionStrategy (--distribution_strategy) is StrategyPS or
	// StrategyAllReduce; CollectiveAddr (--collective_addr, AllReduce) is
	// where the worker listens for its ring peers: host:port, port 0 for
	// any, the host being what peers dial.
	DistributionStrategy string
	CollectiveAddr       string
	// Optimizer (--optimizer, AllReduce: the workers apply the updates) is
	// an optimizer spec; empty: the model's.
	Optimizer string
	// GlobalBatchSize (--global_batch_size, AllReduce) is the records of
	// one step across the whole ring, whatever its size; 0: each member
	// takes MinibatchSize.
	GlobalBatchSize int
	// AllReduce checkpoints: the ring's rank 0 writes one every
	// CheckpointSteps steps under CheckpointDir, keeping KeepCheckpointMax.
	CheckpointDir     string // --checkpoint_dir
	CheckpointSteps   int64  // --checkpoint_steps
	KeepCheckpointMax int    // --keep_checkpoint_max
	// Modelled compute (--modelled_seconds_per_record, --modelled_cpus;
	// experiments that need more workers than the machine can compute): a
	// training minibatch takes its records × the seconds one record takes
	// on one CPU ÷ the worker's CPUs, spent waiting instead of computing;
	// 0: real compute.
	ModelledSecondsPerRecord float64
	ModelledCPUs             float64
	// UseAsync (--use_async) says whether the PS run async SGD; false:
	// sync SGD, where every step pulls first and a push may be rejected.
	// OverlapPush (--overlap_push, async) computes the next minibatch
	// while the last one's push is on its way (off by default: the extra
	// staleness costs accuracy; see docs/training.md).
	UseAsync    bool
	OverlapPush bool
	// TransportDType (--transport_dtype) is what dense gradients and
	// parameters travel as between workers and PS: "float32" or
	// "bfloat16" (half the bytes; the PS keep float32).
	TransportDType string
	// PSTransport (--ps_transport) is what carries pushes and pulls:
	// "direct" (plain TCP connections on the PS's port, the default) or
	// "grpc".
	PSTransport string
	// PreloadData (--preload_data, repeated) are the data sources the
	// worker opens as it starts, while it connects, so that its first
	// task does not wait for them (a gzipped IDX file takes a third of a
	// second to decompress); the master passes the job's.
	PreloadData []string
	// MasterTimeout (--master_timeout) is how long the worker retries a
	// master it cannot reach before it exits with the cause; the master
	// judges a worker that never reached it silent only after this much
	// more than its heartbeat timeout, so the worker's cause is what ends
	// it.
	MasterTimeout time.Duration
}

// DefaultWorkerMasterTimeout is the worker's --master_timeout default.
const DefaultWorkerMasterTimeout = time.Minute

// What carries a worker's pushes and pulls (--ps_transport).
const (
	PSTransportDirect = "direct"
	PSTransportGRPC   = "grpc"
)

// CheckPSTransport checks a --ps_transport value.
func CheckPSTransport(t string) error {
	return checkEither("ps_transport", t, PSTransportDirect, PSTransportGRPC)
}

// Transport element types (--transport_dtype).
const (
	DTypeFloat32  = "float32"
	DTypeBFloat16 = "bfloat16"
)

// CheckTransportDType checks a --transport_dtype value.
func CheckTransportDType(d string) error {
	return checkEither("transport_dtype", d, DTypeFloat32, DTypeBFloat16)
}

// DefaultWorker is a Worker with every flag at its default.
func DefaultWorker() Worker {
	return Worker{WorkerID: -1, MinibatchSize: 64, DistributionStrategy: StrategyPS, ModelledCPUs: 1, UseAsync: true, TransportDType: DTypeFloat32, PSTransport: PSTransportDirect,
		MasterTimeout: DefaultWorkerMasterTimeout}
}

// Register declares the worker's flags on fs, bound to w's fields, and
// sets w to the defaults.
func (w *Worker) Register(fs *flag.FlagSet) {
	d := DefaultWorker()
	fs.IntVar(&w.WorkerID, "worker_id", d.WorkerID, "this worker's ID, given by the master")
	fs.StringVar(&w.MasterAddr, "master_addr", d.MasterAddr, "host:port of the job's master")
	w.PSAddrs = d.PSAddrs
	fs.Var((*commaList)(&w.PSAddrs), "ps_addrs", "comma-separated host:port of the parameter servers, in shard order")
	fs.StringVar(&w.ModelDef, "model_def", d.ModelDef, "model to train")
	fs.StringVar(&w.ModelParams, "model_params", d.ModelParams, "the model's parameters, e.g. 'fields=62; dense=23'")
	fs.IntVar(&w.MinibatchSize, "minibatch_size", d.MinibatchSize, "records per gradient step")
	fs.Int64Var(&w.Seed, "seed", d.Seed, "seed of the initial model")
	fs.StringVar(&w.DistributionStrategy, "distribution_strategy", d.DistributionStrategy, "ParameterServerStrategy or AllreduceStrategy")
	fs.StringVar(&w.CollectiveAddr, "collective_addr", d.CollectiveAddr, "AllreduceStrategy: host:port to listen on for ring peers (port 0: any); the host is what peers dial")
	fs.StringVar(&w.Optimizer, "optimizer", d.Optimizer, "AllreduceStrategy: the optimizer spec the workers apply (empty: the model's)")
	fs.IntVar(&w.GlobalBatchSize, "global_batch_size", d.GlobalBatchSize, "AllreduceStrategy: records of one step across the ring, split among its members whatever their number (0: --minibatch_size each)")
	fs.StringVar(&w.CheckpointDir, "checkpoint_dir", d.CheckpointDir, "AllreduceStrategy: where the ring's rank 0 writes checkpoints")
	fs.Int64Var(&w.CheckpointSteps, "checkpoint_steps", d.CheckpointSteps, "AllreduceStrategy: checkpoint every this many steps (0: never)")
	fs.IntVar(&w.KeepCheckpointMax, "keep_checkpoint_max", d.KeepCheckpointMax, "AllreduceStrategy: checkpoint versions to keep (0: all)")
	fs.Float64Var(&w.ModelledSecondsPerRecord, "modelled_seconds_per_record", d.ModelledSecondsPerRecord, "modelled compute (experiments): a training record takes this long on one CPU, waited instead of computed (0: compute for real)")
	fs.Float64Var(&w.ModelledCPUs, "modelled_cpus", d.ModelledCPUs, "modelled compute: the CPUs this worker has (it waits records × --modelled_seconds_per_record ÷ this per minibatch)")
	fs.BoolVar(&w.UseAsync, "use_async", d.UseAsync, "the parameter servers run async SGD; false: sync SGD (pull before every step, redo rejected minibatches)")
	fs.StringVar(&w.TransportDType, "transport_dtype", d.TransportDType, "what dense gradients and parameters travel as between workers and PS: float32, or bfloat16 (half the bytes; the PS keep float32)")
	fs.StringVar(&w.PSTransport, "ps_transport", d.PSTransport, "what carries pushes and pulls to the PS: direct (plain TCP connections on the PS's port, with a fraction of gRPC's copies) or grpc")
	w.PreloadData = d.PreloadData
	fs.Var((*repeatedList)(&w.PreloadData), "preload_data", "a data source (as --training_data) to open while the worker starts, before its first task; repeatable")
	fs.DurationVar(&w.MasterTimeout, "master_timeout", d.MasterTimeout, "exit when the master has been unreachable this long, with the cause (a worker that never reached it says why)")
	fs.BoolVar(&w.OverlapPush, "overlap_push", d.OverlapPush, "async SGD: compute the next minibatch while the last one's gradients are pushed (they are then computed on parameters one update older)")
}

// Args renders w as the worker's command line. Every flag of a PS job's
// worker is written, in the order the master has always written them, so
// that a worker's command line in a log or a pod spec says everything it
// was told; the AllReduce flags follow when they apply.
func (w Worker) Args() []string {
	args := []string{
		"--worker_id=" + strconv.Itoa(w.WorkerID),
		"--master_addr=" + w.MasterAddr,
		"--ps_addrs=" + strings.Join(w.PSAddrs, ","),
		"--model_def=" + w.ModelDef,
		"--minibatch_size=" + strconv.Itoa(w.MinibatchSize),
		"--seed=" + strconv.FormatInt(w.Seed, 10),
	}
	if w.ModelParams != "" {
		args = append(args, "--model_params="+w.ModelParams)
	}
	if w.DistributionStrategy != "" && w.DistributionStrategy != StrategyPS {
		args = append(args, "--distribution_strategy="+w.DistributionStrategy)
	}
	if w.CollectiveAddr != "" {
		args = append(args, "--collective_addr="+w.CollectiveAddr)
	}
	if w.Optimizer != "" {
		args = append(args, "--optimizer="+w.Optimizer)
	}
	if w.GlobalBatchSize != 0 {
		args = append(args, "--global_batch_size="+strconv.Itoa(w.GlobalBatchSize))
	}
	if w.CheckpointDir != "" {
		args = append(args, "--checkpoint_dir="+w.CheckpointDir, "--checkpoint_steps="+strconv.FormatInt(w.CheckpointSteps, 10),
			"--keep_checkpoint_max="+strconv.Itoa(w.KeepCheckpointMax))
	}
	if w.ModelledSecondsPerRecord > 0 {
		args = append(args, "--modelled_seconds_per_record="+strconv.FormatFloat(w.ModelledSecondsPerRecord, 'g', -1, 64),
			"--modelled_cpus="+strconv.FormatFloat(w.ModelledCPUs, 'g', -1, 64))
	}
	if !w.UseAsync {
		args = append(args, "--use_async=false")
	} else if w.OverlapPush {
		args = append(args, "--overlap_push")
	}
	if w.TransportDType != "" && w.TransportDType != DTypeFloat32 {
		args = append(args, "--transport_dtype="+w.TransportDType)
	}
	if w.PSTransport != "" && w.PSTransport != PSTransportDirect {
		args = append(args, "--ps_transport="+w.PSTransport)
	}
	for _, d := range w.PreloadData {
		args = append(args, "--preload_data="+d)
	}
	if w.MasterTimeout != DefaultWorkerMasterTimeout {
		args = append(args, "--master_timeout="+w.MasterTimeout.String())
	}
	return args
}

// Validate checks what the worker cannot start without. The model and the
// addresses are checked by the worker itself, which knows the registry.
func (w Worker) Validate() error {
	if w.WorkerID < 0 {
		return errors.New("--worker_id: required")
	}
	if err := CheckStrategy(w.DistributionStrategy); err != nil {
		return err
	}
	if w.DistributionStrategy == StrategyAllReduce {
		if w.CollectiveAddr == "" {
			return errors.New("--collective_addr: required with --distribution_strategy=AllreduceStrategy")
		}
		if err := CheckCollectiveAddr(w.CollectiveAddr); err != nil {
			return fmt.Errorf("--collective_addr: %w", err)
		}
	}
	if err := CheckTransportDType(w.TransportDType); err != nil {
		return err
	}
	if err := CheckPSTransport(w.PSTransport); err != nil {
		return err
	}
	if w.MasterTimeout <= 0 {
		return fmt.Errorf("--master_timeout: must be positive, got %s", w.MasterTimeout)
	}
	if w.GlobalBatchSize < 0 {
		return fmt.Errorf("--global_batch_size: must be at least 0, got %d", w.GlobalBatchSize)
	}
	if err := CheckModelled(w.ModelledSecondsPerRecord); err != nil {
		return err
	}
	if !(w.ModelledCPUs > 0) || math.IsInf(w.ModelledCPUs, 0) {
		return fmt.Errorf("--modelled_cpus: must be a positive number, got %v", w.ModelledCPUs)
	}
	return CheckCheckpointFlags(w.CheckpointDir, w.CheckpointSteps, w.KeepCheckpointMax)
}

// CheckModelled checks --modelled_seconds_per_record: 0 (real compute) or
// a positive, finite time.
func CheckModelled(secondsPerRecord float64) error {
	if secondsPerRecord < 0 || math.IsNaN(secondsPerRecord) || math.IsInf(secondsPerRecord, 0) {
		return fmt.Errorf("--modelled_seconds_per_record: must be 0 (compute for real) or a positive time, got %v", secondsPerRecord)
	}
	return nil
}

// CheckCollectiveAddr checks that addr is host:port with a host that ring
// peers can dial: not empty or a wildcard (0.0.0.0, ::), and not a $(VAR)
// reference left unexpanded. On Kubernetes the master passes
// $(POD_IP):port, which the kubelet expands from the container's POD_IP
// variable (the downward API); a reference to a variable the container
// does not have stays as written.
func CheckCollectiveAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a port number (0: any)", addr, port)
	}
	switch ip := net.ParseIP(host); {
	case strings.Contains(host, "$("):
		return fmt.Errorf("%q: %s was not expanded: Kubernetes expands $(VAR) in a container's args only when VAR is one of its environment variables", addr, host)
	case host == "" || (ip != nil && ip.IsUnspecified()):
		return fmt.Errorf("%q: the host is the address ring peers dial, so it must be this worker's own address (on Kubernetes, its pod IP), not empty or a wildcard", addr)
	}
	return nil
}

// PS holds every flag of `elasticdl ps`. Start from DefaultPS: its zero
// value is not the defaults (UseAsync, LiveWorkers, MasterTimeout).
type PS struct {
	PSID  int    // --ps_id: this shard's index in [0, NumPS)
	NumPS int    // --num_ps_pods
	Addr  string // --addr: host:port to serve on; required
	// Optimizer is an optimizer spec (--optimizer), parsed by the PS.
	Optimizer   string
	MasterAddr  string // --master_addr; empty: no master to watch
	MetricsAddr string // --metrics_addr; empty: no metrics
	// MasterTimeout (--master_timeout): the PS exits when the master has
	// been unreachable this long (0: never).
	MasterTimeout time.Duration

	// Checkpoints (see ps.Config).
	CheckpointDir        string // --checkpoint_dir
	CheckpointSteps      int64  // --checkpoint_steps
	KeepCheckpointMax    int    // --keep_checkpoint_max
	CheckpointDirForInit string // --checkpoint_dir_for_init
	// Run (--run) names the job run: a checkpoint's applied minibatches
	// are restored only into the run that wrote them.
	Run string

	// UseAsync (--use_async) false selects sync SGD, which GradsToWait,
	// SyncVersionTolerance and LiveWorkers configure;
	// LRStalenessModulation is for async SGD only.
	UseAsync              bool
	GradsToWait           int   // --grads_to_wait
	SyncVersionTolerance  int64 // --sync_version_tolerance
	LiveWorkers           int   // --live_workers: -1 unknown
	LRStalenessModulation bool  // --lr_staleness_modulation
	// FrozenTables (--frozen_tables): pulls of ids the tables lack read
	// zeros and create no row (predict and evaluate jobs).
	FrozenTables bool
	// ModelledSecondsPerPush (--modelled_seconds_per_push, experiments):
	// every push takes this long, one at a time (0: none).
	ModelledSecondsPerPush float64
}

// DefaultPS is a PS with every flag at its default.
func DefaultPS() PS {
	return PS{
		PSID:          -1,
		Optimizer:     "sgd:learning_rate=0.01",
		MasterTimeout: 2 * time.Minute,
		UseAsync:      true,
		GradsToWait:   1,
		LiveWorkers:   -1,
	}
}

// Register declares the PS's flags on fs, bound to p's fields, and sets p
// to the defaults.
func (p *PS) Register(fs *flag.FlagSet) {
	d := DefaultPS()
	fs.IntVar(&p.PSID, "ps_id", d.PSID, "this parameter server's shard index")
	fs.IntVar(&p.NumPS, "num_ps_pods", d.NumPS, "number of parameter servers in the job")
	fs.StringVar(&p.Addr, "addr", d.Addr, "host:port to serve on")
	fs.StringVar(&p.Optimizer, "optimizer", d.Optimizer, "optimizer spec")
	fs.StringVar(&p.MasterAddr, "master_addr", d.MasterAddr, "host:port of the job's master")
	fs.StringVar(&p.MetricsAddr, "metrics_addr", d.MetricsAddr, "host:port to serve Prometheus metrics on (/metrics; empty: none)")
	fs.DurationVar(&p.MasterTimeout, "master_timeout", d.MasterTimeout, "exit when the master has been unreachable this long (0: never); on Kubernetes nothing else stops a PS whose master died")
	fs.StringVar(&p.CheckpointDir, "checkpoint_dir", d.CheckpointDir, "directory of the PS checkpoints: restored from at start, written every --checkpoint_steps")
	fs.Int64Var(&p.CheckpointSteps, "checkpoint_steps", d.CheckpointSteps, "checkpoint every this many versions of the shard (0: never)")
	fs.IntVar(&p.KeepCheckpointMax, "keep_checkpoint_max", d.KeepCheckpointMax, "complete checkpoint versions to keep (0: all)")
	fs.StringVar(&p.CheckpointDirForInit, "checkpoint_dir_for_init", d.CheckpointDirForInit, "checkpoint directory to start from when --checkpoint_dir has none")
	fs.StringVar(&p.Run, "run", d.Run, "the job run (set by the master): a checkpoint's record of applied minibatches is restored only into the run that wrote it")
	fs.BoolVar(&p.UseAsync, "use_async", d.UseAsync, "asynchronous SGD; false: sync SGD")
	fs.IntVar(&p.GradsToWait, "grads_to_wait", d.GradsToWait, "sync SGD: gradient pushes averaged into one update (capped by --live_workers)")
	fs.Int64Var(&p.SyncVersionTolerance, "sync_version_tolerance", d.SyncVersionTolerance, "sync SGD: reject gradients computed more than this many versions ago")
	fs.IntVar(&p.LiveWorkers, "live_workers", d.LiveWorkers, "sync SGD: live workers at start (the master updates it; -1: unknown)")
	fs.BoolVar(&p.LRStalenessModulation, "lr_staleness_modulation", d.LRStalenessModulation, "async SGD: scale the learning rate of a gradient by 1/staleness")
	fs.Float64Var(&p.ModelledSecondsPerPush, "modelled_seconds_per_push", d.ModelledSecondsPerPush, "experiments: every push takes this long, one push at a time (set by the master from --modelled_ps_seconds_per_push; 0: none)")
	fs.BoolVar(&p.FrozenTables, "frozen_tables", d.FrozenTables, "a pull of an id the embedding tables lack reads zeros and creates no row (set by the master for predict and evaluate jobs)")
}

// Args renders p as the PS's command line, as the master has always
// written it: the shard, address, optimizer and master always; the sync
// flags only for sync SGD (all of them) and --lr_staleness_modulation only
// for async SGD; the others only when they differ from their zero value
// (or, for --master_timeout, from its default). A setting the PS ignores
// in p's mode is left out: parsing Args gives back p with it at its
// default.
func (p PS) Args() []string {
	args := []string{
		"--ps_id=" + strconv.Itoa(p.PSID),
		"--num_ps_pods=" + strconv.Itoa(p.NumPS),
		"--addr=" + p.Addr,
		"--optimizer=" + p.Optimizer,
		"--master_addr=" + p.MasterAddr,
	}
	if !p.UseAsync {
		args = append(args, "--use_async=false",
			"--grads_to_wait="+strconv.Itoa(p.GradsToWait),
			"--sync_version_tolerance="+strconv.FormatInt(p.SyncVersionTolerance, 10),
			"--live_workers="+strconv.Itoa(p.LiveWorkers))
	} else if p.LRStalenessModulation {
		args = append(args, "--lr_staleness_modulation")
	}
	if p.MetricsAddr != "" {
		args = append(args, "--metrics_addr="+p.MetricsAddr)
	}
	if p.FrozenTables {
		args = append(args, "--frozen_tables")
	}
	if p.ModelledSecondsPerPush > 0 {
		args = append(args, "--modelled_seconds_per_push="+strconv.FormatFloat(p.ModelledSecondsPerPush, 'g', -1, 64))
	}
	if p.MasterTimeout != DefaultPS().MasterTimeout {
		args = append(args, "--master_timeout="+p.MasterTimeout.String())
	}
	for _, f := range []struct{ flag, value string }{
		{"checkpoint_dir", p.CheckpointDir},
		{"checkpoint_steps", strconv.FormatInt(p.CheckpointSteps, 10)},
		{"keep_checkpoint_max", strconv.Itoa(p.KeepCheckpointMax)},
		{"checkpoint_dir_for_init", p.CheckpointDirForInit},
		{"run", p.Run},
	} {
		if f.value != "" && f.value != "0" {
			args = append(args, "--"+f.flag+"="+f.value)
		}
	}
	return args
}

// Validate checks the PS's flags and returns the first problem, naming its
// flags. The optimizer spec is parsed (and checked) by the PS.
func (p PS) Validate() error {
	if !p.UseAsync {
		if err := CheckSyncFlags(p.GradsToWait, p.SyncVersionTolerance); err != nil {
			return err
		}
	}
	if p.NumPS < 1 || p.PSID < 0 || p.PSID >= p.NumPS {
		return fmt.Errorf("--ps_id=%d --num_ps_pods=%d: need 0 <= ps_id < num_ps_pods", p.PSID, p.NumPS)
	}
	if err := CheckCheckpointFlags(p.CheckpointDir, p.CheckpointSteps, p.KeepCheckpointMax); err != nil {
		return err
	}
	if p.Addr == "" {
		return errors.New("--addr: required")
	}
	if v := p.ModelledSecondsPerPush; v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("--modelled_seconds_per_push: must be 0 (none) or a positive time, got %v", v)
	}
	return nil
}

// CheckSyncFlags validates the sync SGD settings (--grads_to_wait,
// --sync_version_tolerance), which `elasticdl train` passes through to
// every PS.
func CheckSyncFlags(gradsToWait int, tolerance int64) error {
	if gradsToWait < 1 {
		return fmt.Errorf("--grads_to_wait=%d: must be >= 1", gradsToWait)
	}
	if tolerance < 0 {
		return fmt.Errorf("--sync_version_tolerance=%d: must be >= 0", tolerance)
	}
	return nil
}

// CheckCheckpointFlags checks the checkpoint settings that `elasticdl
// train` passes through to every PS, naming the flags; it reports every
// problem at once.
func CheckCheckpointFlags(dir string, steps int64, keep int) error {
	var errs []error
	if steps < 0 {
		errs = append(errs, fmt.Errorf("--checkpoint_steps: must not be negative, got %d", steps))
	}
	if steps > 0 && dir == "" {
		errs = append(errs, errors.New("--checkpoint_steps: needs --checkpoint_dir"))
	}
	if keep < 0 {
		errs = append(errs, fmt.Errorf("--keep_checkpoint_max: must not be negative, got %d", keep))
	}
	return errors.Join(errs...)
}

// commaList is a flag.Value of comma-separated strings; the empty string
// is the empty (nil) list.
// repeatedList is a flag given once per value (values may hold commas:
// csv://PATH?schema=y:label,x:num).
type repeatedList []string

func (l *repeatedList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, " ")
}

// Type names the value in help (pflag.Value).
func (l *repeatedList) Type() string { return "source" }

func (l *repeatedList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

type commaList []string

func (l *commaList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

// Type names the value in help (pflag.Value).
func (l *commaList) Type() string { return "host:port,..." }

func (l *commaList) Set(s string) error {
	*l = nil
	if s != "" {
		*l = strings.Split(s, ",")
	}
	return nil
}
