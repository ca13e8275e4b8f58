package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pythonWithTorch is an interpreter with what the Python SDK needs, and
// the SDK's directory; without them the test is skipped, or fails where
// ELASTICDL_REQUIRE_PYTORCH=1 (CI installs python3-torch).
func pythonWithTorch(t *testing.T) (python, sdk string) {
	t.Helper()
	sdk, err := filepath.Abs("../../python")
	if err != nil {
		t.Fatal(err)
	}
	py := "/usr/bin/python3"
	cmd := exec.Command(py, "-c", "import torch, grpc, google.protobuf, elasticdl")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+sdk)
	if err := cmd.Run(); err != nil {
		msg := fmt.Sprintf("%s cannot import torch, grpc, protobuf and the SDK (apt-get install python3-torch python3-grpcio python3-protobuf): %v", py, err)
		if os.Getenv("ELASTICDL_REQUIRE_PYTORCH") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py, sdk
}

// TestK8sPyTorchPreemption is TestK8sPreemption with PyTorch workers: the
// worker pods run the example's script (--worker_command; the process
// nodes run a command as written, as a container would in --image), one
// is preempted by a higher-priority pod and comes back when the pod goes;
// the job finishes with every record trained once and the accuracy of
// the example's CNN after one epoch.
func TestK8sPyTorchPreemption(t *testing.T) {
	timeTest(t)
	py, sdk := pythonWithTorch(t)
	script, _ := filepath.Abs("../../examples/pytorch/train.py")
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-py", 2, "2", "4Gi")
	pc := uniqueName(t, "e2e-pyhog")
	kubectlApply(t, fmt.Sprintf("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: %s}\nvalue: 100000\n", pc))
	t.Cleanup(func() { kubectlCmd(t.Context(), "", "delete", "priorityclass", pc, "--ignore-not-found") })

	j := submit(t, ns, "pytorch", label,
		"--model_def=",
		"--worker_command="+py+" "+script,
		"--optimizer=adam:learning_rate=0.002",
		"--envs=PYTHONPATH="+sdk,
		"--minibatch_size=64",
		"--num_minibatches_per_task=8",
		"--worker_pod_priority=elasticdl-low",
		"--master_pod_priority=elasticdl-high",
		"--ps_pod_priority=elasticdl-high",
		"--master_resource_request=cpu=300m,memory=256Mi",
		"--ps_resource_request=cpu=300m,memory=256Mi",
		"--worker_resource_request=cpu=1200m,memory=512Mi",
	)
	ws := j.waitWorkers(60*time.Second, 2, 0)
	for _, w := range ws {
		if c := w.Spec.Containers; len(c) != 1 || strings.Join(c[0].Command, " ") != py+" "+script || len(c[0].Args) != 0 {
			t.Errorf("worker pod %s runs %+v, want the command %s %s", w.Metadata.Name, c, py, script)
		}
	}
	j.waitTraining(60 * time.Second)

	runHog(t, ns, pc, label)
	j.waitWorkers(30*time.Second, 1, 1)
	j.trainsWithOneWorker(3 * time.Second)
	kubectl(t, "delete", "pod", "-n", ns, "hog", "--wait=false")
	j.waitWorkers(30*time.Second, 2, 0)

	r := waitSucceeded(t, j, 5*time.Minute)
	assertTrained(t, r, 1, 0.85)
	s := r.Summary
	if s.Workers.Lost < 1 || s.Workers.Relaunched < 1 || s.WorkerCommand == "" {
		t.Errorf("summary: workers %+v, worker command %q: want one preempted and relaunched, and the command", s.Workers, s.WorkerCommand)
	}
	t.Logf("PyTorch job on the control plane: accuracy %.4f, workers %+v, tasks %+v", s.Eval.Accuracy, s.Workers, s.Tasks)
}

// pyInRingRE is a Python ring member's line on joining a ring.
var pyInRingRE = regexp.MustCompile(`in ring version (\d+), rank \d+ of (\d+)`)

// pyInRingOf reports whether a Python worker's log says it is (or was
// last) in a ring of n members.
func pyInRingOf(log string, n int) bool {
	m := pyInRingRE.FindAllStringSubmatch(log, -1)
	return len(m) > 0 && m[len(m)-1][2] == strconv.Itoa(n)
}

