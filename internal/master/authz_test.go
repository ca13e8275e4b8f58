package master

import (
	"context"
	"net"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
	"elasticdl/internal/rpc"
	"elasticdl/internal/tlsid"
	"elasticdl/internal/tlsid/tlstest"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/proto/masterpb"
)

// newTLSMaster is newTestMaster with the job's CA, serving gRPC on
// loopback; it returns the address.
func newTLSMaster(t *testing.T, j *tlstest.Job) (*Master, *fakeBackend, string) {
	t.Helper()
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.JobName = j.CA.Job
	cfg.ModelDef = "fashion_mnist.mlp"
	cfg.TrainingData = writeIDX(t, 1000)
	cfg.Output = t.TempDir()
	cfg.NumWorkers = 2
	fb := newFakeBackend()
	m, err := New(cfg, Deps{Backend: fb, Registry: reg, CA: j.CA})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := m.serve(lis)
	t.Cleanup(gs.Stop)
	m.routes.master = lis.Addr().String()
	m.routes.ps = psRoutes{dial: []string{"127.0.0.1:1"}, listen: []string{"127.0.0.1:1"}, n: 1}
	m.step(context.Background(), job.Start{})
	return m, fb, lis.Addr().String()
}

func dialMaster(t *testing.T, addr string, opt grpc.DialOption) masterpb.MasterClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(rpc.DialOptions(nil), opt)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return masterpb.NewMasterClient(conn)
}

// Every instance the master launches gets a certificate for its own
// role and ID, and nothing else.
func TestLaunchesCarryTheirOwnCertificates(t *testing.T) {
	j := tlstest.NewJob(t, "authz")
	_, fb, _ := newTLSMaster(t, j)
	specs := fb.launches()
	if len(specs) != 3 {
		t.Fatalf("launched %d instances, want 1 PS and 2 workers", len(specs))
	}
	for _, s := range specs {
		if s.TLS == nil {
			t.Fatalf("%s launched without credentials", s.Name())
		}
		c, err := tlsid.New(*s.TLS)
		if err != nil {
			t.Fatal(err)
		}
		want := tlsid.Identity{Job: "authz", Role: tlsid.Worker, ID: s.ID}
		if s.Role == cluster.PS {
			want.Role = tlsid.PS
		}
		if c.Self() != want {
			t.Errorf("%s holds %v, want %v", s.Name(), c.Self(), want)
		}
	}
}

// Calls from anyone but the job's workers, or from a worker naming
// another, are refused and change nothing; the worker itself is served.
func TestMasterRefusesWhoIsNotTheWorker(t *testing.T) {
	j := tlstest.NewJob(t, "authz")
	m, _, addr := newTLSMaster(t, j)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w0 := dialMaster(t, addr, tlsid.DialOption(j.Creds(tlsid.Worker, 0), tlsid.Master))
	if _, err := w0.Heartbeat(ctx, &masterpb.HeartbeatRequest{WorkerId: 0}); err != nil {
		t.Fatalf("worker 0's heartbeat: %v", err)
	}
	before := snap(m)
	type refusal struct {
		name string
		opt  grpc.DialOption
		code codes.Code
	}
	var cases []refusal
	for _, imp := range j.Impostors(tlsid.Master) {
		cases = append(cases, refusal{imp.Name, imp.Opt, codes.Unavailable})
	}
	cases = append(cases, []refusal{
		{"worker 1 as worker 0", tlsid.DialOption(j.Creds(tlsid.Worker, 1), tlsid.Master), codes.PermissionDenied},
		{"a PS", tlsid.DialOption(j.Creds(tlsid.PS, 0), tlsid.Master), codes.PermissionDenied},
		{"the submitting client", tlsid.DialOption(j.Creds(tlsid.Client, 0), tlsid.Master), codes.PermissionDenied},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := dialMaster(t, addr, c.opt)
			_, err := cl.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: 0})
			if status.Code(err) != c.code {
				t.Fatalf("GetTask: %v, want code %v", err, c.code)
			}
			_, err = cl.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 0, TaskId: 1, Records: 512})
			if status.Code(err) != c.code {
				t.Fatalf("ReportTaskResult: %v, want code %v", err, c.code)
			}
			if after := snap(m); !reflect.DeepEqual(before, after) {
				t.Fatalf("state changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
	// The worker itself still gets its answer.
	if _, err := w0.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: 0}); err != nil {
		t.Fatalf("worker 0 after the refusals: %v", err)
	}
}
