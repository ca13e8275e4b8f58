package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"elasticdl/internal/cluster/local"
	"elasticdl/internal/master"
	"elasticdl/internal/roleflags"
	"elasticdl/model"
	"elasticdl/model/zoo"
)

// The convergence experiment's settings. A step's global batch is
// minibatch × convWorkers records whatever the ring's size (the AllReduce
// rule, docs/design.md), so every schedule trains ~stepsPerEpoch steps an
// epoch and an evaluation every stepsPerEpoch versions follows each epoch.
const (
	convEnv       = "ELASTICDL_CONVERGENCE"
	convWorkers   = 4
	convEpochs    = 3
	convMinibatch = 64
	trainRecords  = 60000
	// stepsPerEpoch is ⌈60000 / (64×4)⌉.
	stepsPerEpoch = (trainRecords + convMinibatch*convWorkers - 1) / (convMinibatch * convWorkers)
)

// convSchedules are the worker room per epoch: fixed 4, fixed 2 (the same
// global batch computed by half the workers), and 2→4→2.
var convSchedules = []struct {
	name string
	room []int
}{
	{"fixed 4", []int{4, 4, 4}},
	{"fixed 2", []int{2, 2, 2}},
	{"changing", []int{2, 4, 2}},
}

// TestConvergence trains fashion_mnist.cnn with AllReduce, --num_workers=4,
// 3 epochs, under each schedule of convSchedules and each seed, on a
// Capped local backend whose room changes when the master starts an
// epoch's tasks. It asserts the exactly-once ledger of every epoch, writes
// the runs to convergence.json and the plot to convergence.png (in
// ELASTICDL_CONVERGENCE_OUT, default this directory) and logs the table.
// About 45 s a job (7 minutes in all) on a 2-core machine; skipped unless
// ELASTICDL_CONVERGENCE=1:
//
//	ELASTICDL_CONVERGENCE=1 go test ./bench -run '^TestConvergence$' -v -timeout 1h
//
// ELASTICDL_CONVERGENCE_MODEL (cnn or mlp), _SEEDS (e.g. 1,2,3) and
// _SCHEDULES (e.g. "fixed 4,changing") narrow it.
func TestConvergence(t *testing.T) {
	if os.Getenv(convEnv) != "1" {
		t.Skipf("set %s=1 to run the convergence experiment (minutes of full load)", convEnv)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skip("Fashion-MNIST not installed")
	}
	modelName := envOr(convEnv+"_MODEL", "cnn")
	seeds, err := parseSeeds(envOr(convEnv+"_SEEDS", "1,2,3"))
	if err != nil {
		t.Fatal(err)
	}
	outDir := envOr(convEnv+"_OUT", ".")
	want := map[string]bool{}
	for _, n := range strings.Split(os.Getenv(convEnv+"_SCHEDULES"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	bin := buildBinary(t, benchTags())
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}

	var runs []ConvergenceRun
	// Seeds outside, schedules inside: a slow spell of the shared machine
	// then touches every schedule rather than one.
	for _, seed := range seeds {
		for _, sc := range convSchedules {
			if len(want) > 0 && !want[sc.name] {
				continue
			}
			name := fmt.Sprintf("%s/seed=%d", strings.ReplaceAll(sc.name, " ", "-"), seed)
			t.Run(name, func(t *testing.T) {
				r := runConvergenceJob(t, bin, reg, "fashion_mnist."+modelName, sc.name, sc.room, seed)
				runs = append(runs, r)
				final := r.Epochs[len(r.Epochs)-1]
				t.Logf("%s: accuracy by epoch %v, final loss %.4f, %.0f s, switches at versions %v",
					name, accuracies(r), final.Loss, r.WallSeconds, r.SwitchVersions)
			})
		}
	}
	if len(runs) == 0 {
		t.Fatal("no run finished")
	}
	table, err := writeConvergence(runs, "fashion_mnist."+modelName, outDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table)
}

// TestConvergenceReport redraws the plot and logs the table from
// convergence.json without training (ELASTICDL_CONVERGENCE_REPORT=1).
func TestConvergenceReport(t *testing.T) {
	if os.Getenv(convEnv+"_REPORT") != "1" {
		t.Skipf("set %s_REPORT=1 to redraw the convergence report", convEnv)
	}
	outDir := envOr(convEnv+"_OUT", ".")
	raw, err := os.ReadFile(filepath.Join(outDir, "convergence.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file convergenceFile
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	table, err := writeConvergence(file.Runs, file.Model, outDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table)
}

// convergenceFile is convergence.json.
type convergenceFile struct {
	Model string           `json:"model"`
	Runs  []ConvergenceRun `json:"runs"`
}

// writeConvergence writes the runs to dir/convergence.json and the plot to
// dir/convergence.png, and returns the Markdown table (for RESULTS.md).
func writeConvergence(runs []ConvergenceRun, modelDef, dir string) (string, error) {
	raw, err := json.MarshalIndent(convergenceFile{Model: modelDef, Runs: runs}, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode runs: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "convergence.json"), append(raw, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("write runs: %w", err)
	}
	stats := SummarizeConvergence(runs)
	title := fmt.Sprintf("%s, AllReduce, global batch %d: workers per epoch", modelDef, convMinibatch*convWorkers)
	if err := PlotConvergence(stats, title, filepath.Join(dir, "convergence.png")); err != nil {
		return "", err
	}
	return ConvergenceTable(stats), nil
}

// runConvergenceJob runs one job in this process: the master, a Capped
// local backend running bin, and a watcher that sets the room of each
// epoch as soon as the master starts handing out its tasks.
func runConvergenceJob(t *testing.T, bin string, reg *model.Registry, modelDef, schedule string, room []int, seed int64) ConvergenceRun {
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "master.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	logger := slog.New(slog.NewTextHandler(logf, nil))
	defer func() {
		if t.Failed() {
			t.Logf("master log (last lines):\n%s", tail(filepath.Join(dir, "master.log"), 40))
		}
	}()

	cfg := master.DefaultConfig()
	cfg.JobName = "convergence"
	cfg.ModelDef = modelDef
	cfg.TrainingData = filepath.Join(dataDir, "train-images-idx3-ubyte.gz")
	cfg.ValidationData = filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz")
	cfg.EvaluationSteps = stepsPerEpoch
	cfg.NumEpochs, cfg.NumWorkers, cfg.NumPS = convEpochs, convWorkers, 0
	cfg.MinibatchSize = convMinibatch
	cfg.DistributionStrategy = roleflags.StrategyAllReduce
	cfg.Seed = seed
	cfg.Output = dir
	cfg.ProgressInterval = 10 * time.Second

	be, err := local.New(local.Config{Binary: bin, LogDir: filepath.Join(dir, "logs"), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	capped := local.NewCapped(be, room[0], logger)
	m, err := master.New(cfg, master.Deps{Backend: capped, Registry: reg, Logger: logger})
	if err != nil {
		_ = capped.Close(context.Background())
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	if err := m.RegisterMetrics(metrics); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	watchDone := make(chan []int64, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	go func() { watchDone <- followEpochs(watchCtx, metrics, capped, room, logger) }()

	start := time.Now()
	s, err := m.Run(ctx)
	wall := time.Since(start)
	stopWatch()
	switches := <-watchDone
	if err != nil {
		t.Fatalf("job: %v", err)
	}
	if s.Status != "succeeded" {
		t.Fatalf("job %s: %s", s.Status, s.Error)
	}

	r := ConvergenceRun{
		Schedule: schedule, Room: room, Seed: seed,
		WallSeconds: wall.Seconds(), TrainingSeconds: s.TrainingSeconds, RecordsPerSecond: s.RecordsPerSecond,
		ModelVersion: s.ModelVersion, SwitchVersions: switches,
		WorkersLaunched: s.Workers.Launched, WorkersPreempted: s.Workers.Preempted,
	}
	if s.Ring != nil {
		r.RingVersions, r.MaxWorldSize = s.Ring.Versions, s.Ring.MaxWorldSize
	}
	// The passes at versions stepsPerEpoch, 2×stepsPerEpoch, ... follow
	// the epochs but the last; the final pass follows the last. (A pass
	// queued just before the end, should the steps run past the last
	// multiple, is left out.)
	evals := map[int]master.EvalRecord{}
	for _, ev := range s.Evaluations {
		switch {
		case ev.Final:
			evals[convEpochs] = ev
		case ev.Version%stepsPerEpoch == 0 && ev.Version/stepsPerEpoch < convEpochs:
			evals[int(ev.Version/stepsPerEpoch)] = ev
		}
	}
	if len(evals) != convEpochs || len(s.Epochs) != convEpochs {
		t.Fatalf("evaluations %+v and %d epochs: want one evaluation after each of %d epochs", s.Evaluations, len(s.Epochs), convEpochs)
	}
	for _, e := range s.Epochs {
		ev := evals[e.Epoch]
		r.Epochs = append(r.Epochs, ConvergenceEpoch{
			Epoch: e.Epoch, Accuracy: ev.Accuracy, Loss: ev.Loss,
			EvalVersion: ev.Version, MinVersionUsed: ev.MinVersionUsed, MaxVersionUsed: ev.MaxVersionUsed,
			Records: e.Records, RecordsTrained: e.RecordsTrained, TrainedTwice: e.RecordsTrainedTwice, Missed: e.RecordsMissed,
		})
		if e.Records != trainRecords || e.RecordsTrained != e.Records || e.RecordsTrainedTwice != 0 || e.RecordsMissed != 0 {
			t.Errorf("epoch %d ledger not exact: %+v", e.Epoch, e)
		}
	}
	if got := len(switches); got != changes(room) {
		t.Errorf("room changed %d times, want %d", got, changes(room))
	}
	return r
}

// followEpochs sets the room of each epoch when the master's epoch gauge
// reaches it (the master hands out that epoch's first task), until ctx
// ends; it returns the model versions at which the room changed.
func followEpochs(ctx context.Context, metrics *prometheus.Registry, capped *local.Capped, room []int, log *slog.Logger) []int64 {
	var switches []int64
	epoch := 1
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return switches
		case <-tick.C:
		}
		g, err := gauges(metrics, "elasticdl_master_epoch", "elasticdl_master_model_version")
		if err != nil {
			log.Warn("read master metrics", "err", err)
			continue
		}
		now := int(g["elasticdl_master_epoch"])
		for epoch < now && epoch < len(room) {
			epoch++
			if room[epoch-1] != capped.Cap() {
				version := int64(g["elasticdl_master_model_version"])
				log.Info("experiment: room changes", "epoch", epoch, "workers", room[epoch-1], "model_version", version)
				capped.SetCap(room[epoch-1])
				switches = append(switches, version)
			}
		}
	}
}

// gauges reads the current value of the named single-series metrics.
func gauges(reg *prometheus.Registry, names ...string) (map[string]float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, n := range names {
			if mf.GetName() == n && len(mf.GetMetric()) == 1 {
				out[n] = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
	}
	return out, nil
}

func changes(room []int) int {
	n := 0
	for i := 1; i < len(room); i++ {
		if room[i] != room[i-1] {
			n++
		}
	}
	return n
}

func accuracies(r ConvergenceRun) []string {
	var out []string
	for _, e := range r.Epochs {
		out = append(out, fmt.Sprintf("%.4f", e.Accuracy))
	}
	return out
}

func parseSeeds(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s_SEEDS: %w", convEnv, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func tail(path string, lines int) string {
	raw, _ := os.ReadFile(path)
	ls := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(ls[max(len(ls)-lines, 0):], "\n")
}
