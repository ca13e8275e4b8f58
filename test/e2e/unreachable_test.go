package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestK8sMasterUnreachable is what a newcomer to the rig hit: a job
// submitted without --master_host, whose workers cannot resolve the
// master's Service name (the rig has no cluster DNS). Each worker must say
// why and exit; the job must fail in bounded time, with the workers' cause
// in the summary, `elasticdl status`, the master's log and the Job's
// Events, instead of relaunching silent workers for as long as the budget
// lasts.
func TestK8sMasterUnreachable(t *testing.T) {
	timeTest(t)
	label := startProcNodes(t, "e2e-u", 1, "4", "8Gi")
	ns := newNamespace(t)
	// --master_host= (empty): the workers dial the master's Service name.
	// 3 workers: the job fails after max(3, 3) exits, the first round.
	j := submit(t, ns, "unreach", label, "--master_host=", "--num_workers=3", "--worker_master_timeout=10s",
		"--worker_resource_request=cpu=250m,memory=256Mi")
	r := waitJob(t, j, 3*time.Minute)
	// The worker's cause: the Service's name does not resolve.
	cause := "lookup elasticdl-unreach-master"
	want := []string{"no worker has reached the master", "cannot reach the master at elasticdl-unreach-master", cause}
	has := func(where, s string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(s, w) {
				t.Errorf("%s does not say %q:\n%s", where, w, tail(s, 20))
			}
		}
	}
	if r.Phase != "Failed" {
		t.Errorf("the job ended %s, want Failed", r.Phase)
	}
	has("the summary's error", r.Summary.Error)
	has("the master's log", j.podLog(j.masterPod()))
	out, code, _ := cli(t, nil, 30*time.Second, "status", j.name, "--namespace", ns)
	t.Logf("elasticdl status (exit %d):\n%s", code, tail(out, 20))
	has("elasticdl status", out)
	var failed []string
	for _, ev := range j.events() {
		if ev.Reason == "JobFailed" {
			failed = append(failed, ev.Message)
		}
	}
	has("the JobFailed event", strings.Join(failed, "\n"))
	// Bounded: the first round of workers, each after its 10 s, not the
	// relaunch budget: the first two exits are relaunched, the third fails
	// the job.
	if n := r.Summary.Workers.Launched; n > 6 {
		t.Errorf("%d workers launched before the job failed, want the first 3 and a relaunch of some", n)
	}
	t.Logf("failed after %.1fs: %s", r.Took.Seconds(), r.Summary.Error)
}
