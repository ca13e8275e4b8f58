package direct

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/tlsid"
	"elasticdl/internal/tlsid/tlstest"
	"elasticdl/proto/pserverpb"
)

// countingPS is echoPS counting the calls its handlers got.
type countingPS struct {
	echoPS
	pushes, pulls atomic.Int64
}

func (p *countingPS) handler() Handler {
	return Handler{
		Push: func(ctx context.Context, req *pserverpb.PushGradientsRequest, out *[]byte) (*pserverpb.PushGradientsResponse, error) {
			p.pushes.Add(1)
			return p.push(ctx, req, out)
		},
		Pull: func(ctx context.Context, req *pserverpb.PullDenseParametersRequest, out *[]byte) (*pserverpb.PullDenseParametersResponse, error) {
			p.pulls.Add(1)
			return p.pull(ctx, req, out)
		},
	}
}

// serveTLS serves p with creds on a free port and a local socket: direct
// connections and gRPC, whose calls record the identity they see.
func serveTLS(t *testing.T, p *countingPS, creds *tlsid.Creds, seen chan<- tlsid.Identity) (addr, local string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		id, err := tlsid.FromContext(ctx)
		if err != nil {
			return nil, status.Error(codes.Unauthenticated, err.Error())
		}
		seen <- id
		return h(ctx, req)
	}
	g := grpc.NewServer(grpc.Creds(tlsid.Handshaken()), grpc.UnaryInterceptor(record))
	pserverpb.RegisterPserverServer(g, &p.echoPS)
	mux := NewMuxTLS(lis, p.handler(), nil, creds)
	local = fmt.Sprintf("elasticdl-direct-tls-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	if err := mux.ServeLocal(local); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(mux) }()
	t.Cleanup(func() { g.Stop(); mux.Stop(0); <-done })
	return lis.Addr().String(), local
}

// tlsClient is a client with creds (nil: plaintext) that dials the local
// socket first when local is set (and TCP only at a dead address then).
func tlsClient(t *testing.T, addr, local string, creds *tlsid.Creds) *Client {
	if local != "" {
		addr = "127.0.0.1:1"
	}
	c := NewClientTLS(addr, creds)
	c.route.told(local)
	t.Cleanup(func() { c.Close() })
	return c
}

