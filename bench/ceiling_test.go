package bench

import (
	"fmt"
	"io"
	"net"
	"os"
	"testing"
)

// The machine's own ceilings, measured beside the PS benchmarks so their
// figures can be read as a fraction of what the hardware and kernel allow:
//
//	go test ./bench -run '^$' -bench Ceiling -benchtime 2s

// BenchmarkCeilingMemcpy copies a 4 MiB buffer: the memory-bandwidth
// ceiling of any code that touches a model once.
func BenchmarkCeilingMemcpy(b *testing.B) {
	src := make([]byte, 4<<20)
	dst := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	for i := 0; i < b.N; i++ {
		copy(dst, src)
	}
}

// BenchmarkCeilingLoopbackTCP streams 4 MiB messages over one loopback TCP
// connection with plain net.Conn writes and reads: the transport ceiling
// for a push or pull between hosts (issue 13's yardstick).
func BenchmarkCeilingLoopbackTCP(b *testing.B) { streamCeiling(b, "tcp", "127.0.0.1:0") }

// BenchmarkCeilingUnixSocket is the same over a Unix socket: the ceiling
// for a worker and a PS on one host, which use the PS's local socket.
func BenchmarkCeilingUnixSocket(b *testing.B) {
	streamCeiling(b, "unix", fmt.Sprintf("@elasticdl-bench-ceiling-%d", os.Getpid()))
}

func streamCeiling(b *testing.B, network, addr string) {
	lis, err := net.Listen(network, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(io.Discard, c)
		done <- err
	}()
	c, err := net.Dial(network, lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, 4<<20)
	b.SetBytes(int64(len(msg)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
