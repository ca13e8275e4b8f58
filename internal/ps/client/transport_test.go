package client

import (
	"context"
	"fmt"
	"math"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/internal/rpc"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

// TestBFloat16Transport: with bfloat16 transport the gradients reach the
// shard rounded to 8 significant bits, the shard keeps float32, and pulls
// and push answers bring its values back rounded the same way.
func TestBFloat16Transport(t *testing.T) {
	procs, addrs := startCluster(t, 1, 1)
	c, err := Dial(context.Background(), addrs, WithTransportDType(pserverpb.DType_BFLOAT16), WithBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t, 10*time.Second)
	m := []*nn.Param{param("w", []int{3}, 1.001, 2, 3)}
	if err := c.PushModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	if got := procs[0].srv.Parameters()["w"]; got[0] != 1.001 {
		t.Fatalf("the initial model travelled rounded: %v", got)
	}
	m[0].Grad.Data[0], m[0].Grad.Data[1], m[0].Grad.Data[2] = 0.0011, 0, 0 // 0.0011 is not a bfloat16
	r, err := c.StartPush(ctx, PushRequest{Params: m, ReturnParameters: true}).Wait()
	if err != nil || !r.Fresh {
		t.Fatalf("push: %+v, %v", r, err)
	}
	// Rounding to bfloat16 (none of these values is a tie).
	bf16 := func(f float32) float32 { return math.Float32frombits((math.Float32bits(f) + 0x8000) & 0xffff0000) }
	want := float32(1.001) - bf16(0.0011) // SGD, lr 1, applied in float32
	if got := procs[0].srv.Parameters()["w"][0]; got != want {
		t.Errorf("shard holds %v, want 1.001 - bf16(0.0011) = %v", got, want)
	}
	wantBF := bf16(want)
	if m[0].Value.Data[0] != wantBF || m[0].Value.Data[1] != 2 {
		t.Errorf("worker holds %v, want the shard's values in bfloat16: %v, 2, 3", m[0].Value.Data, wantBF)
	}
	m2 := []*nn.Param{param("w", []int{3})}
	c2, err := Dial(context.Background(), addrs, WithTransportDType(pserverpb.DType_BFLOAT16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	if _, err := c2.Pull(ctx, m2); err != nil || m2[0].Value.Data[0] != wantBF {
		t.Errorf("bfloat16 pull: %v, %v; want %v", m2[0].Value.Data, err, wantBF)
	}
	if _, err := Dial(context.Background(), addrs, WithTransportDType(9)); err == nil {
		t.Error("Dial accepted an unknown transport type")
	}
}

// The same pushes and pulls give the same values over direct connections
// and over gRPC, and a client of a PS that only serves gRPC falls back to
// it.
func TestTransportsAgree(t *testing.T) {
	_, addrs := startCluster(t, 2, 0.25)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := optimizer.NewSGD("sgd", 0.25, 0, false)
	srv, err := ps.NewServer(ps.Config{Index: 0, NumPS: 1, Optimizer: opt})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(rpc.ServerOptions()...)
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	ctx := ctxT(t, 20*time.Second)
	direct := dial(t, addrs)
	viaGRPC, err := Dial(ctx, addrs, WithGRPCOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer viaGRPC.Close()
	fallback := dial(t, []string{lis.Addr().String()})
	for _, c := range []*Client{direct, fallback} {
		if err := c.PushModel(ctx, testModel()); err != nil {
			t.Fatal(err)
		}
	}
	a, b, f := zeroValues(testModel()), zeroValues(testModel()), zeroValues(testModel())
	pullAll := func() {
		t.Helper()
		for i, c := range []*Client{direct, viaGRPC, fallback} {
			if _, err := c.Pull(ctx, [][]*nn.Param{a, b, f}[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	pullAll()
	for step := range 6 {
		// Pushes alternate between the transports; the fallback client
		// mirrors them on its own PS.
		c, m := direct, a
		if step%2 == 1 {
			c, m = viaGRPC, b
		}
		setGrads(m, float32(step+1))
		setGrads(f, float32(step+1))
		if r, err := c.StartPush(ctx, PushRequest{Params: m, ReturnParameters: step < 4}).Wait(); err != nil || !r.Accepted {
			t.Fatalf("step %d: %+v, %v", step, r, err)
		}
		if r, err := fallback.StartPush(ctx, PushRequest{Params: f, ReturnParameters: step < 4}).Wait(); err != nil || !r.Accepted {
			t.Fatalf("step %d, fallback: %+v, %v", step, r, err)
		}
	}
	pullAll()
	wantValues(t, values(b), values(a))
	wantValues(t, values(f), values(a))
	// 1 - 0.25 × (1+...+6) from each initial value.
	if got, want := a[3].Value.Data[0], float32(10-0.25*21); got != want {
		t.Errorf("out/bias = %v, want %v", got, want)
	}
	for _, s := range fallback.shards {
		if !s.direct.Unsupported() {
			t.Errorf("shard %d: the client did not notice that the PS only serves gRPC", s.index)
		}
	}
}

// BenchmarkPushPull moves a 4 MiB model (4 x 512x512 float32) to the PS
// and back: "push+pull" as two calls; "push-return" as one push answered
// with the parameters (what an async worker does), in float32 and in
// bfloat16; over direct connections (on the PS's local socket with a
// shared region, as on one host; the socket alone; TCP, as across hosts)
// and over gRPC. MB/s counts the float32
// bytes of both directions, whatever travels.
func BenchmarkPushPull(b *testing.B) {
	for _, numPS := range []int{1, 2} {
		for _, mode := range []string{"push+pull", "push-return", "push-return-bf16"} {
			for _, transport := range []string{"direct", "direct-socket", "direct-tcp", "grpc"} {
				b.Run(fmt.Sprintf("ps=%d/%s/%s", numPS, mode, transport), func(b *testing.B) {
					_, addrs := startCluster(b, numPS, 1e-6, transport == "direct-tcp")
					dtype := pserverpb.DType_FLOAT32
					if mode == "push-return-bf16" {
						dtype = pserverpb.DType_BFLOAT16
					}
					opts := []Option{WithTransportDType(dtype)}
					switch transport {
					case "grpc":
						opts = append(opts, WithGRPCOnly())
					case "direct-socket":
						opts = append(opts, func(o *options) { o.noSharedMemory = true })
					}
					c, err := Dial(context.Background(), addrs, opts...)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { c.Close() })
					ctx := context.Background()
					var model []*nn.Param
					for i := range 4 {
						model = append(model, param(fmt.Sprintf("w%d", i), []int{512, 512}))
					}
					if err := c.PushModel(ctx, model); err != nil {
						b.Fatal(err)
					}
					setGrads(model, 1)
					b.SetBytes(2 * 4 * 4 * 512 * 512)
					b.ReportAllocs()
					for b.Loop() {
						if mode != "push+pull" {
							if r, err := c.StartPush(ctx, PushRequest{Params: model, ReturnParameters: true}).Wait(); err != nil || !r.Fresh {
								b.Fatal(r, err)
							}
							continue
						}
						if _, err := c.Push(ctx, model, nil, 0, AllShards); err != nil {
							b.Fatal(err)
						}
						if changed, err := c.Pull(ctx, model); err != nil || !changed {
							b.Fatal(changed, err)
						}
					}
				})
			}
		}
	}
}
