package master

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
	"elasticdl/model"
	"elasticdl/model/zoo"
)

// batchBackend is a fakeBackend that launches batches (as the Kubernetes
// backend does, in parallel); each spec goes through Launch (launchErr).
type batchBackend struct {
	*fakeBackend
	batches [][]cluster.InstanceSpec
}

func (b *batchBackend) LaunchBatch(ctx context.Context, specs []cluster.InstanceSpec) []error {
	b.batches = append(b.batches, specs)
	errs := make([]error, len(specs))
	for i, s := range specs {
		errs[i] = b.Launch(ctx, s)
	}
	return errs
}

func newBatchMaster(t *testing.T, bb *batchBackend) *Master {
	t.Helper()
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ModelDef = "fashion_mnist.mlp"
	cfg.TrainingData = writeIDX(t, 1000)
	cfg.Output = t.TempDir()
	cfg.NumWorkers, cfg.NumPS = 5, 2
	clk := &clock{t: time.Unix(1000, 0)}
	m, err := New(cfg, Deps{Backend: bb, Registry: reg, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	m.routes.master = "127.0.0.1:2"
	if err := m.setPSLayout(2, 0); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestInitialWorkersLaunchedInOneBatch(t *testing.T) {
	bb := &batchBackend{fakeBackend: newFakeBackend()}
	m := newBatchMaster(t, bb)
	m.step(context.Background(), job.Start{})
	var ps, workers int
	for _, s := range bb.launches() {
		switch s.Role {
		case cluster.PS:
			ps++
		case cluster.Worker:
			workers++
		}
	}
	if ps != 2 || workers != 5 {
		t.Fatalf("launched %d PS and %d workers, want 2 and 5", ps, workers)
	}
	if len(bb.batches) != 1 || len(bb.batches[0]) != 5 {
		t.Fatalf("batches %v, want one of the 5 workers", bb.batches)
	}
	for _, s := range bb.batches[0] {
		if s.Role != cluster.Worker || len(s.Args) == 0 {
			t.Errorf("batched spec %+v, want a worker with its flags", s)
		}
	}
	if err := m.jobErr(); err != nil {
		t.Fatal(err)
	}
}

func TestBatchLaunchFailureFailsTheJob(t *testing.T) {
	fb := newFakeBackend()
	fb.launchErr = func(s cluster.InstanceSpec) error {
		if s.Role == cluster.Worker && s.Index >= 3 {
			return errors.New("quota exceeded")
		}
		return nil
	}
	bb := &batchBackend{fakeBackend: fb}
	m := newBatchMaster(t, bb)
	m.step(context.Background(), job.Start{})
	err := m.jobErr()
	if err == nil || !strings.Contains(err.Error(), "quota exceeded") || !strings.Contains(err.Error(), "worker-3") {
		t.Fatalf("job error %v, want the first failed launch (worker-3, quota exceeded)", err)
	}
}

// A native worker runs with one BLAS thread and one Go processor, its
// compute being one thread; a worker program (--worker_command) with one
// thread for each library that would take more.
func TestWorkersRunSingleThreaded(t *testing.T) {
	native := func(*Config) {}
	external := func(c *Config) {
		c.WorkerCommand, c.ModelDef, c.Optimizer = "/usr/bin/python3 worker.py", "", "sgd:learning_rate=0.1"
	}
	for _, c := range []struct {
		name   string
		mutate func(*Config)
		want   []string
	}{
		{"native", native, []string{"OPENBLAS_NUM_THREADS=1", "GOMAXPROCS=1"}},
		{"worker command", external, []string{"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "MKL_NUM_THREADS=1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, _, _ := newTestMaster(t, c.mutate)
			spec := m.instanceSpec(job.Launch{Role: cluster.Worker, ID: 0, Index: 0})
			for _, kv := range c.want {
				if !slices.Contains(spec.Env, kv) {
					t.Errorf("worker env %v lacks %s", spec.Env, kv)
				}
			}
		})
	}
}
