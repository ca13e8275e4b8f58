package ps

import (
	"context"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/rpc"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

func sgd(t testing.TB, lr string) optimizer.Optimizer {
	t.Helper()
	o, err := optimizer.Parse("sgd:learning_rate=" + lr)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func newTestServer(t *testing.T, reg *prometheus.Registry) *Server {
	t.Helper()
	s, err := NewServer(Config{Index: 0, NumPS: 1, Optimizer: sgd(t, "0.5"), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// model: w [2,2] and b [2].
func testModel(version int64) *pserverpb.Model {
	return &pserverpb.Model{Version: version, DenseParameters: []*pserverpb.Tensor{
		wire.EncodeTensor("w", []int{2, 2}, []float32{1, 2, 3, 4}),
		wire.EncodeTensor("b", []int{2}, []float32{-1, 1}),
	}}
}

func wantCode(t *testing.T, err error, code codes.Code, substr string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error %v, want code %v", err, code)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Fatalf("error %v, want it to mention %q", err, substr)
	}
}

func TestNewServerValidates(t *testing.T) {
	o := sgd(t, "0.1")
	for _, cfg := range []Config{
		{Index: 0, NumPS: 0, Optimizer: o},
		{Index: 2, NumPS: 2, Optimizer: o},
		{Index: -1, NumPS: 2, Optimizer: o},
		{Index: 0, NumPS: 1},
	} {
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("NewServer(%+v) accepted", cfg)
		}
	}
}

func TestPushModelFirstWins(t *testing.T) {
	s := newTestServer(t, nil)
	ctx := context.Background()
	if v := s.Version(); v != -1 {
		t.Errorf("uninitialized Version() = %d, want -1", v)
	}
	resp, err := s.PushModel(ctx, testModel(7))
	if err != nil || !resp.Accepted || resp.Version != 7 {
		t.Fatalf("first push: %v, %v", resp, err)
	}
	second := testModel(0)
	second.DenseParameters[0] = wire.EncodeTensor("w", []int{2, 2}, []float32{9, 9, 9, 9})
	resp, err = s.PushModel(ctx, second)
	if err != nil || resp.Accepted || resp.Version != 7 {
		t.Fatalf("second push: %v, %v; want accepted=false version=7", resp, err)
	}
	if got := s.Parameters()["w"]; !slices.Equal(got, []float32{1, 2, 3, 4}) {
		t.Errorf("w = %v after rejected push, want [1 2 3 4]", got)
	}
}

func TestPushModelConcurrentOneWins(t *testing.T) {
	s := newTestServer(t, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for i := range 8 {
		wg.Go(func() {
			m := &pserverpb.Model{DenseParameters: []*pserverpb.Tensor{wire.EncodeTensor("b", []int{1}, []float32{float32(i)})}}
			resp, err := s.PushModel(context.Background(), m)
			if err != nil {
				t.Error(err)
				return
			}
			if resp.Accepted {
				mu.Lock()
				accepted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if accepted != 1 {
		t.Errorf("%d pushes accepted, want exactly 1", accepted)
	}
}

func TestPushModelInvalid(t *testing.T) {
	for name, m := range map[string]*pserverpb.Model{
		"empty name": {DenseParameters: []*pserverpb.Tensor{wire.EncodeTensor("", []int{1}, []float32{1})}},
		"duplicate":  {DenseParameters: []*pserverpb.Tensor{wire.EncodeTensor("b", []int{1}, []float32{1}), wire.EncodeTensor("b", []int{1}, []float32{1})}},
		"bad bytes":  {DenseParameters: []*pserverpb.Tensor{{Name: "b", Dims: []int64{2}, Content: make([]byte, 5)}}},
	} {
		t.Run(name, func(t *testing.T) {
			s := newTestServer(t, nil)
			_, err := s.PushModel(context.Background(), m)
			wantCode(t, err, codes.InvalidArgument, "")
			if s.Version() != -1 {
				t.Error("invalid model initialized the shard")
			}
		})
	}
}

func TestPushModelMisrouted(t *testing.T) {
	// shard.Of("a", 2) = 0 (FNV-1a "a" = 0xe40c292c, even).
	s, err := NewServer(Config{Index: 1, NumPS: 2, Optimizer: sgd(t, "0.1")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.PushModel(context.Background(), &pserverpb.Model{DenseParameters: []*pserverpb.Tensor{wire.EncodeTensor("a", []int{1}, []float32{1})}})
	wantCode(t, err, codes.InvalidArgument, `"a" belongs to shard 0 of 2`)
}

func TestPullVersions(t *testing.T) {
	s := newTestServer(t, nil)
	ctx := context.Background()
	resp, err := s.PullDenseParameters(ctx, &pserverpb.PullDenseParametersRequest{Version: -1})
	if err != nil || resp.Initialized {
		t.Fatalf("pull before init: %v, %v; want initialized=false, no error", resp, err)
	}
	if _, err := s.PushModel(ctx, testModel(0)); err != nil {
		t.Fatal(err)
	}
	resp, err = s.PullDenseParameters(ctx, &pserverpb.PullDenseParametersRequest{Version: -1})
	if err != nil || !resp.Initialized || resp.Version != 0 || len(resp.DenseParameters) != 2 {
		t.Fatalf("pull -1: %v, %v", resp, err)
	}
	// Sorted by name: b before w.
	if resp.DenseParameters[0].Name != "b" || resp.DenseParameters[1].Name != "w" {
		t.Errorf("tensor order %q %q, want b w", resp.DenseParameters[0].Name, resp.DenseParameters[1].Name)
	}
	shape, data, err := wire.DecodeTensor(resp.DenseParameters[1])
	if err != nil || !slices.Equal(shape, []int{2, 2}) || !slices.Equal(data, []float32{1, 2, 3, 4}) {
		t.Errorf("w = %v %v %v", shape, data, err)
	}
	resp, err = s.PullDenseParameters(ctx, &pserverpb.PullDenseParametersRequest{Version: 0})
	if err != nil || !resp.Initialized || len(resp.DenseParameters) != 0 {
		t.Fatalf("pull current: %v, %v; want no tensors", resp, err)
	}
	push(t, s, 0, map[string][]float32{"b": {1, 1}})
	resp, err = s.PullDenseParameters(ctx, &pserverpb.PullDenseParametersRequest{Version: 0})
	if err != nil || resp.Version != 1 || len(resp.DenseParameters) != 2 {
		t.Fatalf("pull stale: %v, %v; want version 1 with all tensors", resp, err)
	}
}

func push(t *testing.T, s *Server, version int64, grads map[string][]float32) *pserverpb.PushGradientsResponse {
	t.Helper()
	req := &pserverpb.PushGradientsRequest{Version: version}
	for _, name := range slices.Sorted(maps.Keys(grads)) {
		shape := []int{len(grads[name])}
		if name == "w" {
			shape = []int{2, 2}
		}
		req.Gradients = append(req.Gradients, wire.EncodeTensor(name, shape, grads[name]))
	}
	resp, err := s.PushGradients(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestPushGradientsSGD(t *testing.T) {
	s := newTestServer(t, nil) // lr 0.5
	ctx := context.Background()
	_, err := s.PushGradients(ctx, &pserverpb.PushGradientsRequest{})
	wantCode(t, err, codes.FailedPrecondition, "not initialized")
	if _, err := s.PushModel(ctx, testModel(0)); err != nil {
		t.Fatal(err)
	}
	// w = [1 2 3 4] - 0.5*[2 2 0 -2] = [0 1 3 5]; b = [-1 1] - 0.5*[1 -1] = [-1.5 1.5]
	resp := push(t, s, 0, map[string][]float32{"w": {2, 2, 0, -2}, "b": {1, -1}})
	if !resp.Accepted || resp.Version != 1 {
		t.Errorf("push: %v, want accepted version 1", resp)
	}
	// A stale push (computed on version 0) is still applied in async mode;
	// only b: b = [-1.5 1.5] - 0.5*[1 1] = [-2 1].
	resp = push(t, s, 0, map[string][]float32{"b": {1, 1}})
	if !resp.Accepted || resp.Version != 2 || s.Version() != 2 {
		t.Errorf("stale push: %v, want accepted version 2", resp)
	}
	p := s.Parameters()
	if !slices.Equal(p["w"], []float32{0, 1, 3, 5}) || !slices.Equal(p["b"], []float32{-2, 1}) {
		t.Errorf("params %v", p)
	}
}

func TestPushGradientsInvalidAppliesNothing(t *testing.T) {
	good := wire.EncodeTensor("w", []int{2, 2}, []float32{1, 1, 1, 1})
	for _, c := range []struct {
		name, mention string
		bad           *pserverpb.Tensor
	}{
		{"unknown", `"nope"`, wire.EncodeTensor("nope", []int{2}, []float32{1, 1})},
		{"transposed shape", `"b"`, wire.EncodeTensor("b", []int{2, 1}, []float32{1, 1})},
		{"wrong length", `"b"`, wire.EncodeTensor("b", []int{3}, []float32{1, 1, 1})},
		{"short content", `"b"`, &pserverpb.Tensor{Name: "b", Dims: []int64{2}, Content: make([]byte, 7)}},
		{"duplicate", `"w"`, good},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newTestServer(t, nil)
			if _, err := s.PushModel(context.Background(), testModel(0)); err != nil {
				t.Fatal(err)
			}
			// The valid gradient comes first, so a server that applied as it
			// validated would have changed w.
			_, err := s.PushGradients(context.Background(), &pserverpb.PushGradientsRequest{Gradients: []*pserverpb.Tensor{good, c.bad}})
			wantCode(t, err, codes.InvalidArgument, c.mention)
			if s.Version() != 0 {
				t.Errorf("version %d after invalid push, want 0", s.Version())
			}
			if p := s.Parameters(); !slices.Equal(p["w"], []float32{1, 2, 3, 4}) || !slices.Equal(p["b"], []float32{-1, 1}) {
				t.Errorf("params changed by invalid push: %v", p)
			}
		})
	}
}

// TestConcurrentPushes runs pushes and pulls together under -race; with SGD
// the result is exact whatever the interleaving.
func TestConcurrentPushes(t *testing.T) {
	s := newTestServer(t, nil) // lr 0.5
	ctx := context.Background()
	if _, err := s.PushModel(ctx, testModel(0)); err != nil {
		t.Fatal(err)
	}
	const workers, pushes = 4, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range pushes {
				req := &pserverpb.PushGradientsRequest{WorkerId: int32(w), Gradients: []*pserverpb.Tensor{
					wire.EncodeTensor("w", []int{2, 2}, []float32{1, 0, 0, 0}),
					wire.EncodeTensor("b", []int{2}, []float32{0, -1}),
				}}
				if _, err := s.PushGradients(ctx, req); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Go(func() {
			for range pushes {
				if _, err := s.PullDenseParameters(ctx, &pserverpb.PullDenseParametersRequest{Version: -1}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if s.Version() != workers*pushes {
		t.Errorf("version %d, want %d", s.Version(), workers*pushes)
	}
	// w[0] = 1 - 0.5*400 = -199, b[1] = 1 + 0.5*400 = 201.
	p := s.Parameters()
	if p["w"][0] != -199 || p["b"][1] != 201 || p["w"][1] != 2 {
		t.Errorf("params %v, want w[0]=-199 w[1]=2 b[1]=201", p)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newTestServer(t, reg)
	ctx := context.Background()
	_, _ = s.PullDenseParameters(ctx, &pserverpb.PullDenseParametersRequest{Version: -1})
	_, _ = s.PushGradients(ctx, &pserverpb.PushGradientsRequest{})
	_, _ = s.PushModel(ctx, testModel(0))
	_, _ = s.PushModel(ctx, testModel(0))
	push(t, s, 0, map[string][]float32{"b": {1, 1}})
	push(t, s, 0, map[string][]float32{"b": {1, 1}}) // staleness 1
	_, _ = s.PullDenseParameters(ctx, &pserverpb.PullDenseParametersRequest{Version: -1})
	_, _ = s.PullDenseParameters(ctx, &pserverpb.PullDenseParametersRequest{Version: 2})

	got := gather(t, reg)
	for key, want := range map[string]float64{
		"elasticdl_ps_gradient_pushes_total{outcome=applied,shard=0}":       2,
		"elasticdl_ps_gradient_pushes_total{outcome=uninitialized,shard=0}": 1,
		"elasticdl_ps_pulls_total{outcome=uninitialized,shard=0}":           1,
		"elasticdl_ps_pulls_total{outcome=full,shard=0}":                    1,
		"elasticdl_ps_pulls_total{outcome=current,shard=0}":                 1,
		"elasticdl_ps_model_pushes_total{accepted=true,shard=0}":            1,
		"elasticdl_ps_model_pushes_total{accepted=false,shard=0}":           1,
		"elasticdl_ps_model_version{shard=0}":                               2,
		"elasticdl_ps_gradient_staleness_sum{shard=0}":                      1,
		"elasticdl_ps_gradient_staleness_count{shard=0}":                    2,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	// A second server on the same registry must fail loudly, not share
	// counters silently.
	if _, err := NewServer(Config{Index: 0, NumPS: 1, Optimizer: sgd(t, "0.1"), Registry: reg}); err == nil {
		t.Error("duplicate metrics registration accepted")
	}
	// After Close, a restarted shard can register again; the failed
	// attempt above must not have left anything behind.
	s.Close()
	if _, err := NewServer(Config{Index: 0, NumPS: 1, Optimizer: sgd(t, "0.1"), Registry: reg}); err != nil {
		t.Errorf("register after Close: %v", err)
	}
}

// gather flattens a registry into "name{l=v,...}" -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_sum{"+strings.Join(ls, ",")+"}"] = m.GetHistogram().GetSampleSum()
				out[mf.GetName()+"_count{"+strings.Join(ls, ",")+"}"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func TestServeOverGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Serve(ctx, lis, Config{Index: 0, NumPS: 1, Optimizer: sgd(t, "0.1")}) }()

	conn, err := grpc.NewClient(lis.Addr().String(), rpc.DialOptions(nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pserverpb.NewPserverClient(conn)
	// 8 MiB, past gRPC's 4 MiB default, must pass both ways.
	big := make([]float32, 2<<20)
	big[len(big)-1] = 42
	if _, err := c.PushModel(ctx, &pserverpb.Model{DenseParameters: []*pserverpb.Tensor{wire.EncodeTensor("big", []int{len(big)}, big)}}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.PullDenseParameters(ctx, &pserverpb.PullDenseParametersRequest{Version: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, data, err := wire.DecodeTensor(resp.DenseParameters[0])
	if err != nil || data[len(data)-1] != 42 {
		t.Fatalf("pulled big tensor: %v", err)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Serve returned %v after cancel, want nil", err)
		}
	case <-time.After(time.Minute): // a hang guard: a loaded CI run is slow
		t.Fatal("Serve did not return after cancel")
	}
}

func TestRunBadAddress(t *testing.T) {
	err := Run(context.Background(), "256.0.0.1:-5", Config{Index: 0, NumPS: 1, Optimizer: sgd(t, "0.1")})
	if err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Run on a bad address: %v", err)
	}
}

func TestRunBadConfigClosesListener(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := Serve(context.Background(), lis, Config{NumPS: 1}); err == nil {
		t.Fatal("Serve without optimizer succeeded")
	}
	// The port is free again.
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listener leaked: %v", err)
	}
	l2.Close()
}

// TestUnknownDTypeRefused: a pull or a push asking for parameters in an
// element type the PS does not know is refused as a whole, and the push's
// gradients are not applied.
func TestUnknownDTypeRefused(t *testing.T) {
	s := newTestServer(t, nil)
	if _, err := s.PushModel(context.Background(), testModel(0)); err != nil {
		t.Fatal(err)
	}
	_, err := s.PullDenseParameters(context.Background(), &pserverpb.PullDenseParametersRequest{Version: -1, Dtype: 9})
	wantCode(t, err, codes.InvalidArgument, "unknown element type 9")
	_, err = s.PushGradients(context.Background(), &pserverpb.PushGradientsRequest{ReturnParameters: true, ParametersDtype: 9,
		Gradients: []*pserverpb.Tensor{wire.EncodeTensor("b", []int{2}, []float32{1, 1})}})
	wantCode(t, err, codes.InvalidArgument, "unknown element type 9")
	if s.Version() != 0 || s.Parameters()["b"][0] != -1 {
		t.Errorf("version %d, b %v: the refused push was applied", s.Version(), s.Parameters()["b"])
	}
}
