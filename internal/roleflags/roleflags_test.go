package roleflags

import (
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	flag "github.com/spf13/pflag"
)

// parse registers T's flags on a fresh FlagSet and parses args into a T.
func parse[T any, P interface {
	*T
	Register(*flag.FlagSet)
}](t *testing.T, args []string) T {
	t.Helper()
	var v T
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	P(&v).Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	if fs.NArg() > 0 {
		t.Fatalf("parse %q: stray arguments %q", args, fs.Args())
	}
	return v
}

func TestRegisterSetsTheDefaults(t *testing.T) {
	if got := parse[Worker](t, nil); !reflect.DeepEqual(got, DefaultWorker()) {
		t.Errorf("worker: %+v, want %+v", got, DefaultWorker())
	}
	if got := parse[PS](t, nil); got != DefaultPS() {
		t.Errorf("ps: %+v, want %+v", got, DefaultPS())
	}
}

func TestWorkerRoundTrip(t *testing.T) {
	full := Worker{WorkerID: 7, MasterAddr: "10.0.0.1:50001", PSAddrs: []string{"ps-0:2222", "ps-1:2223"},
		ModelDef: "fashion_mnist.cnn", MinibatchSize: 32, Seed: -3, DistributionStrategy: StrategyPS, ModelledCPUs: 1, UseAsync: true, TransportDType: DTypeFloat32, PSTransport: PSTransportDirect,
		MasterTimeout: DefaultWorkerMasterTimeout}
	modelled := full
	modelled.ModelledSecondsPerRecord, modelled.ModelledCPUs = 0.00025, 2.5
	oneNoPS := full
	oneNoPS.PSAddrs = nil
	allReduce := oneNoPS
	allReduce.DistributionStrategy, allReduce.CollectiveAddr, allReduce.Optimizer = StrategyAllReduce, "10.0.0.7:0", "adam:learning_rate=0.01"
	withParams := full
	withParams.ModelDef, withParams.ModelParams = "ctr.xdeepfm", "dense=23;fields=62"
	sync := full
	sync.UseAsync = false
	overlap := full
	overlap.OverlapPush, overlap.TransportDType = true, DTypeBFloat16
	overGRPC := full
	overGRPC.PSTransport = PSTransportGRPC
	preload := full
	preload.PreloadData = []string{"/data/train-images-idx3-ubyte.gz", "csv:///data/v.csv?schema=y:label,x:num"}
	patient := full
	patient.MasterTimeout = 90 * time.Second
	for _, w := range []Worker{DefaultWorker(), full, modelled, oneNoPS, allReduce, withParams, sync, overlap, overGRPC, preload, patient} {
		args := w.Args()
		if got := parse[Worker](t, args); !reflect.DeepEqual(got, w) {
			t.Errorf("%q parsed to %+v, want %+v", args, got, w)
		}
	}
}

