package worker

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"elasticdl/data"
	"elasticdl/internal/rpc"
	"elasticdl/proto/masterpb"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestShuffleKeepsRecordsTogether(t *testing.T) {
	const n, per = 50, 3
	b := &data.Batch{N: n, Features: make([]float32, n*per), Labels: make([]int32, n), Index: make([]int64, n)}
	for i := 0; i < n; i++ {
		for k := 0; k < per; k++ {
			b.Features[i*per+k] = float32(i*10 + k)
		}
		b.Labels[i], b.Index[i] = int32(i), int64(i)
	}
	shuffle(b, 7, 1, nil)
	moved := 0
	seen := map[int32]bool{}
	for i := 0; i < n; i++ {
		l := b.Labels[i]
		if seen[l] {
			t.Fatalf("record %d appears twice", l)
		}
		seen[l] = true
		if l != int32(i) {
			moved++
		}
		if b.Index[i] != int64(l) {
			t.Fatalf("position %d: index %d does not follow label %d", i, b.Index[i], l)
		}
		for k := 0; k < per; k++ {
			if b.Features[i*per+k] != float32(int(l)*10+k) {
				t.Fatalf("position %d: features %v do not belong to record %d", i, b.Features[i*per:(i+1)*per], l)
			}
		}
	}
	if moved < n/2 {
		t.Fatalf("only %d of %d records moved", moved, n)
	}
	// Same task and epoch, same order: a retried task trains identically.
	c := &data.Batch{N: n, Features: make([]float32, n*per), Labels: make([]int32, n)}
	for i := range c.Labels {
		c.Labels[i] = int32(i)
	}
	shuffle(c, 7, 1, make([]float32, 5))
	for i := range c.Labels {
		if c.Labels[i] != b.Labels[i] {
			t.Fatal("shuffle is not reproducible for the same task and epoch")
		}
	}
}

// TestRetryUnavailable: a call the master cannot take (it is down, or a
// new master is taking over) is retried until the limit, then fails with
// a clear error that keeps the Unavailable status; a refusal is not
// retried. A worker that never reached the master says so, and why.
func TestRetryUnavailable(t *testing.T) {
	link := &masterLink{addr: "127.0.0.1:1", timeout: 300 * time.Millisecond, log: slog.New(slog.DiscardHandler)}
	unavailable := status.Error(codes.Unavailable, "connection refused")
	down := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return unavailable
	}
	err := link.retryUnavailable(context.Background(), "/m/GetTask", nil, nil, nil, down)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "cannot reach the master at 127.0.0.1:1: no answer in 300ms since the worker started: connection refused") {
		t.Errorf("a master never reached: %v, want the cause and the Unavailable status", err)
	}
	calls := 0
	flaky := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		if calls < 3 {
			return unavailable
		}
		return nil
	}
	if err := link.retryUnavailable(context.Background(), "/m/GetTask", nil, nil, nil, flaky); err != nil || calls != 3 || !link.reached.Load() {
		t.Errorf("a master back after two refusals: %v after %d calls (reached %v), want success after 3", err, calls, link.reached.Load())
	}
	err = link.retryUnavailable(context.Background(), "/m/GetTask", nil, nil, nil, down)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "master unavailable for 300ms") {
		t.Errorf("a master that stays down: %v, want a clear Unavailable error", err)
	}
	calls = 0
	refused := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		return status.Error(codes.NotFound, "unknown worker")
	}
	if err := link.retryUnavailable(context.Background(), "/m/GetTask", nil, nil, nil, refused); status.Code(err) != codes.NotFound || calls != 1 {
		t.Errorf("a refusal: %v after %d calls, want it at once", err, calls)
	}
}

// TestMasterNameThatDoesNotResolve: gRPC reports a failed lookup as
// "produced zero addresses"; the worker names the host and the lookup's
// own error instead, against a real gRPC client.
func TestMasterNameThatDoesNotResolve(t *testing.T) {
	const addr = "elasticdl-test-master.invalid:50001" // .invalid never resolves (RFC 2606)
	link := &masterLink{addr: addr, timeout: 200 * time.Millisecond, log: slog.New(slog.DiscardHandler)}
	conn, err := grpc.NewClient(addr, append(rpc.DialOptions(nil), grpc.WithChainUnaryInterceptor(link.retryUnavailable))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = masterpb.NewMasterClient(conn).GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: 0})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "cannot reach the master at "+addr) ||
		!strings.Contains(err.Error(), "lookup elasticdl-test-master.invalid") {
		t.Errorf("got %v, want the worker's cause: the lookup of the master's name", err)
	}
	if link.reached.Load() {
		t.Errorf("reached after no answer")
	}
	t.Logf("the worker's error: %v", err)
}
