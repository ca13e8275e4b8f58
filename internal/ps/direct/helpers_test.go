package direct

import (
	"bytes"
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/proto/pserverpb"
)

// echoPS answers a push with its gradients doubled as parameters (when
// asked), and a pull with one tensor of the asked version's bytes; a push
// from worker 13 fails as an uninitialized shard does. It counts releases.
type echoPS struct {
	pserverpb.UnimplementedPserverServer
	// block, when not nil, holds every push until it is closed.
	block chan struct{}
	// layout is how answers are put in the buffer the Mux lends: "" back
	// to back, "reversed" in reverse order (the Mux must not copy them
	// over each other), "own" in buffers of the handler's own.
	layout string
	// lent counts the answers built in the lent buffer.
	lent atomic.Int64
}

// push answers each gradient doubled, as the parameters when asked for.
func (e *echoPS) push(ctx context.Context, req *pserverpb.PushGradientsRequest, out *[]byte) (*pserverpb.PushGradientsResponse, error) {
	if e.block != nil {
		<-e.block
	}
	if req.GetWorkerId() == 13 {
		return nil, status.Errorf(codes.FailedPrecondition, "shard not initialized")
	}
	resp := &pserverpb.PushGradientsResponse{Accepted: true, Version: req.GetVersion() + 1}
	if req.GetReturnParameters() {
		// *out may be where the request's contents are: read them all first.
		var answers [][]byte
		for _, g := range req.GetGradients() {
			answers = append(answers, append(bytes.Clone(g.GetContent()), g.GetContent()...))
		}
		for i, c := range e.place(answers, out) {
			g := req.Gradients[i]
			resp.DenseParameters = append(resp.DenseParameters, &pserverpb.Tensor{Name: g.GetName(), Dims: []int64{int64(len(c))}, Content: c})
		}
	}
	return resp, nil
}

func (e *echoPS) pull(ctx context.Context, req *pserverpb.PullDenseParametersRequest, out *[]byte) (*pserverpb.PullDenseParametersResponse, error) {
	c := e.place([][]byte{bytes.Repeat([]byte{byte(req.GetVersion())}, int(req.GetVersion())), nil}, out)
	return &pserverpb.PullDenseParametersResponse{Initialized: true, Version: req.GetVersion(),
		DenseParameters: []*pserverpb.Tensor{{Name: "p", Content: c[0]}, {Name: "empty", Content: c[1]}}}, nil
}

// place lays contents out in *out as e.layout says (out is nil on gRPC).
func (e *echoPS) place(contents [][]byte, out *[]byte) [][]byte {
	if e.layout == "own" || out == nil {
		return contents
	}
	order := make([]int, len(contents))
	total := 0
	for i, c := range contents {
		order[i] = i
		total += len(c)
	}
	if e.layout == "reversed" {
		slices.Reverse(order)
	}
	if cap(*out) < total {
		*out = make([]byte, 0, total)
	}
	buf := (*out)[:0]
	placed := make([][]byte, len(contents))
	for _, i := range order {
		start := len(buf)
		buf = append(buf, contents[i]...)
		placed[i] = buf[start:len(buf):len(buf)]
	}
	e.lent.Add(1)
	return placed
}

func (e *echoPS) PushGradients(ctx context.Context, req *pserverpb.PushGradientsRequest) (*pserverpb.PushGradientsResponse, error) {
	return e.push(ctx, req, nil)
}

func (e *echoPS) handler() Handler { return Handler{Push: e.push, Pull: e.pull} }

// serveBoth serves e on a free port: direct connections and gRPC.
func serveBoth(t *testing.T, e *echoPS) (addr string, mux *Mux, g *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g = grpc.NewServer()
	pserverpb.RegisterPserverServer(g, e)
	mux = NewMux(lis, e.handler(), nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(mux) }()
	t.Cleanup(func() { g.Stop(); mux.Stop(0); <-done })
	return lis.Addr().String(), mux, g
}

func newClient(t *testing.T, addr string) *Client {
	c := NewClient(addr)
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