// A gRPC client over TLS reaches the gRPC server behind a TLS Mux, whose
// handlers see the client's identity.
func TestTLSGRPCThroughMux(t *testing.T) {
	job := tlstest.NewJob(t, "job")
	seen := make(chan tlsid.Identity, 1)
	p := &countingPS{}
	addr, _ := serveTLS(t, p, job.Creds(tlsid.PS, 0), seen)
	conn, err := grpc.NewClient(addr, tlsid.DialOption(job.Creds(tlsid.Worker, 3), tlsid.PS))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pserverpb.NewPserverClient(conn).PushGradients(ctxT(t, 10*time.Second), &pserverpb.PushGradientsRequest{WorkerId: 3, Version: 7})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVersion() != 8 {
		t.Errorf("answer %v", resp)
	}
	if id := <-seen; id != (tlsid.Identity{Job: "job", Role: tlsid.Worker, ID: 3}) {
		t.Errorf("the handler saw %v", id)
	}
	// A gRPC client without TLS gets nowhere.
	plain, err := grpc.NewClient(addr, tlsid.DialOption(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := pserverpb.NewPserverClient(plain).PushGradients(ctxT(t, 2*time.Second), &pserverpb.PushGradientsRequest{}); err == nil {
		t.Error("a plaintext gRPC client was served")
	}
}

// Only the job's workers push, and its workers and master pull; every
// other peer is refused, at the handshake or the call, on TCP and on the
// local socket, and no handler runs for it.
func TestTLSRefusals(t *testing.T) {
	job := tlstest.NewJob(t, "job")
	other := tlstest.NewJob(t, "other")
	type call struct {
		name  string
		creds *tlsid.Creds
		push  bool
		want  codes.Code // codes.OK: served
	}
	calls := []call{
		{"worker push", job.Creds(tlsid.Worker, 1), true, codes.OK},
		{"worker pull", job.Creds(tlsid.Worker, 1), false, codes.OK},
		{"master pull", job.Creds(tlsid.Master, 0), false, codes.OK},
		{"no certificate push", nil, true, codes.Unknown},
		{"no certificate pull", nil, false, codes.Unknown},
		{"another job's worker push", other.Creds(tlsid.Worker, 1), true, codes.Unauthenticated},
		{"expired worker push", job.Expired(tlsid.Worker, 1), true, codes.Unauthenticated},
		{"expired worker pull", job.Expired(tlsid.Worker, 1), false, codes.Unauthenticated},
		{"ps push", job.Creds(tlsid.PS, 1), true, codes.PermissionDenied},
		{"client push", job.Creds(tlsid.Client, 0), true, codes.PermissionDenied},
		{"client pull", job.Creds(tlsid.Client, 0), false, codes.PermissionDenied},
		{"master push", job.Creds(tlsid.Master, 0), true, codes.PermissionDenied},
		{"worker pushing as another", job.Creds(tlsid.Worker, 2), true, codes.PermissionDenied},
	}
	for _, transport := range []string{"tcp", "local"} {
		p := &countingPS{}
		addr, local := serveTLS(t, p, job.Creds(tlsid.PS, 0), make(chan tlsid.Identity, 1))
		if transport == "tcp" {
			local = ""
		}
		for _, cl := range calls {
			t.Run(transport+"/"+cl.name, func(t *testing.T) {
				pushes, pulls := p.pushes.Load(), p.pulls.Load()
				c := tlsClient(t, addr, local, cl.creds)
				err := tlsCall(t, c, cl.push)
				gotPush, gotPull := p.pushes.Load()-pushes, p.pulls.Load()-pulls
				if cl.want == codes.OK {
					if err != nil || gotPush+gotPull != 1 {
						t.Fatalf("%v, %d pushes and %d pulls handled, want it served", err, gotPush, gotPull)
					}
					// Served with TCP at a dead address: on the local socket.
					if local != "" && cl.push && (len(c.idle) != 1 || c.idle[0].f.shared == nil) {
						t.Errorf("a push on the local socket without a shared region")
					}
					// Past the handshake the local socket carries plaintext;
					// TCP stays TLS.
					if len(c.idle) == 1 {
						_, plain := c.idle[0].conn.(*net.UnixConn)
						_, secure := c.idle[0].conn.(*tls.Conn)
						if local != "" && !plain || local == "" && !secure {
							t.Errorf("a %s connection carries frames on a %T", transport, c.idle[0].conn)
						}
					}
					return
				}
				if err == nil || gotPush+gotPull != 0 {
					t.Fatalf("%v, %d pushes and %d pulls handled, want it refused unhandled", err, gotPush, gotPull)
				}
				// A plaintext client cannot tell a refusal from a broken server.
				if cl.want != codes.Unknown && status.Code(err) != cl.want && local == "" {
					t.Errorf("refused with %v, want %v", err, cl.want)
				}
			})
		}
	}
}

// tlsCall pushes as worker 1 (asking for the parameters back) or pulls,
// and checks what a served call got.
func tlsCall(t *testing.T, c *Client, push bool) error {
	ctx := ctxT(t, 10*time.Second)
	if push {
		g := bytes.Repeat([]byte{3}, 1<<16)
		resp, release, err := c.Push(ctx, &pserverpb.PushGradientsRequest{WorkerId: 1, ReturnParameters: true,
			Gradients: []*pserverpb.Tensor{{Name: "g", Content: g}}})
		if err != nil {
			return err
		}
		defer release()
		if ps := resp.GetDenseParameters(); len(ps) != 1 || !bytes.Equal(ps[0].GetContent(), append(bytes.Clone(g), g...)) {
			t.Errorf("push answered %d parameters", len(ps))
		}
		return nil
	}
	resp, release, err := c.Pull(ctx, &pserverpb.PullDenseParametersRequest{Version: 300})
	if err != nil {
		return err
	}
	defer release()
	if ps := resp.GetDenseParameters(); len(ps) != 2 || len(ps[0].GetContent()) != 300 {
		t.Errorf("pull answered %v", resp)
	}
	return nil
}

// A handshake cut off (a PS restarting) is Unavailable, which callers
// retry, not a refusal.
func TestTLSCutHandshakeIsUnavailable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c := tlsClient(t, lis.Addr().String(), "", tlstest.NewJob(t, "job").Creds(tlsid.Worker, 1))
	if _, _, err := c.Pull(ctxT(t, 10*time.Second), &pserverpb.PullDenseParametersRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("%v, want Unavailable", err)
	}
}