// TestWorkerArgsAsTheMasterWrites pins the worker command line the master
// has always built.
func TestWorkerArgsAsTheMasterWrites(t *testing.T) {
	w := Worker{WorkerID: 3, MasterAddr: "127.0.0.1:4000", PSAddrs: []string{"127.0.0.1:4001", "127.0.0.1:4002"},
		ModelDef: "fashion_mnist.mlp", MinibatchSize: 64, Seed: 0, UseAsync: true, MasterTimeout: DefaultWorkerMasterTimeout}
	want := "--worker_id=3 --master_addr=127.0.0.1:4000 --ps_addrs=127.0.0.1:4001,127.0.0.1:4002 --model_def=fashion_mnist.mlp --minibatch_size=64 --seed=0"
	if got := strings.Join(w.Args(), " "); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestPSRoundTrip(t *testing.T) {
	sync := DefaultPS()
	sync.PSID, sync.NumPS, sync.Addr, sync.MasterAddr = 1, 2, "0.0.0.0:2223", "master:50001"
	sync.UseAsync, sync.GradsToWait, sync.SyncVersionTolerance, sync.LiveWorkers = false, 3, 2, 4
	syncDefaults := sync
	syncDefaults.GradsToWait, syncDefaults.SyncVersionTolerance, syncDefaults.LiveWorkers = 1, 0, -1

	async := DefaultPS()
	async.PSID, async.NumPS, async.Addr, async.Optimizer = 0, 1, "127.0.0.1:0", "adam:learning_rate=0.001,amsgrad=true"
	async.LRStalenessModulation, async.MetricsAddr = true, "127.0.0.1:9101"
	async.MasterTimeout = 0 // never: differs from the default, so written
	async.CheckpointDir, async.CheckpointSteps, async.KeepCheckpointMax = "/ckpt", 50, 3
	async.CheckpointDirForInit = "/init"
	async.FrozenTables = true
	async.ModelledSecondsPerPush = 0.0125

	negative := DefaultPS()
	negative.CheckpointSteps, negative.KeepCheckpointMax = -1, -2 // invalid, but rendered as given

	for _, p := range []PS{DefaultPS(), sync, syncDefaults, async, negative} {
		args := p.Args()
		if got := parse[PS](t, args); got != p {
			t.Errorf("%q parsed to\n%+v, want\n%+v", args, got, p)
		}
	}
}

// TestPSArgsLeaveOutWhatTheModeIgnores: the master passes the job's sync
// settings only to a sync PS, and --lr_staleness_modulation only to an
// async one.
func TestPSArgsLeaveOutWhatTheModeIgnores(t *testing.T) {
	async := DefaultPS()
	async.GradsToWait, async.SyncVersionTolerance, async.LiveWorkers = 5, 2, 3
	sync := DefaultPS()
	sync.UseAsync, sync.LRStalenessModulation = false, true
	for _, c := range []struct {
		p    PS
		want PS
	}{
		{async, DefaultPS()},
		{sync, func() PS { p := sync; p.LRStalenessModulation = false; return p }()},
	} {
		if got := parse[PS](t, c.p.Args()); got != c.want {
			t.Errorf("%q parsed to\n%+v, want\n%+v", c.p.Args(), got, c.want)
		}
	}
}

// TestPSArgsAsTheMasterWrites pins the PS command lines the master built
// by hand before it used PS.Args, flag by flag and in the same order.
func TestPSArgsAsTheMasterWrites(t *testing.T) {
	base := func(mut func(*PS)) PS {
		p := DefaultPS()
		p.PSID, p.NumPS, p.Addr, p.Optimizer, p.MasterAddr = 1, 2, "127.0.0.1:4002", "sgd:learning_rate=0.1", "127.0.0.1:4000"
		mut(&p)
		return p
	}
	const head = "--ps_id=1 --num_ps_pods=2 --addr=127.0.0.1:4002 --optimizer=sgd:learning_rate=0.1 --master_addr=127.0.0.1:4000"
	cases := []struct {
		name string
		p    PS
		want string
	}{
		{"async", base(func(*PS) {}), head},
		{"async, modulated", base(func(p *PS) { p.LRStalenessModulation = true }), head + " --lr_staleness_modulation"},
		{"sync", base(func(p *PS) { p.UseAsync, p.GradsToWait, p.SyncVersionTolerance, p.LiveWorkers = false, 2, 0, 4 }),
			head + " --use_async=false --grads_to_wait=2 --sync_version_tolerance=0 --live_workers=4"},
		{"sync, tolerant, no live workers", base(func(p *PS) { p.UseAsync, p.GradsToWait, p.SyncVersionTolerance, p.LiveWorkers = false, 3, 1, 0 }),
			head + " --use_async=false --grads_to_wait=3 --sync_version_tolerance=1 --live_workers=0"},
		{"metrics", base(func(p *PS) { p.MetricsAddr = "127.0.0.1:9102" }), head + " --metrics_addr=127.0.0.1:9102"},
		{"frozen tables", base(func(p *PS) { p.FrozenTables = true }), head + " --frozen_tables"},
		{"modelled pushes", base(func(p *PS) { p.ModelledSecondsPerPush = 0.05 }), head + " --modelled_seconds_per_push=0.05"},
		{"checkpoints", base(func(p *PS) {
			p.CheckpointDir, p.CheckpointSteps, p.KeepCheckpointMax, p.CheckpointDirForInit = "/c", 50, 3, "/i"
		}), head + " --checkpoint_dir=/c --checkpoint_steps=50 --keep_checkpoint_max=3 --checkpoint_dir_for_init=/i"},
		{"warm start only", base(func(p *PS) { p.CheckpointDirForInit = "/out/model" }), head + " --checkpoint_dir_for_init=/out/model"},
		{"everything", base(func(p *PS) {
			p.UseAsync, p.GradsToWait, p.LiveWorkers = false, 1, 2
			p.MetricsAddr = "10.1.2.3:9103"
			p.CheckpointDir, p.CheckpointSteps = "/c", 10
		}), head + " --use_async=false --grads_to_wait=1 --sync_version_tolerance=0 --live_workers=2 --metrics_addr=10.1.2.3:9103 --checkpoint_dir=/c --checkpoint_steps=10"},
	}
	for _, c := range cases {
		if got := strings.Join(c.p.Args(), " "); got != c.want {
			t.Errorf("%s:\ngot  %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestWorkerValidate(t *testing.T) {
	w := DefaultWorker()
	if err := w.Validate(); err == nil || err.Error() != "--worker_id: required" {
		t.Errorf("no worker ID: %v", err)
	}
	w.WorkerID = 0
	if err := w.Validate(); err != nil {
		t.Errorf("worker 0: %v", err)
	}
	w.DistributionStrategy = "MirroredStrategy"
	if err := w.Validate(); err == nil || !strings.Contains(err.Error(), "--distribution_strategy") {
		t.Errorf("unknown strategy: %v", err)
	}
	w.DistributionStrategy = StrategyAllReduce
	if err := w.Validate(); err == nil || !strings.Contains(err.Error(), "--collective_addr: required") {
		t.Errorf("AllReduce without a collective address: %v", err)
	}
	w.CollectiveAddr = "127.0.0.1:0"
	if err := w.Validate(); err != nil {
		t.Errorf("AllReduce worker: %v", err)
	}
	w.CollectiveAddr = "$(POD_IP):0"
	if err := w.Validate(); err == nil || !strings.Contains(err.Error(), "$(POD_IP) was not expanded") {
		t.Errorf("unexpanded pod IP: %v", err)
	}
	w = DefaultWorker()
	w.WorkerID, w.TransportDType = 0, "float16"
	if err := w.Validate(); err == nil || err.Error() != `--transport_dtype: "float16" is not float32 or bfloat16` {
		t.Errorf("unknown transport type: %v", err)
	}
	w = DefaultWorker()
	w.WorkerID, w.PSTransport = 0, "http"
	if err := w.Validate(); err == nil || err.Error() != `--ps_transport: "http" is not direct or grpc` {
		t.Errorf("unknown PS transport: %v", err)
	}
	w = DefaultWorker()
	w.WorkerID, w.MasterTimeout = 0, 0
	if err := w.Validate(); err == nil || err.Error() != "--master_timeout: must be positive, got 0s" {
		t.Errorf("no master timeout: %v", err)
	}
}

func TestCheckCollectiveAddr(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:0":      "",
		"10.244.1.7:29500": "",
		"[fd00::7]:0":      "",
		"worker-0.svc:0":   "",
		"10.0.0.1":         "want host:port",
		"10.0.0.1:x":       "not a port number",
		"10.0.0.1:70000":   "not a port number",
		":0":               "must be this worker's own address",
		"0.0.0.0:29500":    "must be this worker's own address",
		"[::]:0":           "must be this worker's own address",
		"$(POD_IP):0":      "$(POD_IP) was not expanded",
		"$(MY_IP):29500":   "$(MY_IP) was not expanded",
		"worker-$(N).x:0":  "was not expanded",
		"[::1]:0":          "",
		"localhost:0":      "",
		"127.0.0.1:65535":  "",
		"127.0.0.1:-1":     "not a port number",
	} {
		err := CheckCollectiveAddr(addr)
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckCollectiveAddr(%q) = %v, want %q", addr, err, want)
		}
	}
}

func TestPSValidate(t *testing.T) {
	ok := DefaultPS()
	ok.PSID, ok.NumPS, ok.Addr = 0, 1, "127.0.0.1:0"
	cases := []struct {
		mut  func(*PS)
		want string // "" for valid
	}{
		{func(*PS) {}, ""},
		{func(p *PS) { p.PSID, p.NumPS = 1, 2 }, ""},
		{func(p *PS) { p.PSID = 1 }, "--ps_id=1 --num_ps_pods=1: need 0 <= ps_id < num_ps_pods"},
		{func(p *PS) { p.PSID = -1 }, "--ps_id=-1 --num_ps_pods=1: need 0 <= ps_id < num_ps_pods"},
		{func(p *PS) { p.NumPS = 0 }, "--ps_id=0 --num_ps_pods=0: need 0 <= ps_id < num_ps_pods"},
		{func(p *PS) { p.Addr = "" }, "--addr: required"},
		{func(p *PS) { p.CheckpointSteps = 5 }, "--checkpoint_steps: needs --checkpoint_dir"},
		{func(p *PS) { p.KeepCheckpointMax = -1 }, "--keep_checkpoint_max: must not be negative, got -1"},
		{func(p *PS) { p.UseAsync, p.GradsToWait = false, 0 }, "--grads_to_wait=0: must be >= 1"},
		{func(p *PS) { p.UseAsync, p.SyncVersionTolerance = false, -1 }, "--sync_version_tolerance=-1: must be >= 0"},
		// Sync settings are not checked for async SGD, which ignores them.
		{func(p *PS) { p.GradsToWait, p.SyncVersionTolerance = 0, -1 }, ""},
		// The first problem wins, in the order the PS has always checked.
		{func(p *PS) { p.UseAsync, p.GradsToWait, p.PSID = false, 0, 5 }, "--grads_to_wait=0: must be >= 1"},
		{func(p *PS) { p.PSID, p.Addr, p.CheckpointSteps = 5, "", -1 }, "--ps_id=5 --num_ps_pods=1"},
		{func(p *PS) { p.Addr, p.CheckpointSteps = "", -1 }, "--checkpoint_steps: must not be negative"},
	}
	for _, c := range cases {
		p := ok
		c.mut(&p)
		err := p.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", p, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%+v: got %v, want %q", p, err, c.want)
		}
	}
}

