package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Final accuracy of fashion_mnist.mlp after one epoch (0.85-0.86 measured).
const minAccuracy = 0.80

// TestRigProcessNode checks the harness itself: a namespace with
// deploy/rbac.yaml, a process node, and a pod of image elasticdl:e2e that
// runs the binary under test (`elasticdl zoo`) under the elasticdl
// ServiceAccount.
func TestRigProcessNode(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-rig", 1, "2", "2Gi")
	kubectlApply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: zoo, namespace: %s}
spec:
  restartPolicy: Never
  serviceAccountName: elasticdl
  nodeSelector: {e2e: %s}
  containers:
  - name: main
    image: elasticdl:e2e
    command: [elasticdl]
    args: [zoo]
`, ns, label))
	var p pod
	took := waitFor(t, 30*time.Second, "pod zoo to succeed", func() (bool, string) {
		getJSON(t, &p, "pod", "-n", ns, "zoo")
		return p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed", p.String()
	})
	if p.Status.Phase != "Succeeded" {
		t.Fatalf("pod zoo: %s %+v", p.Status.Phase, p.Status.ContainerStatuses)
	}
	logs := kubectl(t, "logs", "-n", ns, "zoo")
	if !strings.Contains(logs, "fashion_mnist.mlp") {
		t.Fatalf("elasticdl zoo in a pod printed:\n%s", logs)
	}
	t.Logf("pod zoo Succeeded on %s in %.1fs", p.Spec.NodeName, took.Seconds())
}

// checkOwned checks the labels and the ownerReference of one of a job's
// objects: owned by the master's Job (so that a master pod deleted takes
// nothing with it), blocking its deletion, and no controller reference
// (the Job controller would release a pod it controls that its selector
// does not match).
func checkOwned(t *testing.T, what string, m objectMeta, job, replicaType string, owner masterJobState) {
	t.Helper()
	want := map[string]string{
		"app.kubernetes.io/name":    "elasticdl",
		"elasticdl.io/job-name":     job,
		"elasticdl.io/replica-type": replicaType,
	}
	if replicaType != "master" {
		want["elasticdl.io/replica-index"] = ""
	}
	for k, v := range want {
		got, ok := m.Labels[k]
		if !ok || (v != "" && got != v) {
			t.Errorf("%s %s: label %s=%q (present %v), want %q", what, m.Name, k, got, ok, v)
		}
	}
	if len(m.OwnerReferences) != 1 {
		t.Errorf("%s %s: ownerReferences %+v, want the master's Job", what, m.Name, m.OwnerReferences)
		return
	}
	ref := m.OwnerReferences[0]
	if ref.Kind != "Job" || ref.Name != owner.Metadata.Name || ref.UID != owner.Metadata.UID ||
		ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion || ref.Controller != nil && *ref.Controller {
		t.Errorf("%s %s: ownerReference %+v, want Job %s uid %s with blockOwnerDeletion, not as controller",
			what, m.Name, ref, owner.Metadata.Name, owner.Metadata.UID)
	}
}

// checkPodSpec checks a job's pod against the contract of
// /tmp/spec/k8s-interface.md: image, command and role, the environment
// (downward API), node selector, requests, instance-id label.
func checkPodSpec(t *testing.T, p pod, role string, j *job, cpuRequest string) {
	t.Helper()
	name := p.Metadata.Name
	if len(p.Spec.Containers) != 1 {
		t.Errorf("pod %s has %d containers, want 1", name, len(p.Spec.Containers))
		return
	}
	c := p.Spec.Containers[0]
	if c.Image != "elasticdl:e2e" || strings.Join(c.Command, " ") != "elasticdl" || len(c.Args) == 0 || c.Args[0] != role {
		t.Errorf("pod %s: image %q command %q args %q, want elasticdl:e2e, [elasticdl], [%s ...]", name, c.Image, c.Command, c.Args, role)
	}
	env := map[string]envVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	fieldRefs := map[string]string{"POD_IP": "status.podIP", "POD_NAME": "metadata.name"}
	plain := []string{}
	switch role {
	case "master":
		fieldRefs["POD_NAMESPACE"] = "metadata.namespace"
		if p.Spec.ServiceAccountName != "elasticdl" {
			t.Errorf("master pod %s: serviceAccountName %q, want elasticdl", name, p.Spec.ServiceAccountName)
		}
	case "worker":
		plain = []string{"MASTER_ADDR", "WORKER_ID"}
	}
	for k, path := range fieldRefs {
		e, ok := env[k]
		if !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("pod %s: env %s = %+v, want fieldRef %s", name, k, e, path)
		}
	}
	for _, k := range plain {
		if _, ok := env[k]; !ok {
			t.Errorf("pod %s: no env %s", name, k)
		}
	}
	if role == "worker" && !strings.HasSuffix(env["MASTER_ADDR"].Value, fmt.Sprintf(":%d", j.masterPort)) && env["MASTER_ADDR"].ValueFrom == nil {
		t.Errorf("pod %s: MASTER_ADDR %q, want the master's address with port %d", name, env["MASTER_ADDR"].Value, j.masterPort)
	}
	if p.Spec.NodeSelector["e2e"] != j.label {
		t.Errorf("pod %s: nodeSelector %v, want e2e=%s", name, p.Spec.NodeSelector, j.label)
	}
	if got := c.Resources.Requests["cpu"]; got != cpuRequest {
		t.Errorf("pod %s: cpu request %q, want %q", name, got, cpuRequest)
	}
	if role != "master" && p.Metadata.Labels["elasticdl.io/instance-id"] == "" {
		t.Errorf("pod %s: no label elasticdl.io/instance-id (labels %v)", name, p.Metadata.Labels)
	}
}

// (a) `elasticdl train --backend=k8s --yaml | kubectl apply -f -` runs a job
// with 2 workers and 1 PS to the end; then nothing of it is left but the
// master's Job and pod (label status=Finished), and deleting the Job
// garbage-collects the pod and the summary ConfigMap.
func TestK8sJobFromYAML(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-a", 2, "4", "8Gi")
	j := newJob(t, ns, "yaml", label)

	j.submitted = time.Now()
	manifest, stderr, code := cliStdout(t, 30*time.Second, append(jobArgs(j), "--yaml")...)
	if code != 0 {
		t.Fatalf("elasticdl train --backend=k8s --yaml exited %d:\n%s%s", code, manifest, stderr)
	}
	if !strings.Contains(manifest, "kind: Job") || !strings.Contains(manifest, j.masterJob()) {
		t.Fatalf("--yaml printed no master Job manifest:\n%s\nstderr:\n%s", manifest, stderr)
	}
	if ps := jobPods(t, ns, j.name, "master"); len(ps) != 0 || getJSON(t, &masterJobState{}, "job", "-n", ns, j.masterJob()) {
		t.Fatalf("--yaml created the Job or pods: %v", ps)
	}
	// No -n: the manifest names its namespace.
	out := kubectlApply(t, manifest)
	j.submitEnd = time.Now()
	t.Logf("kubectl apply: %s", strings.TrimSpace(out))

	ws := j.waitWorkers(30*time.Second, 2, 0)
	var master pod
	if !getJSON(t, &master, "pod", "-n", ns, j.masterPod()) {
		t.Fatalf("no master pod in namespace %s after kubectl apply", ns)
	}
	var mj masterJobState
	if !getJSON(t, &mj, "job", "-n", ns, j.masterJob()) {
		t.Fatalf("no master Job %s in namespace %s after kubectl apply", j.masterJob(), ns)
	}
	checkPodSpec(t, master, "master", j, "250m")
	for _, w := range ws {
		checkOwned(t, "worker pod", w.Metadata, j.name, "worker", mj)
		checkPodSpec(t, w, "worker", j, "500m")
	}
	for _, p := range j.pods("ps") {
		checkOwned(t, "ps pod", p.Metadata, j.name, "ps", mj)
		checkPodSpec(t, p, "ps", j, "250m")
	}
	var svcs struct{ Items []service }
	getJSON(t, &svcs, "services", "-n", ns, "-l", "elasticdl.io/job-name="+j.name)
	names := map[string]string{}
	for _, s := range svcs.Items {
		names[s.Metadata.Name] = s.Metadata.Labels["elasticdl.io/replica-type"]
		checkOwned(t, "service", s.Metadata, j.name, s.Metadata.Labels["elasticdl.io/replica-type"], mj)
	}
	if want := map[string]string{"elasticdl-" + j.name + "-ps-0": "ps", j.masterJob(): "master"}; !maps.Equal(names, want) {
		t.Errorf("services of the job: %v, want %v", names, want)
	}

	r := waitSucceeded(t, j, 3*time.Minute)
	assertTrained(t, r, 1, minAccuracy)
	if r.Summary.Workers.Launched < 2 || r.Summary.PS.Launched < 1 {
		t.Errorf("summary workers %+v ps %+v, want 2 workers and 1 PS launched", r.Summary.Workers, r.Summary.PS)
	}

	// Nothing of the job is left but its master Job and pod.
	waitFor(t, 30*time.Second, "no worker, PS pod or service of the job", func() (bool, string) {
		var l struct {
			Items []struct{ Metadata objectMeta }
		}
		getJSON(t, &l, "pods,services", "-n", ns, "-l", "elasticdl.io/job-name="+j.name+",elasticdl.io/replica-type!=master")
		var names []string
		for _, it := range l.Items {
			names = append(names, it.Metadata.Name)
		}
		return len(names) == 0, strings.Join(names, " ")
	})
	getJSON(t, &master, "pod", "-n", ns, j.masterPod())
	if got := master.Metadata.Labels["status"]; got != "Finished" {
		t.Errorf("master pod label status=%q, want Finished (labels %v)", got, master.Metadata.Labels)
	}

	// The CLI's view of the finished job.
	if out, code, _ := cli(t, nil, 30*time.Second, "status", j.name, "--namespace", ns); code != 0 || !strings.Contains(out, "Finished") && !strings.Contains(out, "Succeeded") {
		t.Errorf("elasticdl status %s exited %d:\n%s", j.name, code, out)
	} else {
		t.Logf("elasticdl status:\n%s", tail(out, 20))
	}
	if out, code, _ := cli(t, nil, 30*time.Second, "logs", j.name, "--namespace", ns); code != 0 || !strings.Contains(out, "progress") {
		t.Errorf("elasticdl logs %s exited %d, want the master log:\n%s", j.name, code, tail(out, 20))
	}

	// The saved model, evaluated by an `evaluate` job on the cluster, gives
	// the training job's final accuracy.
	ev := newJob(t, ns, "yaml-eval", label)
	ev.submitted = time.Now()
	evalOut, evalCode, _ := cli(t, nil, 60*time.Second, "evaluate", "--backend=k8s", "--image=elasticdl:e2e", "--namespace="+ns,
		"--job_name="+ev.name, "--ps_host=127.0.0.1", "--master_host=127.0.0.1", "--node_selector=e2e="+label,
		fmt.Sprintf("--master_port=%d", ev.masterPort), fmt.Sprintf("--ps_port=%d", ev.psPort),
		"--model_def=fashion_mnist.mlp", "--checkpoint_dir_for_init="+filepath.Join(j.output, "model"),
		"--validation_data="+dataDir+"/t10k-images-idx3-ubyte.gz", "--output="+ev.output,
		"--num_workers=2", "--master_resource_request=cpu=250m,memory=256Mi",
		"--ps_resource_request=cpu=250m,memory=256Mi", "--worker_resource_request=cpu=500m,memory=256Mi")
	if evalCode != 0 {
		t.Fatalf("elasticdl evaluate --backend=k8s exited %d:\n%s", evalCode, evalOut)
	}
	er := waitSucceeded(t, ev, 2*time.Minute)
	if er.Summary.Mode != "evaluate" || er.Summary.Eval == nil || r.Summary.Eval == nil {
		t.Fatalf("evaluate job summary %s", er.Raw)
	}
	if got, want := er.Summary.Eval.Accuracy, r.Summary.Eval.Accuracy; math.Abs(got-want) > 1e-9 || er.Summary.Eval.Records != 10000 {
		t.Errorf("evaluate job: accuracy %.4f on %d records, the training job's final evaluation %.4f", got, er.Summary.Eval.Records, want)
	} else {
		t.Logf("evaluate job on the saved model: accuracy %.4f, as the training job's", got)
	}

	// Deleting the master Job garbage-collects its pod and the summary
	// ConfigMap.
	kubectl(t, "delete", "job", "-n", ns, j.masterJob(), "--wait", "--timeout=30s")
	cm := "elasticdl-" + j.name + "-summary"
	took := waitFor(t, 30*time.Second, "the master pod and summary ConfigMap to be garbage-collected", func() (bool, string) {
		var x struct{ Metadata objectMeta }
		return !getJSON(t, &x, "configmap", "-n", ns, cm) && len(j.pods("master")) == 0, cm + " or a master pod still exists"
	})
	t.Logf("ConfigMap %s and the master pod collected %.1fs after the master Job was deleted", cm, took.Seconds())
}

// (b) A pod of higher priority that needs a worker's room preempts the
// worker; the job goes on with one worker; the relaunched worker waits
// Pending and joins when the pod is deleted.
//
// Two nodes of 2 CPU; master and PS 300m at elasticdl-high, workers 1200m at
// elasticdl-low: one worker fits per node whatever the placement, free room
// is at most 800m per node, so a 1-CPU pod must preempt exactly one worker.
func TestK8sPreemption(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-b", 2, "2", "4Gi")
	pc := uniqueName(t, "e2e-hog")
	kubectlApply(t, fmt.Sprintf("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: %s}\nvalue: 100000\n", pc))
	t.Cleanup(func() { kubectlCmd(context.Background(), "", "delete", "priorityclass", pc, "--ignore-not-found") })

	// (Not "preempt": the Events' messages name the job.)
	j := submit(t, ns, "prio", label,
		"--minibatch_size=8",
		"--worker_pod_priority=elasticdl-low",
		"--master_pod_priority=elasticdl-high",
		"--ps_pod_priority=elasticdl-high",
		"--master_resource_request=cpu=300m,memory=256Mi",
		"--ps_resource_request=cpu=300m,memory=256Mi",
		"--worker_resource_request=cpu=1200m,memory=256Mi",
	)
	ws := j.waitWorkers(30*time.Second, 2, 0)
	for _, w := range ws {
		if w.Spec.PriorityClassName != "elasticdl-low" || w.Spec.Priority == nil || *w.Spec.Priority != 100 {
			t.Errorf("worker %s: priorityClassName %q priority %v, want elasticdl-low (100)", w.Metadata.Name, w.Spec.PriorityClassName, w.Spec.Priority)
		}
	}
	j.waitTraining(30 * time.Second)

	runHog(t, ns, pc, label)
	j.waitWorkers(30*time.Second, 1, 1)
	waitFor(t, 20*time.Second, "an Event on the master pod about the preemption", func() (bool, string) {
		evs := j.events()
		var all []string
		for _, e := range evs {
			// Not the namespace's name, which has "preempt" in it.
			text := strings.ToLower(e.Reason + " " + strings.ReplaceAll(e.Message, ns, "NS"))
			if strings.Contains(text, "preempt") {
				t.Logf("master event: %s %s: %s", e.Type, e.Reason, e.Message)
				return true, ""
			}
			all = append(all, e.Reason+": "+e.Message)
		}
		return false, strings.Join(all, " | ")
	})

	// The job goes on with one worker for a while.
	j.trainsWithOneWorker(5 * time.Second)

	delAt := time.Now()
	kubectl(t, "delete", "pod", "-n", ns, "hog", "--wait=false")
	j.waitWorkers(30*time.Second, 2, 0)
	t.Logf("pending worker Running %.1fs after the high-priority pod was deleted", time.Since(delAt).Seconds())

	r := waitSucceeded(t, j, 4*time.Minute)
	assertTrained(t, r, 1, minAccuracy)
	if r.Summary.Workers.Lost < 1 || r.Summary.Workers.Relaunched < 1 {
		t.Errorf("summary workers %+v: want at least one lost (preempted) and relaunched", r.Summary.Workers)
	}
	for _, e := range j.events() {
		t.Logf("master event: %s %s: %s", e.Type, e.Reason, e.Message)
	}
}

// (c) A worker pod deleted with kubectl and the PS process killed with
// SIGKILL: both are relaunched and the job finishes exactly-once; then
// `elasticdl stop` removes the job.
func TestK8sWorkerDeletedPSKilled(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-c", 2, "4", "8Gi")
	j := submit(t, ns, "faults", label, "--minibatch_size=8")
	ws := j.waitWorkers(30*time.Second, 2, 0)
	j.waitTraining(30 * time.Second)

	victim := ws[0].Metadata.Name
	kubectl(t, "delete", "pod", "-n", ns, victim, "--wait=false")
	t.Logf("deleted worker pod %s", victim)

	var ps pod
	for _, p := range j.pods("ps") {
		if p.running() {
			ps = p
		}
	}
	if ps.Metadata.Name == "" {
		t.Fatalf("no running PS pod: %v", j.pods("ps"))
	}
	pid := containerPID(t, ps)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (PS pod %s): %v", pid, ps.Metadata.Name, err)
	}
	t.Logf("killed the process %d of PS pod %s with SIGKILL", pid, ps.Metadata.Name)

	waitFor(t, 30*time.Second, "a new PS pod Running and 2 workers Running without "+victim, func() (bool, string) {
		pss, wss := j.pods("ps"), j.pods("worker")
		newPS := false
		for _, p := range pss {
			if p.running() && p.Metadata.Name != ps.Metadata.Name {
				newPS = true
			}
		}
		n := 0
		for _, w := range wss {
			if w.running() && w.Metadata.Name != victim {
				n++
			}
		}
		return newPS && n == 2, fmt.Sprint(pss, wss)
	})
	t.Logf("%.1fs after submission: PS and worker relaunched", time.Since(j.submitted).Seconds())

	r := waitSucceeded(t, j, 4*time.Minute)
	assertTrained(t, r, 1, minAccuracy)
	if r.Summary.Workers.Relaunched < 1 || r.Summary.PS.Relaunched < 1 {
		t.Errorf("summary workers %+v ps %+v: want a worker and a PS relaunched", r.Summary.Workers, r.Summary.PS)
	}

	out, code, took := cli(t, nil, 60*time.Second, "stop", j.name, "--namespace", ns)
	if code != 0 {
		t.Fatalf("elasticdl stop exited %d:\n%s", code, out)
	}
	if ms := j.pods("master"); len(ms) != 0 || getJSON(t, &masterJobState{}, "job", "-n", ns, j.masterJob()) {
		t.Errorf("master Job or pods %v still there after elasticdl stop returned (%.1fs)", ms, took.Seconds())
	}
	waitFor(t, 30*time.Second, "the summary ConfigMap to be garbage-collected", func() (bool, string) {
		var x struct{ Metadata objectMeta }
		return !getJSON(t, &x, "configmap", "-n", ns, "elasticdl-"+j.name+"-summary"), "still there"
	})
}

// containerPID finds the process of a pod's first container on its process
// node: procnode writes the process group id (= the process's PID) to
// <root>/pods/<ns>_<pod>_<uid>/<container>.pgid.
func containerPID(t *testing.T, p pod) int {
	t.Helper()
	f := filepath.Join(rigState, "procnodes", p.Spec.NodeName, "pods",
		p.Metadata.Namespace+"_"+p.Metadata.Name+"_"+p.Metadata.UID, p.Spec.Containers[0].Name+".pgid")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatalf("pid of pod %s: %v", p.Metadata.Name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid of pod %s: %q in %s", p.Metadata.Name, b, f)
	}
	return pid
}

// (d) A job asking for 4 workers where only 2 fit starts at once with 2 (its
// first task trained within 10 s of submission) and grows to 4 when a node
// is added.
//
// One node of 3 CPU: master 500m + PS 500m + 2 workers of 1 CPU.
func TestK8sElasticStart(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-d", 1, "3", "8Gi")
	j := newJob(t, ns, "grow", label)
	metricsPort := j.masterPort + 4 // inside the job's block of 8 ports
	submitJob(t, j,
		fmt.Sprintf("--metrics_port=%d", metricsPort),
		"--num_workers=4",
		"--minibatch_size=8",
		"--master_resource_request=cpu=500m,memory=256Mi",
		"--ps_resource_request=cpu=500m,memory=256Mi",
		"--worker_resource_request=cpu=1,memory=256Mi",
	)
	j.waitWorkers(15*time.Second, 2, 2)
	// The master's metrics show the headroom: 2 workers running, 2 pending.
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	waitFor(t, 10*time.Second, "master metrics with 2 workers running and 2 pending", func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body := string(b)
		ok := strings.Contains(body, `elasticdl_master_instances{job="grow",role="worker",state="running"} 2`) &&
			strings.Contains(body, `elasticdl_master_instances{job="grow",role="worker",state="pending"} 2`)
		return ok, grepLines(body, "elasticdl_master_instances{")
	})
	// Room comes 10 s after submission: the first task must have been
	// trained by then, with half the workers.
	time.Sleep(time.Until(j.submitted.Add(10 * time.Second)))
	j.waitWorkers(time.Second, 2, 2)
	startProcNodesLabelled(t, "e2e-d-more", label, 1, "2", "8Gi")
	j.waitWorkers(30*time.Second, 4, 0)

	r := waitSucceeded(t, j, 4*time.Minute)
	assertTrained(t, r, 1, minAccuracy)
	if r.Summary.Workers.Launched < 4 || r.Summary.Workers.MaxRunning != 4 {
		t.Errorf("summary workers %+v: want 4 launched, 4 running at once", r.Summary.Workers)
	}
	if r.FirstTaskTrainedAt.IsZero() {
		t.Errorf("the summary has no first_task_trained_at: %s", r.Raw)
	} else {
		d := r.FirstTaskTrainedAt.Sub(j.submitted)
		t.Logf("first task trained %.2fs after submission", d.Seconds())
		if d > 10*time.Second {
			t.Errorf("first task trained %.2fs after submission, want within 10 s", d.Seconds())
		}
	}
}

// (e) Bad input gives a clear error, from the CLI or as the job's failure,
// never a hang.
func TestK8sBadInput(t *testing.T) {
	timeTest(t)
	label := startProcNodes(t, "e2e-e", 1, "4", "8Gi")

	// expect runs `elasticdl train` and wants either a non-zero exit within
	// 30 s whose output passes ok, or a submitted job that fails within 90 s
	// with a summary error or master log that passes ok.
	expect := func(t *testing.T, j *job, env []string, want string, ok func(string) bool, extra ...string) {
		t.Helper()
		j.submitted = time.Now()
		out, code, took := cli(t, env, 60*time.Second, jobArgs(j, extra...)...)
		j.submitEnd = time.Now()
		switch {
		case code == -1:
			t.Fatalf("elasticdl train still running after 60 s (want %s):\n%s", want, out)
		case code != 0:
			t.Logf("CLI exited %d after %.1fs:\n%s", code, took.Seconds(), tail(out, 10))
			if took > 30*time.Second {
				t.Errorf("the CLI took %.1fs to fail, want < 30 s", took.Seconds())
			}
			if !ok(out) {
				t.Errorf("the CLI's error does not name %s:\n%s", want, out)
			}
		default:
			t.Logf("CLI submitted the job (%.1fs):\n%s", took.Seconds(), tail(out, 5))
			r := waitJob(t, j, 90*time.Second)
			msg := r.Summary.Error + "\n" + j.podLog(j.masterPod())
			if r.Phase != "Failed" {
				t.Errorf("job ended %s, want Failed naming %s", r.Phase, want)
			}
			if !ok(r.Summary.Error) && !ok(msg) {
				t.Errorf("the job failed without naming %s; summary error %q; master log:\n%s", want, r.Summary.Error, tail(msg, 30))
			} else {
				t.Logf("summary error %q; master log:\n%s", r.Summary.Error, tail(j.podLog(j.masterPod()), 8))
			}
		}
	}
	contains := func(subs ...string) func(string) bool {
		return func(s string) bool {
			s = strings.ToLower(s)
			for _, sub := range subs {
				if strings.Contains(s, strings.ToLower(sub)) {
					return true
				}
			}
			return false
		}
	}

	t.Run("unknown master priority class", func(t *testing.T) {
		ns := newNamespace(t)
		expect(t, newJob(t, ns, "badmaster", label), nil, "the class",
			contains("e2e-no-such-master-class"), "--master_pod_priority=e2e-no-such-master-class")
	})
	t.Run("unknown worker priority class", func(t *testing.T) {
		ns := newNamespace(t)
		expect(t, newJob(t, ns, "badworker", label), nil, "the class",
			contains("e2e-no-such-worker-class"), "--worker_pod_priority=e2e-no-such-worker-class")
	})
	t.Run("namespace without RBAC objects", func(t *testing.T) {
		ns := newBareNamespace(t)
		expect(t, newJob(t, ns, "norbac", label), nil, "the missing ServiceAccount/RBAC",
			contains("serviceaccount", "service account", "rbac", "forbidden"))
	})
	t.Run("ServiceAccount without Role and RoleBinding", func(t *testing.T) {
		ns := newBareNamespace(t)
		kubectl(t, "create", "serviceaccount", "elasticdl", "-n", ns)
		expect(t, newJob(t, ns, "norole", label), nil, "the missing permission",
			contains("forbidden", "rbac", "permission"))
	})
	t.Run("gang job without deploy/rbac-gang.yaml", func(t *testing.T) {
		ns := newNamespace(t)
		j := newJob(t, ns, "nogang", label)
		expect(t, j, nil, "deploy/rbac-gang.yaml", contains("deploy/rbac-gang.yaml"), "--gang")
		if ps := j.pods("worker"); len(ps) != 0 {
			t.Errorf("a gang job that was never admitted launched workers: %v", ps)
		}
	})
	t.Run("training data missing in the pod", func(t *testing.T) {
		ns := newNamespace(t)
		j := newJob(t, ns, "nodata", label)
		missing := "/nonexistent/e2e-images-idx3-ubyte.gz"
		expect(t, j, nil, missing, contains(missing), "--training_data="+missing)
		var m pod
		if getJSON(t, &m, "pod", "-n", ns, j.masterPod()) && m.Metadata.Labels["status"] != "Failed" {
			t.Errorf("master pod of the failed job: label status=%q, want Failed", m.Metadata.Labels["status"])
		}
		out, code, _ := cli(t, nil, 30*time.Second, "status", j.name, "--namespace", ns)
		t.Logf("elasticdl status of the failed job (exit %d):\n%s", code, out)
		if !strings.Contains(out, "Failed") {
			t.Errorf("elasticdl status of a failed job does not say Failed:\n%s", out)
		}
	})
	t.Run("status, logs and stop of an unknown job", func(t *testing.T) {
		ns := newNamespace(t)
		for _, cmd := range []string{"status", "logs", "stop"} {
			out, code, took := cli(t, nil, 30*time.Second, cmd, "e2e-no-such-job", "--namespace", ns)
			if code != 1 || !strings.Contains(out, "no job e2e-no-such-job in namespace "+ns) && !strings.Contains(out, "not found") {
				t.Errorf("elasticdl %s of an unknown job: exit %d after %.1fs:\n%s", cmd, code, took.Seconds(), out)
			}
		}
	})
	t.Run("unreachable API server", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "kubeconfig")
		os.WriteFile(bad, []byte(`apiVersion: v1
kind: Config
clusters: [{name: nowhere, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: e2e}}]
contexts: [{name: c, context: {cluster: nowhere, user: u, namespace: default}}]
current-context: c
`), 0o600)
		ns := newNamespace(t)
		j := newJob(t, ns, "noapi", label)
		j.submitted = time.Now()
		for _, args := range [][]string{
			jobArgs(j),                              // $KUBECONFIG
			append(jobArgs(j), "--kubeconfig="+bad), // the flag
			{"status", j.name, "--namespace", ns, "--kubeconfig=" + bad},
		} {
			out, code, took := cli(t, []string{"KUBECONFIG=" + bad}, 60*time.Second, args...)
			t.Logf("elasticdl %s ... exited %d after %.1fs: %s", args[0], code, took.Seconds(), tail(out, 5))
			if code == 0 || code == -1 || took > 30*time.Second {
				t.Errorf("elasticdl %s with an unreachable API server: exit %d after %.1fs, want an error within 30 s", args[0], code, took.Seconds())
			}
			if !contains("127.0.0.1:1", "connection refused", "unreachable")(out) {
				t.Errorf("elasticdl %s: the error does not say the API server is unreachable:\n%s", args[0], out)
			}
		}
	})
}
