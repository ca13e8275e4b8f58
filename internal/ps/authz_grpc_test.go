package ps

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/rpc"
	"elasticdl/internal/tlsid"
	"elasticdl/internal/tlsid/tlstest"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// servePSWithTLS serves a shard of job j's on loopback, its model pushed
// by worker 0; it returns the address.
func servePSWithTLS(t *testing.T, j *tlstest.Job) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, lis, Config{Index: 0, NumPS: 1, Optimizer: sgd(t, "0.1"), Creds: j.Creds(tlsid.PS, 0)})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Error(err)
		}
	})
	w0 := psClient(t, lis.Addr().String(), tlsid.DialOption(j.Creds(tlsid.Worker, 0), tlsid.PS))
	if _, err := w0.PushModel(ctx, testModel(0)); err != nil {
		t.Fatalf("worker 0's PushModel: %v", err)
	}
	return lis.Addr().String()
}

func psClient(t *testing.T, addr string, opt grpc.DialOption) pserverpb.PserverClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(rpc.DialOptions(nil), opt)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pserverpb.NewPserverClient(conn)
}

// A PS takes gradients only from the job's workers, each as itself, and
// its shape-changing calls only from the master: everyone else is refused
// and the model's version does not move.
func TestPSRefusesWhoMayNot(t *testing.T) {
	j := tlstest.NewJob(t, "psauthz")
	addr := servePSWithTLS(t, j)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	master := psClient(t, addr, tlsid.DialOption(j.Creds(tlsid.Master, 0), tlsid.PS))
	version := func() int64 {
		t.Helper()
		st, err := master.GetStatus(ctx, &pserverpb.GetStatusRequest{})
		if err != nil {
			t.Fatalf("the master's GetStatus: %v", err)
		}
		return st.Version
	}
	push := &pserverpb.PushGradientsRequest{WorkerId: 0, Version: 0, Gradients: []*pserverpb.Tensor{
		wire.EncodeTensor("b", []int{2}, []float32{1, 1})}}
	type refusal struct {
		name string
		opt  grpc.DialOption
		code codes.Code
	}
	var cases []refusal
	for _, imp := range j.Impostors(tlsid.PS) {
		cases = append(cases, refusal{imp.Name, imp.Opt, codes.Unavailable})
	}
	cases = append(cases, []refusal{
		{"worker 1 as worker 0", tlsid.DialOption(j.Creds(tlsid.Worker, 1), tlsid.PS), codes.PermissionDenied},
		{"the master pushing gradients", tlsid.DialOption(j.Creds(tlsid.Master, 0), tlsid.PS), codes.PermissionDenied},
		{"another PS", tlsid.DialOption(j.Creds(tlsid.PS, 1), tlsid.PS), codes.PermissionDenied},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := psClient(t, addr, c.opt).PushGradients(ctx, push)
			if status.Code(err) != c.code {
				t.Fatalf("PushGradients: %v, want code %v", err, c.code)
			}
			if v := version(); v != 0 {
				t.Fatalf("the model moved to version %d", v)
			}
		})
	}
	w0 := psClient(t, addr, tlsid.DialOption(j.Creds(tlsid.Worker, 0), tlsid.PS))
	for _, call := range []func() error{
		func() error {
			_, err := w0.SaveModel(ctx, &pserverpb.SaveModelRequest{Dir: t.TempDir(), Version: 0})
			return err
		},
		func() error {
			_, err := w0.SetLiveWorkers(ctx, &pserverpb.SetLiveWorkersRequest{LiveWorkers: 1})
			return err
		},
		func() error {
			_, err := w0.Reshard(ctx, &pserverpb.ReshardRequest{Layout: 1, NumShards: 2})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.PermissionDenied {
			t.Errorf("a worker calling the master's method: %v, want PermissionDenied", err)
		}
	}
	if _, err := w0.PushGradients(ctx, push); err != nil {
		t.Fatalf("worker 0's own push: %v", err)
	}
	if v := version(); v != 1 {
		t.Fatalf("after worker 0's push: version %d, want 1", v)
	}
}
