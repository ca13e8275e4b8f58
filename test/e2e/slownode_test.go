package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/proctest"
)

// slowNodeJob runs a 3-worker job (the cnn, epochs, --replace_slow_workers
// after 3 s) on prefix's nodes of 1.5 CPU, which fit one worker of 1 CPU
// each (and the master or the PS beside it). The node of the first worker
// is bad: it holds every worker process on it to a tenth of a CPU (a noisy
// neighbour, a throttled or failing machine). It returns the job, the bad
// node and the first worker pod Running that the job did not start with.
func slowNodeJob(t *testing.T, prefix string, nodes, epochs int) (*job, string, pod) {
	t.Helper()
	ns := newNamespace(t)
	label := startProcNodes(t, prefix, nodes, "1500m", "4Gi")
	// The cnn: compute, which a CPU quota slows (the mlp's small steps
	// wait on the network, which it hardly does).
	j := submit(t, ns, "slownode", label, "--model_def=fashion_mnist.cnn", "--minibatch_size=64",
		"--num_minibatches_per_task=2", "--num_workers=3", fmt.Sprintf("--num_epochs=%d", epochs),
		"--worker_resource_request=cpu=1,memory=256Mi", "--replace_slow_workers", "--replace_slow_after=3s")
	ws := j.waitWorkers(60*time.Second, 3, 0)
	bad := ws[0].Spec.NodeName
	var first []string
	for _, w := range ws {
		first = append(first, w.Metadata.Name)
	}
	j.waitTraining(30 * time.Second)

	throttled := map[string]bool{}
	throttleBad := func() {
		for _, p := range j.pods("worker") {
			if p.running() && p.Spec.NodeName == bad && !throttled[p.Metadata.Name] {
				throttled[p.Metadata.Name] = true
				t.Logf("worker pod %s on the bad node %s throttled: %s", p.Metadata.Name, bad, proctest.Throttle(t, containerPID(t, p), 0.1))
			}
		}
	}
	throttleBad()
	start := time.Now()
	var repl pod
	waitFor(t, 3*time.Minute, "a new worker pod Running in place of the slow one", func() (bool, string) {
		throttleBad()
		ps := j.pods("worker")
		if len(ps) == 0 {
			t.Fatalf("the job's workers are gone (the job ended?) and none replaced the slow one")
		}
		var seen []string
		for _, p := range ps {
			seen = append(seen, p.String())
			if p.running() && !slices.Contains(first, p.Metadata.Name) {
				repl = p
				return true, ""
			}
		}
		return false, strings.Join(seen, ", ")
	})
	t.Logf("new worker %s Running on %s %.1fs after the throttle", repl.Metadata.Name, repl.Spec.NodeName, time.Since(start).Seconds())
	// Keep throttling what lands on the bad node until the job ends.
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			throttleBad()
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return j, bad, repl
}

// avoids is the node names pod p's required node affinity excludes, as
// kubectl prints them.
func avoids(t *testing.T, j *job, p pod) string {
	return kubectl(t, "get", "pod", "-n", j.ns, p.Metadata.Name, "-o",
		"jsonpath={.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[*].matchFields[*].values}")
}

// TestK8sSlowNodeAvoided: with --replace_slow_workers the master marks the
// bad node's worker slow and replaces it by a worker that may not run
// there: the new pod carries a required node anti-affinity to the bad
// node and runs on the fourth node. The replaced worker is not a loss, and
// the job ends exactly once per epoch at the usual accuracy.
func TestK8sSlowNodeAvoided(t *testing.T) {
	timeTest(t)
	j, bad, repl := slowNodeJob(t, "e2e-slow", 4, 3)
	if repl.Spec.NodeName == bad {
		t.Errorf("the replacement %s runs on the bad node %s", repl.Metadata.Name, bad)
	}
	if a := avoids(t, j, repl); !strings.Contains(a, fmt.Sprintf("%q", bad)) {
		t.Errorf("the replacement's required node affinity avoids %s, want the bad node %q", a, bad)
	}
	r := waitSucceeded(t, j, 5*time.Minute)
	assertTrained(t, r, 3, minAccuracy)
	w := r.Summary.Workers
	if w.Replaced < 1 || w.Lost != 0 || len(r.Summary.SlowWorkers) == 0 {
		t.Errorf("summary workers %+v, slow marks %+v: want the slow worker marked and replaced, none lost", w, r.Summary.SlowWorkers)
	}
	t.Logf("slow marks %+v; workers %+v; tasks %+v", r.Summary.SlowWorkers, w, r.Summary.Tasks)
}

// TestK8sSlowNodeNoOtherRoom: three nodes, each with a worker: the
// replacement, which may not run on the bad node, has nowhere to go. It
// stays pending (unschedulable) for --replace_slow_after, and the master
// relaunches it without the avoidance: it runs on the bad node, slowly,
// and the job still ends exactly once per epoch.
func TestK8sSlowNodeNoOtherRoom(t *testing.T) {
	timeTest(t)
	j, bad, repl := slowNodeJob(t, "e2e-slowfull", 3, 4) // the fallback takes longer
	if repl.Spec.NodeName != bad {
		t.Errorf("the new worker %s runs on %s: with no other room, want the bad node %s", repl.Metadata.Name, repl.Spec.NodeName, bad)
	}
	if a := avoids(t, j, repl); a != "" {
		t.Errorf("the worker relaunched anywhere still avoids %s", a)
	}
	r := waitSucceeded(t, j, 5*time.Minute)
	assertTrained(t, r, 4, minAccuracy)
	w := r.Summary.Workers
	if w.Replaced < 1 || w.AvoidanceDropped < 1 || w.Lost != 0 {
		t.Errorf("summary workers %+v: want a replacement relaunched without the avoidance, none lost", w)
	}
	t.Logf("slow marks %+v; workers %+v; tasks %+v", r.Summary.SlowWorkers, w, r.Summary.Tasks)
}
