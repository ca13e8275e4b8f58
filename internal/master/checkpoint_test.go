package master

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
	"elasticdl/internal/ps"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/ps/client"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/wire"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/proto/pserverpb"
)

func TestCheckpointFlagsValidated(t *testing.T) {
	for _, c := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.CheckpointSteps = -1; c.CheckpointDir = "x" }, "--checkpoint_steps: must not be negative"},
		{func(c *Config) { c.CheckpointSteps = 10 }, "--checkpoint_steps: needs --checkpoint_dir"},
		{func(c *Config) { c.KeepCheckpointMax = -2 }, "--keep_checkpoint_max"},
	} {
		cfg := DefaultConfig()
		cfg.ModelDef, cfg.TrainingData, cfg.Output = "m", "d", "o"
		c.mutate(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}

func TestLaunchPSPassesCheckpointFlags(t *testing.T) {
	_, fb, _ := newTestMaster(t, nil)
	if args := strings.Join(fb.launches()[0].Args, " "); strings.Contains(args, "checkpoint") {
		t.Errorf("checkpoint flags passed without being set: %s", args)
	}
	init := t.TempDir()
	writeMLPCheckpoint(t, init, 7, nil)
	dir := t.TempDir()
	_, fb, _ = newTestMaster(t, func(c *Config) {
		c.CheckpointDir, c.CheckpointSteps, c.KeepCheckpointMax, c.CheckpointDirForInit = dir, 50, 3, init
	})
	args := fb.launches()[0].Args
	for _, want := range []string{"--checkpoint_dir=" + dir, "--checkpoint_steps=50", "--keep_checkpoint_max=3", "--checkpoint_dir_for_init=" + init} {
		if !slices.Contains(args, want) {
			t.Errorf("PS args %v lack %s", args, want)
		}
	}
}

// mlpSpec is fashion_mnist.mlp.
func mlpSpec(t *testing.T) model.Spec {
	t.Helper()
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	spec, err := reg.Lookup("fashion_mnist.mlp")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// writeMLPCheckpoint writes fashion_mnist.mlp's initial parameters as a
// one-shard checkpoint; edit may change the message first.
func writeMLPCheckpoint(t *testing.T, dir string, version int64, edit func(*pserverpb.Checkpoint)) {
	t.Helper()
	c := &pserverpb.Checkpoint{Version: version, NumShards: 1}
	for _, p := range mlpSpec(t).Build(rand.New(rand.NewSource(0))).Params() {
		c.DenseParameters = append(c.DenseParameters, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
	}
	if edit != nil {
		edit(c)
	}
	if _, err := checkpoint.Write(dir, c); err != nil {
		t.Fatal(err)
	}
}

// A checkpoint the PS would not be able to start from fails the job
// before anything is launched, naming the flag.
func TestNewChecksCheckpoints(t *testing.T) {
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	data := writeIDX(t, 100)
	var last *Master
	newMaster := func(mutate func(*Config)) error {
		cfg := DefaultConfig()
		cfg.ModelDef, cfg.TrainingData, cfg.Output = "fashion_mnist.mlp", data, t.TempDir()
		mutate(&cfg)
		m, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: reg})
		last = m
		return err
	}
	missing := filepath.Join(t.TempDir(), "nope")
	wrongShape := t.TempDir()
	writeMLPCheckpoint(t, wrongShape, 3, func(c *pserverpb.Checkpoint) {
		c.DenseParameters[0] = wire.EncodeTensor(c.DenseParameters[0].Name, []int{1}, []float32{0})
	})
	extra := t.TempDir()
	writeMLPCheckpoint(t, extra, 3, func(c *pserverpb.Checkpoint) {
		c.DenseParameters = append(c.DenseParameters, wire.EncodeTensor("zzz", []int{1}, []float32{0}))
	})
	lacking := t.TempDir()
	writeMLPCheckpoint(t, lacking, 3, func(c *pserverpb.Checkpoint) { c.DenseParameters = c.DenseParameters[1:] })
	good := t.TempDir()
	writeMLPCheckpoint(t, good, 3, nil)
	withTable := t.TempDir()
	writeMLPCheckpoint(t, withTable, 3, func(c *pserverpb.Checkpoint) {
		c.EmbeddingTables = []*pserverpb.EmbeddingTableCheckpoint{{
			Info: &pserverpb.EmbeddingTableInfo{Name: "ctr_embed", Dim: 2}, Ids: []int64{0}, Values: wire.EncodeTensor("ctr_embed", []int{1, 2}, []float32{1, 2}),
		}}
	})
	jobOutput := t.TempDir() // a training job's --output: its model in model/
	writeMLPCheckpoint(t, filepath.Join(jobOutput, "model"), 3, nil)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		mutate func(*Config)
		want   string // "" for success
	}{
		{"init dir missing", func(c *Config) { c.CheckpointDirForInit = missing }, "--checkpoint_dir_for_init: checkpoint: read " + missing},
		{"init dir empty", func(c *Config) { c.CheckpointDirForInit = t.TempDir() }, "no complete checkpoint (a training job's model is in its --output directory's model/"},
		{"init dir is a training job's output", func(c *Config) { c.CheckpointDirForInit = jobOutput }, ""},
		{"init of another shape", func(c *Config) { c.CheckpointDirForInit = wrongShape }, "has shape [1]"},
		{"init with an extra parameter", func(c *Config) { c.CheckpointDirForInit = extra }, "parameters, the model has"},
		{"init lacking a parameter", func(c *Config) { c.CheckpointDirForInit = lacking }, "no parameter"},
		{"init with a table the model lacks", func(c *Config) { c.CheckpointDirForInit = withTable }, `embedding table "ctr_embed" is not one of the model's`},
		{"checkpoint dir of another model", func(c *Config) { c.CheckpointDir = wrongShape }, "--checkpoint_dir: "},
		{"checkpoint dir unreadable", func(c *Config) { c.CheckpointDir = file }, "--checkpoint_dir: "},
		{"checkpoint dir not there yet", func(c *Config) { c.CheckpointDir = missing }, ""},
		{"checkpoint dir wins over init", func(c *Config) { c.CheckpointDir, c.CheckpointDirForInit = good, wrongShape }, ""},
		{"empty checkpoint dir, good init", func(c *Config) { c.CheckpointDir, c.CheckpointDirForInit = t.TempDir(), good }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := newMaster(c.mutate)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				// The PS are told where the model is.
				if got := last.psFlags(job.Launch{Role: cluster.PS}).CheckpointDirForInit; c.name == "init dir is a training job's output" && got != filepath.Join(jobOutput, "model") {
					t.Errorf("the PS start from %q, want the job's model %q", got, filepath.Join(jobOutput, "model"))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New() = %v, want %q", err, c.want)
			}
		})
	}
}