// TestK8sPyTorchAllReducePreemption: PyTorch workers in an AllReduce ring
// on the control plane. One is preempted by a higher-priority pod: the
// survivor goes on alone in its own pod and process, the replacement joins
// when the pod goes, every record is trained once, and both final members
// hold the same model.
func TestK8sPyTorchAllReducePreemption(t *testing.T) {
	timeTest(t)
	py, sdk := pythonWithTorch(t)
	script, _ := filepath.Abs("../../examples/pytorch/train.py")
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-pyar", 2, "2", "4Gi")
	pc := uniqueName(t, "e2e-pyarhog")
	kubectlApply(t, fmt.Sprintf("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: %s}\nvalue: 100000\n", pc))
	t.Cleanup(func() { kubectlCmd(context.Background(), "", "delete", "priorityclass", pc, "--ignore-not-found") })

	j := submit(t, ns, "pyring", label,
		"--model_def=",
		"--distribution_strategy=AllreduceStrategy",
		"--num_ps_pods=0",
		"--worker_command="+py+" "+script,
		"--optimizer=adam:learning_rate=0.002",
		// A process node runs the command on this machine: the ring helper
		// is the binary under test (an image has elasticdl on PATH).
		"--envs=PYTHONPATH="+sdk+",ELASTICDL_BINARY="+elasticdl,
		"--minibatch_size=64",
		"--worker_pod_priority=elasticdl-low",
		"--master_pod_priority=elasticdl-high",
		"--master_resource_request=cpu=300m,memory=256Mi",
		"--worker_resource_request=cpu=1200m,memory=512Mi",
	)
	ws := j.waitWorkers(60*time.Second, 2, 0)
	waitFor(t, 60*time.Second, "both Python workers in a ring of 2", func() (bool, string) {
		for _, w := range ws {
			if l := containerLog(t, w); !pyInRingOf(l, 2) {
				return false, w.Metadata.Name + ": " + tail(l, 2)
			}
		}
		return true, ""
	})
	pids := map[string]int{}
	for _, w := range ws {
		pids[w.Metadata.UID] = containerPID(t, w)
	}
	j.waitTraining(30 * time.Second)

	runHog(t, ns, pc, label)
	var survivor, replacement pod
	for _, w := range j.waitWorkers(30*time.Second, 1, 1) {
		switch {
		case w.running():
			survivor = w
		case w.unschedulable():
			replacement = w
		}
	}
	waitFor(t, 30*time.Second, "the survivor alone in a ring", func() (bool, string) {
		l := containerLog(t, survivor)
		return pyInRingOf(l, 1), tail(l, 2)
	})
	j.trainsWithOneWorker(3 * time.Second)
	kubectl(t, "delete", "pod", "-n", ns, "hog", "--wait=false")
	waitFor(t, 60*time.Second, "the replacement Running in a ring of 2", func() (bool, string) {
		var p pod
		if !getJSON(t, &p, "pod", "-n", ns, replacement.Metadata.Name) || !p.running() {
			return false, p.String()
		}
		l := containerLog(t, p)
		return pyInRingOf(l, 2), tail(l, 2)
	})
	var s pod
	getJSON(t, &s, "pod", "-n", ns, survivor.Metadata.Name)
	if pid := containerPID(t, s); s.Metadata.UID != survivor.Metadata.UID || pid != pids[survivor.Metadata.UID] {
		t.Errorf("survivor %s: uid %s process %d, was %s %d", s.Metadata.Name, s.Metadata.UID, pid, survivor.Metadata.UID, pids[survivor.Metadata.UID])
	}

	r := waitSucceeded(t, j, 6*time.Minute)
	assertTrained(t, r, 1, 0.85)
	sum := r.Summary
	if w := sum.Workers; w.Launched != 3 || w.Lost != 1 || w.Preempted != 1 || sum.PS.Launched != 0 {
		t.Errorf("summary workers %+v ps %+v: want 3 launched, 1 lost (preempted), no PS", sum.Workers, sum.PS)
	}
	if sum.Ring == nil || len(sum.Ring.Checksums) != 2 || sum.Ring.Checksums[0].Checksum != sum.Ring.Checksums[1].Checksum {
		t.Errorf("ring %+v: want the two final members' models, the same", sum.Ring)
	}
	t.Logf("PyTorch ring on the control plane: accuracy %.4f, workers %+v, ring versions %d", sum.Eval.Accuracy, sum.Workers, sum.Ring.Versions)
}
