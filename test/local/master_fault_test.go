package local

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/master"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/storage"
	"elasticdl/internal/storage/storagetest"
)

// TestSilentWorkerIsReplaced freezes a worker (SIGSTOP): it stays alive to
// the OS but stops heartbeating. The master must stop it, requeue its
// tasks, launch a replacement and finish with every record trained once.
// No backup tasks: a copy of the frozen worker's task would let the other
// worker end the job before the silence is noticed (the mlp trains
// ~36,000 records/s on a quiet machine: CI failed so with 3 epochs).
func TestSilentWorkerIsReplaced(t *testing.T) {
	needData(t)
	j := startJob(t, append(mlpArgs("8"), "--worker_heartbeat_timeout=3s", "--backup_tasks=false", "--log_interval=1s")...)
	var frozen int
	// Freeze while 6 epochs or more are left, so the job cannot end before
	// the master notices the silence (progress is logged every second).
	waitFor(t, 2*time.Minute, "training progress", func() bool {
		done := j.recordsDone()
		w := j.children("worker")
		if done < 5000 || done > 120000 || len(w) != 2 {
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
	assertExactlyOnce(t, s, 8, 60000)
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

// TestCrashConsistency is the crash-consistency acceptance test: a
// 12-epoch mlp job (3 workers, 2 PS, checkpoints every 100 versions) has its
// master killed -9 twice, a worker three times and a PS once, in a random
// order at random moments (the seed is logged). The job finishes; each new
// master resumes from the state the dead one persisted and adopts the
// workers and PS — the same processes; every epoch's ledger, read from what
// the PS hold, is exact to the minibatch; the model holds each minibatch
// once; and the accuracy is within a point of an undisturbed run.
//
// Where an S3 server is named (storagetest.Available: CI runs this test
// in its object-storage phase), the checkpoints go to it, and evaluate
// and predict then read the model from there.
func TestCrashConsistency(t *testing.T) {
	needData(t)
	ckpt := t.TempDir()
	if storagetest.Available() {
		ckpt = storagetest.Location(t)
	}
	s := crashConsistency(t, ckpt)
	if storage.IsRemote(ckpt) {
		fromS3(t, ckpt, s)
	}
}

// crashConsistency runs TestCrashConsistency's job with its checkpoints
// in ckpt and returns its summary.
func crashConsistency(t *testing.T, ckpt string) master.Summary {
	// Epochs enough for the kills to land in training: a kill waits for
	// the processes the last one replaced (the 3 epochs this test had
	// took 5 s once pushes and pulls left gRPC, 5 epochs ended before the
	// last kill's check once workers asked for tasks early, and 8 once
	// each worker ran on one Go processor). Progress every 200 ms: a kill
	// lands up to one progress line after its moment, and a second of
	// this job is 150,000 records.
	const epochs = 12
	args := append(mlpArgs(strconv.Itoa(epochs)), "--num_workers=3", "--num_ps_pods=2", "--checkpoint_dir="+ckpt, "--checkpoint_steps=100",
		"--log_interval=200ms")
	base := startJob(t, append(mlpArgs(strconv.Itoa(epochs)), "--num_workers=3", "--num_ps_pods=2")...).succeeded(5 * time.Minute)
	seed := time.Now().UnixNano()
	if v := os.Getenv("ELASTICDL_CRASH_SEED"); v != "" { // replays a logged run
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("ELASTICDL_CRASH_SEED: %v", err)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	kills := []string{"master", "master", "worker", "worker", "worker", "ps"}
	rng.Shuffle(len(kills), func(a, b int) { kills[a], kills[b] = kills[b], kills[a] })
	// Moments, in records trained over the epochs (720,000), spread
	// over the first two thirds so that training outlasts the last kill.
	at := make([]int64, len(kills))
	for i := range at {
		at[i] = 5000 + rng.Int64N(epochs*60000*2/3-5000)
	}
	slices.Sort(at)
	t.Logf("seed %d: kills %v at %v records", seed, kills, at)

	var j *job
	if storage.IsRemote(ckpt) {
		// The model and the summary go to S3 too; logs and the master's
		// state to a local --work_dir.
		out := t.TempDir()
		j = startCommand(t, out, append([]string{"train", "--output=" + ckpt + "/output", "--work_dir=" + out, "--log_interval=1s"}, args...))
		j.remoteOut = ckpt + "/output"
	} else {
		j = startJob(t, args...)
	}
	var killed []int
	for i, role := range kills {
		var victim int
		var survivors []int
		waitFor(t, 2*time.Minute, fmt.Sprintf("%d records, and every process up, to kill a %s", at[i], role), func() bool {
			ms, ws, ps := j.children("master"), j.children("worker"), j.children("ps")
			survivors = append(ws, ps...)
			if j.recordsDone() < at[i] || len(ms) != 1 || len(ws) != 3 || len(ps) != 2 {
				return false
			}
			for _, pid := range append(ms, survivors...) {
				if contains(killed, pid) {
					return false // not reaped yet
				}
			}
			if role == "ps" {
				// A PS restores its newest checkpoint: let there be one.
				if _, err := checkpoint.Load(ckpt, nil); err != nil {
					return false
				}
			}
			switch role {
			case "master":
				victim = ms[0]
			case "worker":
				victim = ws[rng.IntN(len(ws))]
			case "ps":
				victim = ps[rng.IntN(len(ps))]
			}
			return true
		})
		if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed = append(killed, victim)
		done := j.recordsDone()
		t.Logf("killed %s pid %d at %d records", role, victim, done)
		if role != "master" {
			continue
		}
		// A new master takes over (and is heard from: it persisted the
		// takeover); the instances are the same processes.
		waitFor(t, time.Minute, "a new master making progress", func() bool {
			ms := j.children("master")
			return len(ms) == 1 && !contains(killed, ms[0]) && j.recordsDone() > done
		})
		after := append(j.children("worker"), j.children("ps")...)
		for _, pid := range survivors {
			if !contains(after, pid) {
				t.Errorf("pid %d did not survive the master's death (before %v, after %v)", pid, survivors, after)
			}
		}
	}
	s := j.succeeded(5 * time.Minute)
	assertExactlyOnce(t, s, epochs, 60000)
	if s.MasterRestarts != 2 || s.Workers.Lost != 3 || s.Workers.Relaunched != 3 || s.PS.Lost != 1 || s.PS.Relaunched != 1 {
		t.Errorf("master_restarts %d, workers %+v, ps %+v: want 2 restarts, 3 workers and 1 PS lost and relaunched", s.MasterRestarts, s.Workers, s.PS)
	}
	// Async, each shard holds parameters of the mlp: a shard's version
	// counts the minibatches it applied, ceil(60000/64) per epoch once each.
	if s.ModelVersion != epochs*938 || len(s.PS.AppliedUnknown) != 0 {
		t.Errorf("model version %d, applied_unknown %v: want %d minibatches applied once each", s.ModelVersion, s.PS.AppliedUnknown, epochs*938)
	}
	t.Logf("records requeued for the PS rollback: %d (%d tasks); tasks requeued %d, resent %d",
		s.RecordsRequeuedForRollback, s.Tasks.Reopened, s.Tasks.Requeued, s.Tasks.Resent)
	t.Logf("accuracy: undisturbed %.4f, with the kills %.4f", base.Eval.Accuracy, s.Eval.Accuracy)
	if s.Eval.Accuracy < base.Eval.Accuracy-0.01 {
		t.Errorf("accuracy %.4f, more than a point under the undisturbed %.4f", s.Eval.Accuracy, base.Eval.Accuracy)
	}
	noOrphans(t, killed)
	return s
}