// The final model is a one-shard checkpoint under --output/model that
// replaces any earlier job's there.
func TestSaveModelWritesACheckpoint(t *testing.T) {
	m, _, _ := newTestMaster(t, nil)
	spec := mlpSpec(t)
	opt, err := optimizer.Parse(spec.Optimizer)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- ps.Serve(ctx, lis, ps.Config{NumPS: 1, Optimizer: opt}) }()
	defer func() { cancel(); <-served }()

	params := spec.Build(rand.New(rand.NewSource(42))).Params()
	c, err := client.Dial(ctx, []string{lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.PushModel(ctx, params); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(m.cfg.Output, "model")
	writeMLPCheckpoint(t, stale, 999, nil)

	m.routes.ps = psRoutes{dial: []string{lis.Addr().String()}, listen: []string{lis.Addr().String()}, n: 1}
	saved := m.saveModel(ctx, &job.Save{Model: true})
	path, version, err := saved.ModelPath, saved.ModelVersion, saved.Err
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(m.cfg.Output, "model", "version-0", "variables-0-of-1.ckpt"); path != want || version != 0 {
		t.Fatalf("saved %s version %d, want %s version 0", path, version, want)
	}
	set, err := checkpoint.Load(filepath.Join(m.cfg.Output, "model"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if set.Version != 0 || len(set.Shards[0].DenseParameters) != len(params) {
		t.Fatalf("loaded version %d with %d parameters", set.Version, len(set.Shards[0].DenseParameters))
	}
	for _, p := range params {
		for _, tp := range set.Shards[0].DenseParameters {
			if tp.Name != p.Name {
				continue
			}
			_, data, _ := wire.DecodeTensor(tp)
			if !slices.Equal(data, p.Value.Data) {
				t.Errorf("%s differs from the PS's", p.Name)
			}
		}
	}
	if vs, _ := checkpoint.Versions(stale); !slices.Equal(vs, []int64{0}) {
		t.Errorf("model versions %v, want only the new one", vs)
	}
}

// A sparse model's checkpoint must have its embedding tables' dimensions.
func TestNewChecksEmbeddingTables(t *testing.T) {
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	spec, err := reg.Lookup("ctr.deepfm")
	if err != nil {
		t.Fatal(err)
	}
	write := func(dim int64) string {
		dir := t.TempDir()
		c := &pserverpb.Checkpoint{Version: 7, NumShards: 1}
		for _, p := range spec.Build(rand.New(rand.NewSource(0))).Params() {
			c.DenseParameters = append(c.DenseParameters, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
		}
		name := spec.Sparse.Tables()[0].Table
		c.EmbeddingTables = []*pserverpb.EmbeddingTableCheckpoint{{
			Info:   &pserverpb.EmbeddingTableInfo{Name: name, Dim: dim},
			Ids:    []int64{0},
			Values: wire.EncodeTensor(name, []int{1, int(dim)}, make([]float32, dim)),
		}}
		if _, err := checkpoint.Write(dir, c); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	newMaster := func(init string) error {
		cfg := DefaultConfig()
		cfg.ModelDef, cfg.TrainingData, cfg.Output = "ctr.deepfm", "synthetic-ctr://?records=1000", t.TempDir()
		cfg.CheckpointDirForInit = init
		_, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: reg})
		return err
	}
	right := int64(spec.Sparse.Tables()[0].Dim)
	if err := newMaster(write(right)); err != nil {
		t.Fatalf("matching tables: %v", err)
	}
	err = newMaster(write(right + 3))
	if want := fmt.Sprintf("has dimension %d, the model %d", right+3, right); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("New() = %v, want %q", err, want)
	}
}
