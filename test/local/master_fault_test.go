package local

import (
	"syscall"
	"testing"
	"time"
)

// TestSilentWorkerIsReplaced freezes a worker (SIGSTOP): it stays alive to
// the OS but stops heartbeating. The master must stop it, requeue its
// tasks, launch a replacement and finish with every record trained once.
func TestSilentWorkerIsReplaced(t *testing.T) {
	needData(t)
	j := startJob(t, append(mlpArgs("1"), "--worker_heartbeat_timeout=3s")...)
	var frozen int
	waitFor(t, 2*time.Minute, "training progress", func() bool {
		_, done := j.epochRecordsDone()
		w := j.children("worker")
		if done < 5000 || len(w) != 2 {
			return false
		}
		frozen = w[0]
		return true
	})
	if err := syscall.Kill(frozen, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if code := j.wait(3 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	s := j.summary()
	assertExactlyOnce(t, s, 1, 60000)
	if s.Workers.Lost != 1 || s.Workers.Relaunched != 1 {
		t.Errorf("workers %+v, want 1 lost and 1 relaunched", s.Workers)
	}
	noOrphans(t, []int{frozen})
}

// TestMasterKilledLeavesNoOrphans kills -9 the master (the `elasticdl
// train` process): there is no master failover yet, but its workers and
// PS must not outlive it.
func TestMasterKilledLeavesNoOrphans(t *testing.T) {
	needData(t)
	j := startJob(t, mlpArgs("3")...)
	var pids []int
	waitFor(t, time.Minute, "workers and PS running", func() bool {
		_, done := j.epochRecordsDone()
		pids = append(j.children("worker"), j.children("ps")...)
		return done > 0 && len(pids) == 3
	})
	if err := j.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	j.wait(10 * time.Second)
	noOrphans(t, pids)
}
