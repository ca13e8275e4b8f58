package collective

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// reportBandwidth reports algorithm bandwidth (buffer bytes per second of
// one collective) and, for an allreduce of n members, bus bandwidth (what
// each member actually sends: 2(n-1)/n of the buffer), both in MB/s.
func reportBandwidth(b *testing.B, bytes, n int) {
	alg := float64(bytes) * float64(b.N) / b.Elapsed().Seconds() / 1e6
	b.ReportMetric(alg, "alg-MB/s")
	if n > 1 {
		b.ReportMetric(alg*2*float64(n-1)/float64(n), "bus-MB/s")
	}
}

// BenchmarkAllReduce: n members in this process over loopback, each
// reducing a buffer of the given size; one op = one allreduce on all.
func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 3} {
		for _, mib := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("members=%d/%dMiB", n, mib), func(b *testing.B) {
				benchInProcess(b, n, mib<<20, 0)
			})
		}
	}
}

// BenchmarkSegmentSize: the pipelining grain against bandwidth, 16 MiB.
func BenchmarkSegmentSize(b *testing.B) {
	for _, n := range []int{2, 3} {
		for _, kib := range []int{64, 256, 1024, 4096} {
			b.Run(fmt.Sprintf("members=%d/segment=%dKiB", n, kib), func(b *testing.B) {
				benchInProcess(b, n, 16<<20, kib<<10)
			})
		}
	}
}

func benchInProcess(b *testing.B, n, bytes, segmentBytes int) {
	benchOver(b, newListeners(b, n), bytes, segmentBytes)
}

// BenchmarkTransport: the same-host Unix sockets against TCP, in one run.
func BenchmarkTransport(b *testing.B) {
	for _, n := range []int{2, 3} {
		for _, mib := range []int{16, 64} {
			for _, tr := range []string{"tcp", "unix"} {
				b.Run(fmt.Sprintf("members=%d/%dMiB/%s", n, mib, tr), func(b *testing.B) {
					benchOver(b, newListenersOver(b, n, tr == "unix"), mib<<20, 0)
				})
			}
		}
	}
}

func benchOver(b *testing.B, ls []*Listener, bytes, segmentBytes int) {
	n := len(ls)
	rings := formRings(b, ls, 1, time.Minute, func(c *Config) { c.SegmentBytes = segmentBytes })
	bufs := make([][]float32, n)
	for i := range bufs {
		bufs[i] = memberInput(i, 0, bytes/4)
	}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		for i, err := range onAll(n, func(i int) error { return rings[i].AllReduce(ctx, bufs[i]) }) {
			if err != nil {
				b.Fatalf("member %d: %v", i, err)
			}
		}
	}
	b.StopTimer()
	reportBandwidth(b, bytes, n)
}

// BenchmarkAllReduceProcesses: the same across processes: this process is
// rank 0, the others are helper processes (the test binary re-executed).
func BenchmarkAllReduceProcesses(b *testing.B) {
	for _, n := range []int{2, 3} {
		for _, mib := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("members=%d/%dMiB", n, mib), func(b *testing.B) {
				hs := startHelpers(b, n-1)
				l := newListeners(b, 1)[0]
				ring := formWithHelpers(b, l, hs, 1, time.Minute)
				count := mib << 20 / 4
				// One warm-up allreduce outside the timer, so that the helpers
				// have built their buffers before it starts.
				for _, h := range hs {
					h.send(b, "allreduce %d %d 0", count, b.N+1)
				}
				if _, err := runAllReduces(context.Background(), ring, count, 1, false, nil); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				if _, err := runAllReduces(context.Background(), ring, count, b.N, false, nil); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				for _, h := range hs {
					h.expect(b, "done", time.Minute)
				}
				reportBandwidth(b, mib<<20, n)
			})
		}
	}
}

// BenchmarkLoopback is the ceiling: raw TCP over loopback with 256 KiB
// writes, one stream, and two streams in opposite directions (what a ring of
// two runs).
func BenchmarkLoopback(b *testing.B) {
	for _, streams := range []int{1, 2} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			const total = 64 << 20
			pairs := make([][2]net.Conn, streams)
			for i := range pairs {
				w, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				r, err := ln.Accept()
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close()
				defer r.Close()
				if i%2 == 1 {
					w, r = r, w // the other direction
				}
				pairs[i] = [2]net.Conn{w, r}
			}
			buf := make([]byte, 256<<10)
			b.ResetTimer()
			for range b.N {
				var wg sync.WaitGroup
				for _, p := range pairs {
					wg.Go(func() {
						for sent := 0; sent < total; sent += len(buf) {
							if _, err := p[0].Write(buf); err != nil {
								b.Error(err)
								return
							}
						}
					})
					wg.Go(func() {
						in := make([]byte, len(buf))
						for got := 0; got < total; got += len(in) {
							if _, err := io.ReadFull(p[1], in); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
			b.StopTimer()
			b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s-per-stream")
		})
	}
}
