package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPSStartsLate(t *testing.T) {
	// Reserve a port, free it, and start the PS there only later.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c := dial(t, []string{addr})
	go func() {
		time.Sleep(300 * time.Millisecond)
		startPS(t, 0, 1, addr, 0.1)
	}()
	if err := c.PushModel(ctxT(t, 10*time.Second), testModel()); err != nil {
		t.Fatalf("push model to a late PS: %v", err)
	}
}

func TestUnavailableUntilDeadline(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c := dial(t, []string{addr})
	start := time.Now()
	_, err = c.Pull(ctxT(t, 400*time.Millisecond), testModel())
	if err == nil {
		t.Fatal("pull from a dead PS succeeded")
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Errorf("gave up after %v, before the deadline", time.Since(start))
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "shard 0 ("+addr+")") {
		t.Errorf("error %q: want deadline exceeded naming shard 0 and %s", err, addr)
	}
}

// earlyDeadline is a context whose deadline has passed but whose timer has
// not fired yet (Err is still nil): the window a socket's deadline can
// strike in.
type earlyDeadline struct {
	context.Context
	dl time.Time
}

func (c earlyDeadline) Deadline() (time.Time, bool) { return c.dl, true }

// TestCallerEnded: a call ended by the caller's deadline says so for
// errors.Is, even when the connection's deadline struck before the
// context's timer (TestFreshWorkerDoesNotReinitialize failed on it in CI).
func TestCallerEnded(t *testing.T) {
	now := time.Now()
	exceeded := status.Error(codes.DeadlineExceeded, "deadline exceeded")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"canceled", canceled, status.Error(codes.Canceled, "x"), context.Canceled},
		{"the socket's deadline before the timer", earlyDeadline{context.Background(), now.Add(-time.Millisecond)}, exceeded, context.DeadlineExceeded},
		{"deadline exceeded, the caller's still ahead", earlyDeadline{context.Background(), now.Add(time.Minute)}, exceeded, nil},
		{"another error at the deadline", earlyDeadline{context.Background(), now.Add(-time.Millisecond)}, status.Error(codes.Unavailable, "x"), nil},
		{"no deadline", context.Background(), exceeded, nil},
	} {
		if got := callerEnded(c.ctx, c.err, now); !errors.Is(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
