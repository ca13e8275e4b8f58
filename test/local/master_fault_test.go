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

// TestSupervisorKilledLeavesNoOrphans kills -9 the `elasticdl train`
// process, which owns the job's processes (the master is its child, and
// survives only its own death): the master, workers and PS must not
// outlive it.
func TestSupervisorKilledLeavesNoOrphans(t *testing.T) {
	needData(t)
	j := startJob(t, mlpArgs("3")...)
	var pids []int
	waitFor(t, time.Minute, "master, workers and PS running", func() bool {
		_, done := j.epochRecordsDone()
		pids = append(append(j.children("worker"), j.children("ps")...), j.children("master")...)
		return done > 0 && len(pids) == 4
	})
	if err := j.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	j.wait(10 * time.Second)
	noOrphans(t, pids)
}

// TestMasterKilledTwice is master failover on the local backend: the
// master process is killed -9 twice while a 3-epoch job trains (and a
// worker once, in between). A new master resumes each time from the state
// the dead one persisted, adopts the workers and PS — the same processes,
// which never restart — and the job finishes with every record trained
// exactly once per epoch and the accuracy of an undisturbed run.
func TestMasterKilledTwice(t *testing.T) {
	needData(t)
	args := append(mlpArgs("3"), "--num_workers=3", "--num_ps_pods=2")
	base := startJob(t, args...).succeeded(5 * time.Minute)
	j := startJob(t, args...)
	var masters, killed []int
	killMaster := func(afterRecords int64) {
		t.Helper()
		var m int
		var before []int
		waitFor(t, 2*time.Minute, "training progress and a master", func() bool {
			_, done := j.epochRecordsDone()
			ms := j.children("master")
			before = append(j.children("worker"), j.children("ps")...)
			if done < afterRecords || len(ms) != 1 || len(before) != 5 || contains(masters, ms[0]) {
				return false
			}
			for _, pid := range killed {
				if contains(before, pid) {
					return false // not reaped yet
				}
			}
			m = ms[0]
			return true
		})
		if err := syscall.Kill(m, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		masters = append(masters, m)
		t.Logf("killed master pid %d", m)
		// A new master takes over; the instances are the same processes.
		waitFor(t, time.Minute, "a new master", func() bool {
			ms := j.children("master")
			return len(ms) == 1 && !contains(masters, ms[0])
		})
		after := append(j.children("worker"), j.children("ps")...)
		for _, pid := range before {
			if !contains(after, pid) {
				t.Errorf("instance pid %d did not survive the master's death (before %v, after %v)", pid, before, after)
			}
		}
	}
	killMaster(10000)
	var victim int
	waitFor(t, time.Minute, "progress under the second master", func() bool {
		_, done := j.epochRecordsDone()
		w := j.children("worker")
		if done < 30000 || len(w) != 3 {
			return false
		}
		victim = w[0]
		return true
	})
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = append(killed, victim)
	killMaster(40000)
	s := j.succeeded(5 * time.Minute)
	assertExactlyOnce(t, s, 3, 60000)
	if s.MasterRestarts != 2 {
		t.Errorf("master_restarts %d, want 2", s.MasterRestarts)
	}
	if s.Workers.Lost != 1 || s.Workers.Relaunched != 1 || s.PS.Lost != 0 {
		t.Errorf("workers %+v, ps %+v: want only the killed worker lost and relaunched", s.Workers, s.PS)
	}
	t.Logf("accuracy: undisturbed %.4f, master killed twice %.4f", base.Eval.Accuracy, s.Eval.Accuracy)
	if s.Eval.Accuracy < base.Eval.Accuracy-0.01 {
		t.Errorf("accuracy %.4f, more than a point under the undisturbed %.4f", s.Eval.Accuracy, base.Eval.Accuracy)
	}
	noOrphans(t, masters)
}
