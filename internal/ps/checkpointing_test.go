package ps

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/ps/shard"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// ckptParams is a model whose parameters spread over 1, 2 and 3 shards.
var ckptParams = map[string]int{"conv/kernel": 6, "conv/bias": 3, "dense_0/kernel": 6, "dense_0/bias": 2, "dense_1/kernel": 4, "dense_1/bias": 2, "w": 4, "b": 2}

func init() {
	for _, n := range []int{2, 3} {
		count := make([]int, n)
		for name := range ckptParams {
			count[shard.Of(name, n)]++
		}
		if slices.Contains(count, 0) {
			panic("ckptParams leave a shard empty; pick other names")
		}
	}
}

func adam(t testing.TB) optimizer.Optimizer {
	t.Helper()
	o, err := optimizer.Parse("adam:learning_rate=0.01")
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// logBuffer collects a server's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// newShards starts numPS servers configured by cfg (Index, NumPS and, when
// nil, Optimizer are filled in) and pushes each the initial model, which
// a restored shard ignores.
func newShards(t *testing.T, numPS int, cfg Config) []*Server {
	t.Helper()
	var out []*Server
	for i := range numPS {
		c := cfg
		c.Index, c.NumPS = i, numPS
		if c.Optimizer == nil {
			c.Optimizer = adam(t)
		}
		s, err := NewServer(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		m := &pserverpb.Model{}
		for _, name := range slices.Sorted(maps.Keys(ckptParams)) {
			if shard.Of(name, numPS) == i {
				v := make([]float32, ckptParams[name])
				for j := range v {
					v[j] = float32(len(name) + j)
				}
				m.DenseParameters = append(m.DenseParameters, wire.EncodeTensor(name, []int{len(v)}, v))
			}
		}
		if _, err := s.PushModel(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// step pushes one gradient to every parameter of every shard; the
// gradient depends on the step so slots differ between steps.
func step(t *testing.T, shards []*Server, k int) {
	t.Helper()
	for i, s := range shards {
		req := &pserverpb.PushGradientsRequest{}
		for _, name := range slices.Sorted(maps.Keys(ckptParams)) {
			if shard.Of(name, len(shards)) != i {
				continue
			}
			g := make([]float32, ckptParams[name])
			for j := range g {
				g[j] = float32((k+j)%5) - 2
			}
			req.Gradients = append(req.Gradients, wire.EncodeTensor(name, []int{len(g)}, g))
		}
		if _, err := s.PushGradients(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
}

// waitWritten waits until s has written version v: snapshots offered
// faster than the writer picks them up replace each other.
func waitWritten(t *testing.T, s *Server, v int64) {
	t.Helper()
	// A hang guard, not a speed limit: under a loaded CI run (the race
	// detector, other packages' tests fsyncing too) a checkpoint write has
	// taken seconds, and 10 s was once not enough for the last three.
	deadline := time.Now().Add(2 * time.Minute)
	for s.CheckpointStats().LastVersion < v {
		if time.Now().After(deadline) {
			t.Fatalf("version %d not written: %+v", v, s.CheckpointStats())
		}
		time.Sleep(time.Millisecond)
	}
}

type paramState struct {
	data  []float32
	slots map[string][]float32
	step  int64
	shard int
}

// stateOf is every parameter of a set of shards with its optimizer slots.
func stateOf(shards []*Server) map[string]paramState {
	out := map[string]paramState{}
	for i, s := range shards {
		for name, data := range s.Parameters() {
			slots, step, _ := s.opt.Slots(name)
			out[name] = paramState{data: data, slots: slots, step: step, shard: i}
		}
	}
	return out
}

func TestNewServerValidatesCheckpointConfig(t *testing.T) {
	for _, cfg := range []Config{
		{CheckpointSteps: -1, CheckpointDir: "x"},
		{KeepCheckpointMax: -1},
		{CheckpointSteps: 10},
	} {
		cfg.NumPS, cfg.Optimizer = 1, sgd(t, "0.1")
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("NewServer(%+v) accepted", cfg)
		}
	}
}

func TestCheckpointEveryNVersions(t *testing.T) {
	dir := t.TempDir()
	shards := newShards(t, 1, Config{CheckpointDir: dir, CheckpointSteps: 2})
	s := shards[0]
	for k := 1; k <= 4; k++ {
		step(t, shards, k)
		if k%2 == 0 {
			waitWritten(t, s, int64(k))
		}
	}
	at4 := stateOf(shards)
	step(t, shards, 5)
	s.Close() // flushes, and writes a final checkpoint at version 5
	vs, err := checkpoint.Versions(dir)
	if err != nil || !slices.Equal(vs, []int64{5, 4, 2}) {
		t.Fatalf("versions %v, %v; want [5 4 2]", vs, err)
	}
	if st := s.CheckpointStats(); st.Written != 3 || st.Failed != 0 || st.LastVersion != 5 {
		t.Errorf("stats %+v, want 3 written, last version 5", st)
	}
	// Version 4 holds exactly the state after the 4th push.
	set, err := checkpoint.ReadVersion(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	c := set.Shards[0]
	if c.Version != 4 || c.Optimizer != s.opt.String() || len(c.DenseParameters) != len(ckptParams) || len(c.Slots) != len(ckptParams) {
		t.Fatalf("checkpoint version %d optimizer %q, %d params, %d slots", c.Version, c.Optimizer, len(c.DenseParameters), len(c.Slots))
	}
	for i, p := range c.DenseParameters {
		_, data, _ := wire.DecodeTensor(p)
		want := at4[p.Name]
		if !slices.Equal(data, want.data) {
			t.Errorf("%s = %v, want %v", p.Name, data, want.data)
		}
		ps := c.Slots[i]
		if ps.Name != p.Name || ps.Step != want.step || len(ps.Slots) != len(want.slots) {
			t.Fatalf("slots %s step %d (%d slots), want %s step %d (%d)", ps.Name, ps.Step, len(ps.Slots), p.Name, want.step, len(want.slots))
		}
		for _, sl := range ps.Slots {
			_, got, _ := wire.DecodeTensor(sl)
			if !slices.Equal(got, want.slots[sl.Name]) {
				t.Errorf("%s slot %s = %v, want %v", p.Name, sl.Name, got, want.slots[sl.Name])
			}
		}
	}
	// Close twice is harmless and writes nothing more.
	s.Close()
	if st := s.CheckpointStats(); st.Written != 3 {
		t.Errorf("second Close wrote: %+v", st)
	}
}

func TestKeepCheckpointMax(t *testing.T) {
	dir := t.TempDir()
	shards := newShards(t, 1, Config{CheckpointDir: dir, CheckpointSteps: 1, KeepCheckpointMax: 2})
	for k := 1; k <= 6; k++ {
		step(t, shards, k)
		waitWritten(t, shards[0], int64(k))
	}
	shards[0].Close()
	vs, err := checkpoint.Versions(dir)
	if err != nil || !slices.Equal(vs, []int64{6, 5}) {
		t.Fatalf("versions %v, %v; want [6 5]", vs, err)
	}
}

func TestRestoreSameShardCount(t *testing.T) {
	dir := t.TempDir()
	first := newShards(t, 2, Config{CheckpointDir: dir, CheckpointSteps: 3})
	for k := 1; k <= 3; k++ {
		step(t, first, k)
	}
	want := stateOf(first)
	for _, s := range first {
		s.Close()
	}
	var logs logBuffer
	again := newShards(t, 2, Config{CheckpointDir: dir, CheckpointSteps: 3, Logger: logs.logger()})
	for i, s := range again {
		if v := s.Version(); v != 3 {
			t.Errorf("shard %d restored version %d, want 3", i, v)
		}
	}
	if got := stateOf(again); !reflect.DeepEqual(got, want) {
		t.Errorf("restored state differs:\ngot  %v\nwant %v", got, want)
	}
	if !strings.Contains(logs.String(), `msg="restored checkpoint"`) || !strings.Contains(logs.String(), "version=3") {
		t.Errorf("no restore line in the log:\n%s", logs.String())
	}
	// newShards pushed the initial model; a restored shard ignored it.
	resp, err := again[0].PushModel(context.Background(), &pserverpb.Model{})
	if err != nil || resp.Accepted || resp.Version != 3 {
		t.Errorf("PushModel to a restored shard: %v, %v", resp, err)
	}
	// Training goes on from the restored slots: one more step on both
	// sets gives the same values.
	step(t, first, 4)
	step(t, again, 4)
	if got, want := stateOf(again), stateOf(first); !reflect.DeepEqual(got, want) {
		t.Errorf("a step after restoring differs from one without the restart")
	}
}

func TestRestoreReshards(t *testing.T) {
	for _, c := range []struct{ from, to int }{{2, 1}, {1, 2}, {3, 2}} {
		dir := t.TempDir()
		first := newShards(t, c.from, Config{CheckpointDir: dir, CheckpointSteps: 2})
		for k := 1; k <= 2; k++ {
			step(t, first, k)
		}
		want := stateOf(first)
		for _, s := range first {
			s.Close()
		}
		again := newShards(t, c.to, Config{CheckpointDir: dir, CheckpointSteps: 2})
		got := stateOf(again)
		if len(got) != len(want) {
			t.Fatalf("%d→%d: restored %d parameters, want %d", c.from, c.to, len(got), len(want))
		}
		for name, w := range want {
			g := got[name]
			if g.shard != shard.Of(name, c.to) {
				t.Errorf("%d→%d: %s on shard %d, want %d", c.from, c.to, name, g.shard, shard.Of(name, c.to))
			}
			if !slices.Equal(g.data, w.data) || !reflect.DeepEqual(g.slots, w.slots) || g.step != w.step {
				t.Errorf("%d→%d: %s restored as %+v, want %+v", c.from, c.to, name, g, w)
			}
		}
		for i, s := range again {
			if s.Version() != 2 {
				t.Errorf("%d→%d: shard %d at version %d, want 2", c.from, c.to, i, s.Version())
			}
		}
	}
}

func TestRestoreFallsBackPastCorruptVersion(t *testing.T) {
	dir := t.TempDir()
	first := newShards(t, 1, Config{CheckpointDir: dir, CheckpointSteps: 2})
	step(t, first, 1)
	step(t, first, 2)
	waitWritten(t, first[0], 2)
	at2 := stateOf(first)
	step(t, first, 3)
	step(t, first, 4)
	first[0].Close() // versions 2 and 4
	if err := os.WriteFile(checkpoint.Path(dir, 4, 0, 1), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	again := newShards(t, 1, Config{CheckpointDir: dir, Logger: logs.logger()})
	if v := again[0].Version(); v != 2 {
		t.Fatalf("restored version %d, want the fallback 2", v)
	}
	if !reflect.DeepEqual(stateOf(again), at2) {
		t.Error("restored state is not version 2's")
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "version-4") {
		t.Errorf("no warning about the corrupt version:\n%s", logs.String())
	}
}

func TestRestoreFromInitDir(t *testing.T) {
	init := t.TempDir()
	first := newShards(t, 1, Config{CheckpointDir: init, CheckpointSteps: 1})
	step(t, first, 1)
	want := stateOf(first)
	first[0].Close()

	t.Run("used when checkpoint_dir is empty", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "new")
		s := newShards(t, 1, Config{CheckpointDir: dir, CheckpointSteps: 1, CheckpointDirForInit: init})[0]
		if s.Version() != 1 || !reflect.DeepEqual(stateOf([]*Server{s}), want) {
			t.Fatalf("not warm-started: version %d", s.Version())
		}
		// Checkpoints go to checkpoint_dir, not the init dir.
		step(t, []*Server{s}, 2)
		s.Close()
		if _, err := checkpoint.ReadVersion(dir, 2); err != nil {
			t.Error(err)
		}
		if _, err := checkpoint.ReadVersion(init, 2); err == nil {
			t.Error("wrote into checkpoint_dir_for_init")
		}
	})
	t.Run("ignored when checkpoint_dir has a version", func(t *testing.T) {
		dir := t.TempDir()
		own := newShards(t, 1, Config{CheckpointDir: dir, CheckpointSteps: 3})
		for k := range 3 {
			step(t, own, k)
		}
		own[0].Close()
		s := newShards(t, 1, Config{CheckpointDir: dir, CheckpointDirForInit: init})[0]
		if s.Version() != 3 {
			t.Errorf("version %d, want checkpoint_dir's 3", s.Version())
		}
	})
	t.Run("missing", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope")
		_, err := NewServer(Config{NumPS: 1, Optimizer: adam(t), CheckpointDirForInit: missing})
		if err == nil || !strings.Contains(err.Error(), "checkpoint_dir_for_init") || !strings.Contains(err.Error(), missing) {
			t.Errorf("NewServer = %v, want an error naming checkpoint_dir_for_init and %s", err, missing)
		}
	})
	t.Run("without a complete version", func(t *testing.T) {
		_, err := NewServer(Config{NumPS: 1, Optimizer: adam(t), CheckpointDirForInit: t.TempDir()})
		if !errors.Is(err, checkpoint.ErrNoCheckpoint) {
			t.Errorf("NewServer = %v, want ErrNoCheckpoint", err)
		}
	})
}

func TestRestoreErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A checkpoint_dir that cannot be read is an error, not a fresh start.
	if _, err := NewServer(Config{NumPS: 1, Optimizer: adam(t), CheckpointDir: file}); err == nil || !strings.Contains(err.Error(), "checkpoint_dir") {
		t.Errorf("unreadable checkpoint_dir: %v", err)
	}
	// Slots that are not Adam's (m only, no v).
	dir := t.TempDir()
	c := &pserverpb.Checkpoint{Version: 1, NumShards: 1, DenseParameters: []*pserverpb.Tensor{wire.EncodeTensor("w", []int{2}, []float32{1, 2})}}
	c.Slots = []*pserverpb.ParameterSlots{{Name: "w", Slots: []*pserverpb.Tensor{wire.EncodeTensor("m", []int{2}, []float32{1, 2})}}}
	if _, err := checkpoint.Write(dir, c); err != nil {
		t.Fatal(err)
	}
	// They do not fit: the values are restored and the slots dropped with
	// a warning rather than failing.
	var logs logBuffer
	s, err := NewServer(Config{NumPS: 1, Optimizer: adam(t), CheckpointDir: dir, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Parameters()["w"]; !slices.Equal(got, []float32{1, 2}) {
		t.Errorf("w = %v", got)
	}
	if _, _, ok := s.opt.Slots("w"); ok {
		t.Error("misfit slots were restored")
	}
	if !strings.Contains(logs.String(), "do not fit") {
		t.Errorf("no warning about the slots:\n%s", logs.String())
	}
}

// A warm start into another optimizer keeps the values; slots restart.
func TestRestoreIntoAnotherOptimizer(t *testing.T) {
	dir := t.TempDir()
	first := newShards(t, 1, Config{CheckpointDir: dir, CheckpointSteps: 1})
	step(t, first, 1)
	want := first[0].Parameters()
	first[0].Close()
	mom, err := optimizer.Parse("momentum:learning_rate=0.1,momentum=0.9")
	if err != nil {
		t.Fatal(err)
	}
	s := newShards(t, 1, Config{CheckpointDirForInit: dir, Optimizer: mom})[0]
	if !reflect.DeepEqual(s.Parameters(), want) {
		t.Error("values not restored")
	}
	step(t, []*Server{s}, 2) // the momentum slots start from zero
}

func TestCheckpointFailuresAreCountedNotFatal(t *testing.T) {
	var logs logBuffer
	shards := newShards(t, 1, Config{CheckpointDir: t.TempDir(), CheckpointSteps: 1, Logger: logs.logger()})
	s := shards[0]
	s.saver.write = func(string, *pserverpb.Checkpoint) (string, error) { return "", errors.New("disk full") }
	step(t, shards, 1)
	step(t, shards, 2)
	s.Close()
	st := s.CheckpointStats()
	if st.Failed < 1 || st.Written != 0 || st.LastVersion != -1 {
		t.Errorf("stats %+v, want failures and nothing written", st)
	}
	if s.Version() != 2 {
		t.Errorf("version %d: pushes failed along with the checkpoints", s.Version())
	}
	if !strings.Contains(logs.String(), "disk full") {
		t.Errorf("failure not logged:\n%s", logs.String())
	}
}

// Snapshots arriving while a write is in progress wait in a one-slot
// mailbox; a newer one replaces the waiting one, never two writes at once.
func TestCheckpointSkippedWhileWriting(t *testing.T) {
	reg := prometheus.NewRegistry()
	dir := t.TempDir()
	shards := newShards(t, 1, Config{CheckpointDir: dir, CheckpointSteps: 1, Registry: reg})
	s := shards[0]
	started, release := make(chan int64, 10), make(chan struct{})
	var mu sync.Mutex
	writing := 0
	s.saver.write = func(dir string, c *pserverpb.Checkpoint) (string, error) {
		mu.Lock()
		writing++
		if writing > 1 {
			t.Error("two checkpoint writes at once")
		}
		mu.Unlock()
		started <- c.Version
		<-release
		mu.Lock()
		writing--
		mu.Unlock()
		return checkpoint.Write(dir, c)
	}
	step(t, shards, 1)
	if v := <-started; v != 1 {
		t.Fatalf("first write of version %d", v)
	}
	step(t, shards, 2) // waits
	step(t, shards, 3) // replaces 2
	got := gather(t, reg)["elasticdl_ps_checkpoints_total{outcome=skipped,shard=0}"]
	close(release)
	s.Close()
	if v := <-started; v != 3 {
		t.Errorf("second write of version %d, want 3", v)
	}
	if st := s.CheckpointStats(); st.Written != 2 || st.Skipped != 1 || st.LastVersion != 3 {
		t.Errorf("stats %+v, want 2 written, 1 skipped", st)
	}
	if got != 1 {
		t.Errorf("skipped metric %v, want 1", got)
	}
	if vs, _ := checkpoint.Versions(dir); !slices.Equal(vs, []int64{3, 1}) {
		t.Errorf("versions %v, want [3 1]", vs)
	}
}

func TestCheckpointMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	shards := newShards(t, 1, Config{CheckpointDir: t.TempDir(), CheckpointSteps: 1, Registry: reg})
	s := shards[0]
	step(t, shards, 1)
	s.saver.close(nil) // flush, keep metrics registered
	s.saver.write = func(string, *pserverpb.Checkpoint) (string, error) { return "", errors.New("boom") }
	s.saver.save(s.finalSnapshot())
	got := gather(t, reg)
	if got["elasticdl_ps_checkpoints_total{outcome=written,shard=0}"] != 1 || got["elasticdl_ps_checkpoints_total{outcome=failed,shard=0}"] != 1 {
		t.Errorf("checkpoint metrics %v", got)
	}
}

// Pushes from many goroutines while checkpoints are taken: the race
// detector checks the snapshot's locking, and every checkpoint restores.
func TestCheckpointUnderConcurrentPushes(t *testing.T) {
	dir := t.TempDir()
	shards := newShards(t, 2, Config{CheckpointDir: dir, CheckpointSteps: 5, KeepCheckpointMax: 3})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for k := range 40 {
				step(t, shards, w*100+k)
			}
		})
	}
	wg.Wait()
	for _, s := range shards {
		s.Close()
	}
	set, err := checkpoint.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if set.Version != 160 {
		t.Errorf("newest complete version %d, want 160 (final)", set.Version)
	}
	again := newShards(t, 2, Config{CheckpointDir: dir})
	if !reflect.DeepEqual(stateOf(again), stateOf(shards)) {
		t.Error("restored state differs from the final state")
	}
}

// A shard relaunched on a checkpoint answers pulls over gRPC with the
// checkpoint's version and values, without any PushModel; Serve writes a
// final checkpoint when stopped.
func TestServeRestoresAndCheckpointsOnShutdown(t *testing.T) {
	dir := t.TempDir()
	first := newShards(t, 1, Config{CheckpointDir: dir, CheckpointSteps: 2})
	step(t, first, 1)
	step(t, first, 2)
	want := first[0].Parameters()
	first[0].Close()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, lis, Config{NumPS: 1, Optimizer: adam(t), CheckpointDir: dir, CheckpointSteps: 100})
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pserverpb.NewPserverClient(conn)
	resp, err := c.PullDenseParameters(ctx, &pserverpb.PullDenseParametersRequest{Version: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Initialized || resp.Version != 2 || len(resp.DenseParameters) != len(want) {
		t.Fatalf("pull: initialized %v version %d, %d tensors", resp.Initialized, resp.Version, len(resp.DenseParameters))
	}
	for _, p := range resp.DenseParameters {
		_, data, _ := wire.DecodeTensor(p)
		if !slices.Equal(data, want[p.Name]) {
			t.Errorf("%s = %v, want %v", p.Name, data, want[p.Name])
		}
	}
	g := &pserverpb.PushGradientsRequest{Version: 2, Gradients: []*pserverpb.Tensor{wire.EncodeTensor("w", []int{4}, []float32{1, 1, 1, 1})}}
	if pr, err := c.PushGradients(ctx, g); err != nil || pr.Version != 3 {
		t.Fatalf("push: %v, %v", pr, err)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a hang guard: the final write fsyncs on a busy disk
		t.Fatal("Serve did not return")
	}
	if _, err := checkpoint.ReadVersion(dir, 3); err != nil {
		t.Errorf("no final checkpoint at version 3: %v", err)
	}
}

// A shard relaunched after dying mid-write removes its temp files; a
// shard closed before it was ever initialized writes nothing.
func TestSaverLifecycleEdges(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(checkpoint.VersionDir(dir, 10), ".variables-0-of-1.ckpt.tmp42")
	if err := os.MkdirAll(filepath.Dir(tmp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	s, err := NewServer(Config{NumPS: 1, Optimizer: adam(t), CheckpointDir: dir, CheckpointSteps: 1, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp file still there: %v", err)
	}
	if !strings.Contains(logs.String(), "removed temp files") {
		t.Errorf("removal not logged:\n%s", logs.String())
	}
	s.Close()
	if st := s.CheckpointStats(); st.Written != 0 || st.LastVersion != -1 {
		t.Errorf("uninitialized shard wrote checkpoints: %+v", st)
	}
	s.saver.offer(&pserverpb.Checkpoint{Version: 1, NumShards: 1}) // after close: ignored
	if st := s.CheckpointStats(); st.Written != 0 || st.Skipped != 0 {
		t.Errorf("offer after Close counted: %+v", st)
	}
	off := newTestServer(t, nil)
	if st := off.CheckpointStats(); st != (CheckpointStats{LastVersion: -1}) {
		t.Errorf("stats without checkpointing %+v", st)
	}
}
