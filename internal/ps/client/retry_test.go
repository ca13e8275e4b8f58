package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
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
