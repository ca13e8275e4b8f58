package e2e

import (
	"fmt"
	"testing"
	"time"
)

// ---- preemption -----------------------------------------------------------------------------

// runHog starts pod "hog" in ns: one CPU at PriorityClass pc on the nodes
// labelled e2e=label, so that the scheduler preempts a job's pod for it;
// it returns once the hog runs. Delete it to give the room back.
func runHog(t *testing.T, ns, pc, label string) {
	t.Helper()
	hogAt := time.Now()
	kubectlApply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hog, namespace: %s}
spec:
  priorityClassName: %s
  nodeSelector: {e2e: %s}
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleep
    image: busybox:e2e
    command: [sh, -c, 'sleep 3600']
    resources: {requests: {cpu: "1"}}
`, ns, pc, label))
	var hog pod
	waitFor(t, 30*time.Second, "the high-priority pod to run", func() (bool, string) {
		getJSON(t, &hog, "pod", "-n", ns, "hog")
		return hog.running(), hog.String()
	})
	t.Logf("high-priority pod Running on %s %.1fs after creation", hog.Spec.NodeName, time.Since(hogAt).Seconds())
}

// trainsWithOneWorker checks that the job still runs with one worker and
// one pending, and trains on over d.
func (j *job) trainsWithOneWorker(d time.Duration) {
	t := j.t
	t.Helper()
	before := j.recordsDone()
	time.Sleep(d)
	var master pod
	getJSON(t, &master, "pod", "-n", j.ns, j.masterPod())
	if master.Status.Phase != "Running" {
		t.Fatalf("the job ended (%s) while the high-priority pod ran: make the job longer", master.Status.Phase)
	}
	j.waitWorkers(time.Second, 1, 1)
	if after := j.recordsDone(); after <= before {
		t.Errorf("no training progress with one worker: %d records done before %s, %d after", before, d, after)
	} else {
		t.Logf("with one worker: %d → %d records in %s", before, after, d)
	}
}