func TestCheckSyncFlags(t *testing.T) {
	cases := []struct {
		grads     int
		tolerance int64
		want      string
	}{
		{1, 0, ""},
		{8, 3, ""},
		{0, 0, "--grads_to_wait=0: must be >= 1"},
		{-2, 0, "--grads_to_wait=-2: must be >= 1"},
		{1, -1, "--sync_version_tolerance=-1: must be >= 0"},
		{0, -1, "--grads_to_wait=0: must be >= 1"},
	}
	for _, c := range cases {
		if got := errText(CheckSyncFlags(c.grads, c.tolerance)); got != c.want {
			t.Errorf("CheckSyncFlags(%d, %d) = %q, want %q", c.grads, c.tolerance, got, c.want)
		}
	}
}

func TestCheckCheckpointFlags(t *testing.T) {
	cases := []struct {
		dir   string
		steps int64
		keep  int
		want  string
	}{
		{"", 0, 0, ""},
		{"/c", 10, 3, ""},
		{"/c", 0, 0, ""}, // restore only
		{"", 0, 5, ""},   // nothing to keep: harmless
		{"", 10, 0, "--checkpoint_steps: needs --checkpoint_dir"},
		{"/c", -1, 0, "--checkpoint_steps: must not be negative, got -1"},
		{"/c", 1, -1, "--keep_checkpoint_max: must not be negative, got -1"},
		// Every problem at once.
		{"", 5, -2, "--checkpoint_steps: needs --checkpoint_dir\n--keep_checkpoint_max: must not be negative, got -2"},
	}
	for _, c := range cases {
		if got := errText(CheckCheckpointFlags(c.dir, c.steps, c.keep)); got != c.want {
			t.Errorf("CheckCheckpointFlags(%q, %d, %d) = %q, want %q", c.dir, c.steps, c.keep, got, c.want)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestDurationRendering: --master_timeout is written as Go durations
// parse, including the odd ones.
func TestDurationRendering(t *testing.T) {
	for _, d := range []time.Duration{0, time.Second, 90 * time.Second, 1500 * time.Millisecond} {
		p := DefaultPS()
		p.MasterTimeout = d
		if got := parse[PS](t, p.Args()); got.MasterTimeout != d {
			t.Errorf("%s: parsed back %s", d, got.MasterTimeout)
		}
	}
}

func TestWorkerModelledComputeFlags(t *testing.T) {
	w := DefaultWorker()
	w.WorkerID = 1
	for _, c := range []struct {
		secs, cpus float64
		strategy   string
		want       string
	}{
		{-1, 1, StrategyPS, "--modelled_seconds_per_record: must be 0"},
		{math.NaN(), 1, StrategyPS, "--modelled_seconds_per_record: must be 0"},
		{0.001, 0, StrategyPS, "--modelled_cpus: must be a positive number"},
		{0.001, math.Inf(1), StrategyPS, "--modelled_cpus: must be a positive number"},
	} {
		v := w
		v.ModelledSecondsPerRecord, v.ModelledCPUs, v.DistributionStrategy, v.CollectiveAddr = c.secs, c.cpus, c.strategy, "10.0.0.1:0"
		if err := v.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v s/record on %v CPUs (%s): %v, want %q", c.secs, c.cpus, c.strategy, err, c.want)
		}
	}
	w.ModelledSecondsPerRecord = 0.001
	if err := w.Validate(); err != nil {
		t.Errorf("a modelled worker: %v", err)
	}
	w.DistributionStrategy, w.CollectiveAddr = StrategyAllReduce, "10.0.0.1:0"
	if err := w.Validate(); err != nil {
		t.Errorf("a modelled AllReduce worker: %v", err)
	}
}
