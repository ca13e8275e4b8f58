package direct

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"elasticdl/internal/tlsid"
	"elasticdl/internal/tlsid/tlstest"
	"elasticdl/proto/pserverpb"
)

// benchPS takes a push's gradients and answers a pull with params, laid
// in the lent buffer as a PS does.
func benchPS(params []byte) Handler {
	return Handler{
		Push: func(_ context.Context, req *pserverpb.PushGradientsRequest, _ *[]byte) (*pserverpb.PushGradientsResponse, error) {
			return &pserverpb.PushGradientsResponse{Accepted: true, Version: req.GetVersion() + 1}, nil
		},
		Pull: func(_ context.Context, _ *pserverpb.PullDenseParametersRequest, out *[]byte) (*pserverpb.PullDenseParametersResponse, error) {
			*out = append((*out)[:0], params...)
			return &pserverpb.PullDenseParametersResponse{Initialized: true, DenseParameters: []*pserverpb.Tensor{{Name: "p", Content: *out}}}, nil
		},
	}
}

// BenchmarkTLS: a push of the given size then a pull of as much, over TCP
// and the local socket (with and without the shared region), with and
// without TLS, in one run; MB/s counts both directions.
func BenchmarkTLS(b *testing.B) {
	job := tlstest.NewJob(b, "job")
	for _, mib := range []int{4, 16} {
		for _, tr := range []string{"tcp", "local", "local-noshm"} {
			for _, secure := range []bool{false, true} {
				b.Run(fmt.Sprintf("%dMiB/%s/tls=%v", mib, tr, secure), func(b *testing.B) {
					var server, client *tlsid.Creds
					if secure {
						server, client = job.Creds(tlsid.PS, 0), job.Creds(tlsid.Worker, 0)
					}
					benchPushPull(b, mib<<20, tr, server, client)
				})
			}
		}
	}
}

func benchPushPull(b *testing.B, size int, tr string, server, client *tlsid.Creds) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	mux := NewMuxTLS(lis, benchPS(make([]byte, size)), nil, server)
	defer mux.Stop(0)
	addr := lis.Addr().String()
	c := NewClientTLS(addr, client)
	defer c.Close()
	if tr != "tcp" {
		name := fmt.Sprintf("elasticdl-direct-bench-%d-%d", os.Getpid(), time.Now().UnixNano())
		if err := mux.ServeLocal(name); err != nil {
			b.Fatal(err)
		}
		c.route.told(name)
		if tr == "local-noshm" {
			c.NoSharedMemory()
		}
	}
	ctx := context.Background()
	push := &pserverpb.PushGradientsRequest{WorkerId: 0, Gradients: []*pserverpb.Tensor{{Name: "g", Content: make([]byte, size)}}}
	step := func() {
		if _, release, err := c.Push(ctx, push); err != nil {
			b.Fatal(err)
		} else {
			release()
		}
		if _, release, err := c.Pull(ctx, &pserverpb.PullDenseParametersRequest{}); err != nil {
			b.Fatal(err)
		} else {
			release()
		}
	}
	step() // connect (and size the shared region) outside the timer
	b.ResetTimer()
	for range b.N {
		step()
	}
	b.StopTimer()
	b.ReportMetric(float64(2*size)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
}
