package worker

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"elasticdl/data"

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

func TestAppendSoftmax(t *testing.T) {
	got := appendSoftmax([]float32{9}, []float32{1000, 1000, 1000 - float32(math.Log(2))})
	want := []float32{9, 0.4, 0.4, 0.2}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5 {
			t.Fatalf("got %v, want %v (large logits must not overflow)", got, want)
		}
	}
}

// TestRetryUnavailable: a call the master cannot take (it is down, or a
// new master is taking over) is retried until it goes through, up to the
// worker's limit, then fails saying so; other errors are not retried.
func TestRetryUnavailable(t *testing.T) {
	retry := retryUnavailable(300*time.Millisecond, slog.New(slog.DiscardHandler))
	unavailable := status.Error(codes.Unavailable, "connection refused")
	calls := 0
	flaky := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		if calls < 3 {
			return unavailable
		}
		return nil
	}
	if err := retry(context.Background(), "/m/GetTask", nil, nil, nil, flaky); err != nil || calls != 3 {
		t.Errorf("a master back after two refusals: %v after %d calls, want success after 3", err, calls)
	}
	down := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return unavailable
	}
	err := retry(context.Background(), "/m/GetTask", nil, nil, nil, down)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "master unavailable for 300ms") {
		t.Errorf("a master that stays down: %v, want a clear Unavailable error", err)
	}
	calls = 0
	refused := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		return status.Error(codes.NotFound, "unknown worker")
	}
	if err := retry(context.Background(), "/m/GetTask", nil, nil, nil, refused); status.Code(err) != codes.NotFound || calls != 1 {
		t.Errorf("a refusal: %v after %d calls, want it at once", err, calls)
	}
}
