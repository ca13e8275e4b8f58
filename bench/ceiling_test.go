package bench

import (
	"io"
	"net"
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
// for a gRPC push or pull on this machine.
func BenchmarkCeilingLoopbackTCP(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
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
	c, err := net.Dial("tcp", lis.Addr().String())
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
