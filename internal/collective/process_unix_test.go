//go:build unix

package collective

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// A ring of three processes (this one and two helpers) runs allreduces in a
// loop; one helper is SIGKILLed or SIGSTOPped mid-loop. Both survivors must
// fail within a bound, then form a two-member ring with a new version and
// reduce correctly on it.
func TestProcessFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, c := range []struct {
		name   string
		signal os.Signal
	}{
		{"SIGKILL", syscall.SIGKILL},
		{"SIGSTOP", syscall.SIGSTOP},
	} {
		t.Run(c.name, func(t *testing.T) {
			const timeout = time.Second
			const count = 1 << 18 // 1 MiB
			hs := startHelpers(t, 2)
			l := newListeners(t, 1)[0]
			ring := formWithHelpers(t, l, hs, 1, timeout)

			hs[0].send(t, "allreduce %d 0 1", count)
			hs[1].send(t, "allreduce %d 0 1", count)
			progress := make(chan int, 1)
			loopErr := make(chan error, 1)
			go func() {
				_, err := runAllReduces(context.Background(), ring, count, 0, true, func(n int) {
					select {
					case progress <- n:
					default:
					}
				})
				loopErr <- err
			}()
			for n := 0; n < 3; {
				select {
				case n = <-progress:
				case err := <-loopErr:
					t.Fatalf("allreduce loop failed before the fault: %v", err)
				case <-time.After(30 * time.Second):
					t.Fatal("no progress in 30s before the fault")
				}
			}

			faultAt := time.Now()
			if err := hs[1].cmd.Process.Signal(c.signal); err != nil {
				t.Fatal(err)
			}
			bound := 5 * timeout
			select {
			case err := <-loopErr:
				if err == nil {
					t.Fatal("this process's allreduce loop ended without an error")
				}
				t.Logf("this process failed %v after %s: %v", time.Since(faultAt), c.name, err)
			case <-time.After(bound):
				t.Fatalf("this process still reducing %v after %s", bound, c.name)
			}
			line := hs[0].expect(t, "error", bound-time.Since(faultAt)+100*time.Millisecond)
			t.Logf("the other survivor failed %v after %s: %s", time.Since(faultAt), c.name, line)

			// The survivors form version 2 without the lost member.
			_ = ring.Close()
			hs[0].send(t, "close")
			hs[0].expect(t, "closed", timeout)
			ring2 := formWithHelpers(t, l, hs[:1], 2, timeout)
			hs[0].send(t, "allreduce 100003 3 1")
			if _, err := runAllReduces(context.Background(), ring2, 100003, 3, true, nil); err != nil {
				t.Fatal(err)
			}
			hs[0].expect(t, "done 3", 10*timeout)
		})
	}
}
