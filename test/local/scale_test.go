package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestScaleLocalJob scales a running local job with `elasticdl scale
// --output=DIR`: 3 → 1 worker (two let go, gracefully), then 1 → 2; a bad
// value is ignored with a warning. The job finishes with every record
// trained exactly once and no worker counted lost.
func TestScaleLocalJob(t *testing.T) {
	needData(t)
	// 8 epochs: a worker trains one in about 2 s here, and the job must
	// outlast the scaling below.
	j := startJob(t, append(mlpArgs("8"), "--num_workers=3", "--min_workers=1", "--minibatch_size=16")...)
	waitFor(t, time.Minute, "3 workers training", func() bool {
		_, done := j.epochRecordsDone()
		return done > 0 && len(j.children("worker")) == 3
	})
	scale := func(n string) { scaleLocal(t, j, "--workers="+n) }
	scale("1")
	waitFor(t, time.Minute, "1 worker left", func() bool { return len(j.children("worker")) == 1 })
	before := j.recordsDone()
	// Written by hand: `elasticdl scale` refuses it.
	if err := os.WriteFile(filepath.Join(j.out, "master", "target-workers"), []byte("lots"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the master to refuse the target written by hand", func() bool {
		return strings.Contains(j.stderr.String(), "ignoring a target that is not a number of workers")
	})
	waitFor(t, time.Minute, "training progress with one worker", func() bool { return j.recordsDone() > before })
	scale("2")
	waitFor(t, time.Minute, "2 workers", func() bool { return len(j.children("worker")) == 2 })
	if code := j.wait(5 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	s := j.summary()
	assertExactlyOnce(t, s, 8, 60000)
	w := s.Workers
	if w.ScaledDown != 2 || w.ScaledUp != 1 || w.Lost != 0 || w.Relaunched != 0 {
		t.Errorf("summary workers %+v: want 2 scaled down, 1 up, none lost or relaunched", w)
	}
	if !strings.Contains(j.stderr.String(), "ignoring a target that is not a number of workers") {
		t.Errorf("no warning about the bad target in the log")
	}
}

// An AllReduce job scaled 3 → 1 → 3 while it trains: the workers let go
// leave the ring at a step boundary (a planned change: no member reports
// a broken ring, no step is redone), hand back the rest of their tasks,
// and are stopped without counting as lost; the new ones join the same
// way. Every record is trained once per epoch and the model is the same
// on every worker at the end.
func TestScaleAllReduceJob(t *testing.T) {
	needData(t)
	j := startJob(t, append(allReduceArgs("fashion_mnist.mlp", "3", "2"), "--min_workers=1", "--minibatch_size=32")...)
	waitFor(t, time.Minute, "3 workers training", func() bool {
		_, done := j.epochRecordsDone()
		return done > 0 && len(j.children("worker")) == 3
	})
	scale := func(n string) { scaleLocal(t, j, "--workers="+n) }
	scale("1")
	waitFor(t, time.Minute, "1 worker left", func() bool { return len(j.children("worker")) == 1 })
	before := j.recordsDone()
	waitFor(t, time.Minute, "training progress with one worker", func() bool { return j.recordsDone() > before })
	scale("3")
	waitFor(t, time.Minute, "3 workers again", func() bool { return len(j.children("worker")) == 3 })
	s := j.succeeded(5 * time.Minute)
	assertExactlyOnce(t, s, 2, 60000)
	if w := s.Workers; w.ScaledDown != 2 || w.ScaledUp != 2 || w.Lost != 0 || w.Relaunched != 0 {
		t.Errorf("summary workers %+v: want 2 scaled down, 2 up, none lost or relaunched", w)
	}
	if s.Ring == nil || s.Ring.Broken != 0 {
		t.Errorf("ring %+v: want no ring broken (planned changes only)", s.Ring)
	}
	for _, r := range s.Ring.Recoveries {
		t.Logf("ring change %q: %.2f s to the next committed step", r.Cause, r.Seconds)
	}
	if s.Eval == nil || s.Eval.Accuracy < 0.80 {
		t.Errorf("eval %+v", s.Eval)
	}
	assertSameModel(t, s, 3)
	// The master's log: both let go after they reached a boundary (a
	// worker told to leave may be stopped before it logs so itself).
	left := 0
	for _, l := range strings.Split(j.stderr.String(), "\n") {
		if strings.Contains(l, `msg="instance exited"`) && strings.Contains(l, "left the ring at a step boundary") {
			left++
		}
	}
	if left != 2 {
		t.Errorf("%d workers stopped after leaving the ring at a step boundary, want 2", left)
	}
}

// TestScalePSLocal re-shards a training job's PS 1 → 2 → 1 with
// `elasticdl scale --ps` while its workers train: each time new tasks
// pause until the held ones are in, the parameters and optimizer slots
// move to the new layout, and the workers route by it from their next
// task. No PS is lost, the job needs no restart, every record is trained
// exactly once per epoch (the end-of-training check counts it from what
// the shards hold), and the accuracy is an undisturbed run's.
func TestScalePSLocal(t *testing.T) {
	needData(t)
	// 10 epochs: the job must outlast two re-shards (it trains an epoch
	// in about a second here).
	j := startJob(t, mlpArgs("10")...)
	waitFor(t, time.Minute, "training", func() bool {
		_, done := j.epochRecordsDone()
		return done > 5000
	})
	scale := func(n string) { scaleLocal(t, j, "--ps="+n) }
	scale("2")
	waitFor(t, time.Minute, "2 PS", func() bool { return len(j.children("ps")) == 2 && strings.Contains(j.stderr.String(), "re-sharded") })
	before := j.recordsDone()
	waitFor(t, time.Minute, "training on 2 PS", func() bool { return j.recordsDone() > before+5000 })
	scale("1")
	waitFor(t, time.Minute, "1 PS", func() bool {
		return len(j.children("ps")) == 1 && strings.Count(j.stderr.String(), `msg=re-sharded`) == 2
	})
	s := j.succeeded(5 * time.Minute)
	assertExactlyOnce(t, s, 10, 60000)
	if p := s.PS; p.Lost != 0 || p.Relaunched != 0 || len(p.Reshards) != 2 || p.Reshards[0].To != 2 || p.Reshards[1].To != 1 {
		t.Errorf("summary PS %+v: want 1 → 2 → 1, none lost", p)
	}
	for _, r := range s.PS.Reshards {
		t.Logf("re-shard %d → %d: %.2f s after the target, %.2f s without new tasks", r.From, r.To, r.Seconds, r.PausedSeconds)
	}
	if s.Eval == nil || s.Eval.Accuracy < 0.80 {
		t.Errorf("eval %+v", s.Eval)
	}
}

// scaleLocal runs `elasticdl scale --output=OUT flag` for local job j.
func scaleLocal(t *testing.T, j *job, flag string) {
	t.Helper()
	out, err := exec.Command(binary, "scale", "--output="+j.out, flag).CombinedOutput()
	if err != nil {
		t.Fatalf("elasticdl scale %s: %v\n%s", flag, err, out)
	}
}
