package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestK8sScaleWorkers scales a running job with `elasticdl scale`: 3 → 1
// worker (two let go, the one with a task once it has reported it), then
// back to 2; a bad annotation is ignored with an Event. The job finishes
// with every record trained exactly once, no worker counted lost.
func TestK8sScaleWorkers(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-s", 2, "4", "8Gi")
	j := submit(t, ns, "scale", label, "--minibatch_size=8", "--num_workers=3", "--min_workers=1")
	j.waitWorkers(30*time.Second, 3, 0)
	j.waitTraining(30 * time.Second)

	scale := func(n string) {
		t.Helper()
		out, code, _ := cli(t, nil, 30*time.Second, "scale", j.name, "--namespace", ns, "--workers="+n)
		if code != 0 {
			t.Fatalf("elasticdl scale --workers=%s exited %d:\n%s", n, code, out)
		}
	}
	if out, code, _ := cli(t, nil, 30*time.Second, "scale", j.name, "--namespace", ns); code != 2 || !strings.Contains(out, "--workers") {
		t.Errorf("elasticdl scale without --workers: exit %d, want 2 naming --workers:\n%s", code, out)
	}

	asked := time.Now()
	scale("1")
	took := waitFor(t, 60*time.Second, "1 worker left after scaling to 1", func() (bool, string) {
		ws := j.pods("worker")
		return len(ws) == 1 && ws[0].running(), fmt.Sprint(ws)
	})
	t.Logf("scaled 3 → 1 worker in %.1fs", took.Seconds())
	before := j.recordsDone()
	time.Sleep(5 * time.Second)
	if after := j.recordsDone(); after <= before {
		t.Errorf("no training progress with one worker: %d records done, %d 5 s later", before, after)
	}

	kubectl(t, "annotate", "job", "-n", ns, j.masterJob(), "elasticdl.io/target-workers=many", "--overwrite")
	waitFor(t, 20*time.Second, "an Event about the bad target", func() (bool, string) {
		for _, e := range j.events() {
			if e.Reason == "TargetInvalid" {
				return true, ""
			}
		}
		return false, "none"
	})

	scale("2")
	took = waitFor(t, 60*time.Second, "2 workers running after scaling to 2", func() (bool, string) {
		ws := j.pods("worker")
		n, _ := countRunning(ws)
		return n == 2, fmt.Sprint(ws)
	})
	t.Logf("scaled 1 → 2 workers in %.1fs (%.1fs after the first scale)", took.Seconds(), time.Since(asked).Seconds())

	r := waitSucceeded(t, j, 4*time.Minute)
	assertTrained(t, r, 1, minAccuracy)
	w := r.Summary.Workers
	if w.ScaledDown != 2 || w.ScaledUp != 1 || w.Lost != 0 || w.Relaunched != 0 {
		t.Errorf("summary workers %+v: want 2 scaled down, 1 up, none lost or relaunched", w)
	}
	reasons := map[string]int{}
	for _, e := range j.events() {
		reasons[e.Reason]++
	}
	if reasons["TargetChanged"] != 2 {
		t.Errorf("events %v: want TargetChanged twice", reasons)
	}
}

// TestK8sScalePS re-shards a running job's PS 1 → 2 → 1 with `elasticdl
// scale --ps` on the real control plane: the master launches PS 1 (a pod
// and its Service), moves half the parameters to it shard to shard while
// new tasks pause, and the workers route by the new layout from their
// next task; then everything moves back and the PS 1 pod is deleted.
// No pod is lost or relaunched, the job is not restarted, and every record
// is trained exactly once (counted from what the shards hold).
func TestK8sScalePS(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-p", 2, "4", "8Gi")
	j := submit(t, ns, "reshard", label, "--num_epochs=2")
	j.waitWorkers(30*time.Second, 2, 0)
	j.waitTraining(30 * time.Second)
	resharded := func() int {
		n := 0
		for _, e := range j.events() {
			if e.Reason == "PSResharded" {
				n++
			}
		}
		return n
	}
	scale := func(n string) {
		t.Helper()
		out, code, _ := cli(t, nil, 30*time.Second, "scale", j.name, "--namespace", ns, "--ps="+n)
		if code != 0 {
			t.Fatalf("elasticdl scale --ps=%s exited %d:\n%s", n, code, out)
		}
	}
	scale("2")
	took := waitFor(t, 90*time.Second, "2 PS serving the new layout", func() (bool, string) {
		ps := j.pods("ps")
		n, _ := countRunning(ps)
		return n == 2 && resharded() == 1, fmt.Sprint(ps)
	})
	t.Logf("re-sharded 1 → 2 PS in %.1fs (a new pod included)", took.Seconds())
	before := j.recordsDone()
	waitFor(t, 60*time.Second, "training on 2 PS", func() (bool, string) {
		return j.recordsDone() > before+2000, fmt.Sprint(j.recordsDone())
	})
	scale("1")
	took = waitFor(t, 60*time.Second, "1 PS left", func() (bool, string) {
		ps := j.pods("ps")
		return len(ps) == 1 && resharded() == 2, fmt.Sprint(ps)
	})
	t.Logf("re-sharded 2 → 1 PS in %.1fs (the pod gone included)", took.Seconds())
	r := waitSucceeded(t, j, 6*time.Minute)
	assertTrained(t, r, 2, minAccuracy)
	p := r.Summary.PS
	if p.Lost != 0 || p.Relaunched != 0 || len(p.Reshards) != 2 || p.Reshards[0].To != 2 || p.Reshards[1].To != 1 {
		t.Errorf("summary PS %+v: want 1 → 2 → 1, none lost or relaunched", p)
	}
	for _, rs := range p.Reshards {
		t.Logf("re-shard %d → %d: %.2fs from the target to the new layout serving", rs.From, rs.To, rs.Seconds)
	}
	if w := r.Summary.Workers; w.Lost != 0 || w.Relaunched != 0 {
		t.Errorf("summary workers %+v: want none lost", w)
	}
}
