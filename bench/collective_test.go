//go:build unix

package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/collective"
)

// TestCollectiveMember is not a test on its own: bench/collective_vs_gloo.sh
// runs the test binary once per member (EDL_COLL_RANK 0..EDL_COLL_WORLD-1)
// to time internal/collective's ring allreduce across processes the way
// bench/gloo_allreduce.py times torch.distributed's gloo: member r listens
// on 127.0.0.1:EDL_COLL_PORT+r, the ring forms, EDL_COLL_WARMUP allreduces
// of EDL_COLL_MIB MiB of float32 run untimed, a barrier (a one-element
// allreduce), then EDL_COLL_ITERS allreduces each timed on its own; rank 0
// prints one RESULT line (median, best and mean seconds per op; alg MB/s =
// buffer bytes / median; and rank 0's user and system CPU seconds per op,
// all threads). EDL_COLL_SEGMENT_KIB, if set, is the segment
// size. Without EDL_COLL_WORLD it is skipped.
func TestCollectiveMember(t *testing.T) {
	if os.Getenv("EDL_COLL_WORLD") == "" {
		t.Skip("run by bench/collective_vs_gloo.sh (EDL_COLL_WORLD unset)")
	}
	env := func(name string) int {
		v, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	rank, world, port := env("EDL_COLL_RANK"), env("EDL_COLL_WORLD"), env("EDL_COLL_PORT")
	mib, warmup, iters := env("EDL_COLL_MIB"), env("EDL_COLL_WARMUP"), env("EDL_COLL_ITERS")
	segment := 0 // the package's default
	if os.Getenv("EDL_COLL_SEGMENT_KIB") != "" {
		segment = env("EDL_COLL_SEGMENT_KIB") << 10
	}
	peers := make([]string, world)
	for r := range peers {
		peers[r] = fmt.Sprintf("127.0.0.1:%d", port+r)
	}
	logger := slog.New(slog.DiscardHandler)
	l, err := collective.Listen(peers[rank], logger)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	ring, err := l.Form(ctx, collective.Config{Rank: rank, Peers: peers, Version: 1, Timeout: time.Minute, SegmentBytes: segment, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()

	// 1/world everywhere: the sums stay near 1 however many ops run.
	data := make([]float32, mib<<20/4)
	for i := range data {
		data[i] = 1 / float32(world)
	}
	allReduce := func(x []float32) {
		if err := ring.AllReduce(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	for range warmup {
		allReduce(data)
	}
	allReduce(make([]float32, 1)) // barrier
	times := make([]float64, iters)
	var total time.Duration
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for i := range times {
		start := time.Now()
		allReduce(data)
		d := time.Since(start)
		total += d
		times[i] = d.Seconds()
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	if rank != 0 {
		return
	}
	slices.Sort(times)
	median := times[len(times)/2]
	if len(times)%2 == 0 {
		median = (times[len(times)/2-1] + times[len(times)/2]) / 2
	}
	bytes := float64(mib << 20)
	perOp := func(a, b syscall.Timeval) float64 {
		return time.Duration(b.Nano()-a.Nano()).Seconds() / float64(iters)
	}
	fmt.Printf("RESULT impl=ours members=%d mib=%d iters=%d median_s=%.6f best_s=%.6f mean_s=%.6f alg_MBps=%.1f bus_MBps=%.1f user_s_op=%.6f sys_s_op=%.6f\n",
		world, mib, iters, median, times[0], total.Seconds()/float64(iters),
		bytes/median/1e6, bytes/median/1e6*2*float64(world-1)/float64(world),
		perOp(before.Utime, after.Utime), perOp(before.Stime, after.Stime))
}
