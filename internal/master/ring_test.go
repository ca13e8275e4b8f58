package master

import (
	"context"
	"math/rand"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/cluster"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/roleflags"
	"elasticdl/internal/wire"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/proto/masterpb"
	"elasticdl/proto/pserverpb"
)

func allReduceMaster(t *testing.T) (*Master, *fakeBackend) {
	m, fb, _ := newTestMaster(t, func(c *Config) {
		c.DistributionStrategy, c.NumPS = roleflags.StrategyAllReduce, 0
	})
	return m, fb
}

// An AllReduce job launches workers only, with their ring flags; workers
// rendezvous through the master, train, and the first model uploaded is
// written as the job's model; every upload's checksum is in the summary.
func TestAllReduceJobThroughTheShell(t *testing.T) {
	m, fb := allReduceMaster(t)
	for _, l := range fb.launches() {
		args := strings.Join(l.Args, " ")
		if l.Role != cluster.Worker || !strings.Contains(args, "--distribution_strategy=AllreduceStrategy --collective_addr=127.0.0.1:0") {
			t.Fatalf("launch %+v", l)
		}
	}
	ctx := context.Background()
	join := func(w int32) *masterpb.RingResponse {
		t.Helper()
		r, err := m.JoinRing(ctx, &masterpb.JoinRingRequest{WorkerId: w, Addr: "127.0.0.1:900" + string(rune('0'+w))})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := join(0); !r.Formed || r.Version != 1 || len(r.Members) != 1 {
		t.Fatalf("first join: %v", r)
	}
	if r := join(1); r.Formed || r.WaitMs <= 0 {
		t.Fatalf("second join: %v, want to wait for worker 0", r)
	}
	if r, err := m.RingStatus(ctx, &masterpb.RingStatusRequest{WorkerId: 0}); err != nil || r.Version != 2 || r.Formed {
		t.Fatalf("status %v %v", r, err)
	}
	if r := join(0); !r.Formed || len(r.Members) != 2 || r.Members[1].WorkerId != 1 {
		t.Fatalf("ring %v", r)
	}
	t1, t2 := getTask(t, m, 0), getTask(t, m, 1)
	if _, err := m.CommitTask(ctx, &masterpb.CommitTaskRequest{WorkerId: 0, TaskId: t1.Id, Done: 64}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CommitTask(ctx, &masterpb.CommitTaskRequest{WorkerId: 1, TaskId: t1.Id, Done: 64}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("commit of another's task: %v", err)
	}
	reportTrain(t, m, 0, t1, 4)
	reportTrain(t, m, 1, t2, 4)

	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	spec, _ := reg.Lookup("fashion_mnist.mlp")
	var tensors []*pserverpb.Tensor
	for _, p := range spec.Build(rand.New(rand.NewSource(5))).Params() {
		tensors = append(tensors, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
	}
	up := &masterpb.UploadModelRequest{WorkerId: 1, Version: 4, DenseParameters: tensors, Checksum: wire.Checksum(tensors)}
	bad := &masterpb.UploadModelRequest{WorkerId: 0, Version: 4, DenseParameters: tensors, Checksum: 1}
	if _, err := m.UploadModel(ctx, bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("upload with a wrong checksum: %v", err)
	}
	short := &masterpb.UploadModelRequest{WorkerId: 0, Version: 4, DenseParameters: tensors[1:], Checksum: wire.Checksum(tensors[1:])}
	if _, err := m.UploadModel(ctx, short); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "no parameter") {
		t.Fatalf("upload of another model: %v, want InvalidArgument", err)
	}
	select {
	case <-m.ended:
		t.Fatal("a refused upload ended the job")
	default:
	}
	if _, err := m.UploadModel(ctx, up); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.ended:
	default:
		t.Fatal("the loop did not end after the upload")
	}
	up.WorkerId = 0
	if _, err := m.UploadModel(ctx, up); err != nil {
		t.Fatal(err)
	}
	m.step(ctx, m.carryOutSave(ctx, m.output.save))
	s := summaryOf(m)
	if s.Status != "succeeded" || s.ModelVersion != 4 || s.Ring == nil || len(s.Ring.Checksums) != 2 || s.Ring.Checksums[0].Checksum != s.Ring.Checksums[1].Checksum {
		t.Fatalf("summary %+v, ring %+v", s, s.Ring)
	}
	set, err := checkpoint.Load(filepath.Join(m.cfg.Output, "model"), nil)
	if err != nil || set.Version != 4 || len(set.Shards[0].DenseParameters) != len(tensors) {
		t.Fatalf("saved model: %+v %v", set, err)
	}
	for _, tp := range set.Shards[0].DenseParameters {
		i := slices.IndexFunc(tensors, func(x *pserverpb.Tensor) bool { return x.Name == tp.Name })
		if i < 0 || !slices.Equal(tp.Content, tensors[i].Content) {
			t.Errorf("%s differs from the upload", tp.Name)
		}
	}
}

func TestAllReduceRefusesEmbeddingModels(t *testing.T) {
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ModelDef, cfg.TrainingData, cfg.Output = "ctr.deepfm", "synthetic-ctr://?records=100", t.TempDir()
	cfg.DistributionStrategy, cfg.NumPS = roleflags.StrategyAllReduce, 0
	if _, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: reg}); err == nil || !strings.Contains(err.Error(), "embedding tables") {
		t.Fatalf("New = %v", err)
	}
}
