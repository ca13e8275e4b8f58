package proctest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Throttle holds process pid (and the children it starts after) to
// fraction of one CPU for the rest of the test: a CFS quota in a cgroup
// of its own where the machine lets us make one (cgroup v2's cpu.max, or
// v1's cpu controller), else a SIGSTOP/SIGCONT duty cycle from the test.
// It returns how.
func Throttle(t testing.TB, pid int, fraction float64) string {
	t.Helper()
	const period = 100_000 // µs: CFS's default period
	quota := int(fraction * period)
	name := fmt.Sprintf("elasticdl-test-%d-%d", os.Getpid(), pid)
	if how, err := cgroupQuota(t, pid, name, quota, period); err == nil {
		return how
	} else {
		t.Logf("no cgroup for the throttle (%v): a SIGSTOP/SIGCONT duty cycle instead", err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		on := time.Duration(fraction * float64(period) * float64(time.Microsecond))
		tick := time.NewTicker(period * time.Microsecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				syscall.Kill(pid, syscall.SIGCONT)
				return
			case <-tick.C:
			}
			if syscall.Kill(pid, syscall.SIGCONT) != nil {
				return // gone
			}
			time.Sleep(on)
			if syscall.Kill(pid, syscall.SIGSTOP) != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return fmt.Sprintf("SIGSTOP/SIGCONT, %.0f%% on", 100*fraction)
}

// cgroupQuota makes cgroup name with quota µs of CPU per period and moves
// pid into it; the cgroup is removed at the test's end.
func cgroupQuota(t testing.TB, pid int, name string, quota, period int) (string, error) {
	v2 := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(v2, "cgroup.controllers")); err == nil {
		dir := filepath.Join(v2, name)
		return "cgroup v2 cpu.max", makeCgroup(t, dir, pid, map[string]string{"cpu.max": fmt.Sprintf("%d %d", quota, period)})
	}
	dir := filepath.Join("/sys/fs/cgroup/cpu", name)
	return "cgroup v1 cpu.cfs_quota_us", makeCgroup(t, dir, pid, map[string]string{
		"cpu.cfs_period_us": strconv.Itoa(period), "cpu.cfs_quota_us": strconv.Itoa(quota)})
}

func makeCgroup(t testing.TB, dir string, pid int, settings map[string]string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	t.Cleanup(func() {
		// Whatever still runs in it goes back to the parent first.
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, p := range strings.Fields(string(b)) {
			os.WriteFile(filepath.Join(filepath.Dir(dir), "cgroup.procs"), []byte(p), 0)
		}
		if err := os.Remove(dir); err != nil {
			t.Logf("removing the throttle's cgroup: %v", err)
		}
	})
	for k, v := range settings {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("moving %d into %s: %w", pid, dir, err)
	}
	return err
}
