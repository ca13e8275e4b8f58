package e2e

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"elasticdl/internal/master"
)

// ---- kubectl ------------------------------------------------------------------------------
//
// The tests talk to the API server through the rig's kubectl (v1.35.4) and
// decode its JSON into the few fields they look at (types below), so the test
// package depends on nothing the main module does not.

// kubectlCmd runs kubectl with the rig's admin kubeconfig and returns stdout;
// an error carries stderr.
func kubectlCmd(ctx context.Context, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(rigBin, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlCmd(context.Background(), "", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func kubectlApply(t *testing.T, manifest string, args ...string) string {
	t.Helper()
	out, err := kubectlCmd(context.Background(), manifest, append([]string{"apply", "-f", "-"}, args...)...)
	if err != nil {
		t.Fatalf("%v\nmanifest:\n%s", err, manifest)
	}
	return out
}

// getJSON runs `kubectl get ARGS -o json` into v; found is false on NotFound.
func getJSON(t *testing.T, v any, args ...string) (found bool) {
	t.Helper()
	out, err := kubectlCmd(context.Background(), "", append(append([]string{"get"}, args...), "-o", "json")...)
	if err != nil {
		if strings.Contains(err.Error(), "NotFound") || strings.Contains(err.Error(), "not found") {
			return false
		}
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("decode kubectl get %v: %v", args, err)
	}
	return true
}

type ownerRef struct {
	Kind               string
	Name               string
	UID                string `json:"uid"`
	Controller         *bool
	BlockOwnerDeletion *bool
}

type objectMeta struct {
	Name              string
	Namespace         string
	UID               string `json:"uid"`
	Labels            map[string]string
	CreationTimestamp string
	DeletionTimestamp string
	OwnerReferences   []ownerRef
}

type envVar struct {
	Name      string
	Value     string
	ValueFrom *struct {
		FieldRef *struct{ FieldPath string }
	}
}

type container struct {
	Name      string
	Image     string
	Command   []string
	Args      []string
	Env       []envVar
	Resources struct{ Requests, Limits map[string]string }
}

type condition struct{ Type, Status, Reason, Message string }

type pod struct {
	Metadata objectMeta
	Spec     struct {
		NodeName           string
		PriorityClassName  string
		Priority           *int32
		NodeSelector       map[string]string
		ServiceAccountName string
		RestartPolicy      string
		Containers         []container
	}
	Status struct {
		Phase             string
		PodIP             string
		Reason, Message   string
		Conditions        []condition
		ContainerStatuses []struct {
			Name         string
			RestartCount int
			State        struct {
				Running    *struct{ StartedAt string }
				Terminated *struct {
					ExitCode        int
					Reason, Message string
				}
				Waiting *struct{ Reason, Message string }
			}
		}
	}
}

// running: phase Running and not being deleted.
func (p pod) running() bool { return p.Status.Phase == "Running" && p.Metadata.DeletionTimestamp == "" }

// unschedulable: Pending with PodScheduled=False.
func (p pod) unschedulable() bool {
	if p.Status.Phase != "Pending" || p.Spec.NodeName != "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == "PodScheduled" && c.Status == "False" {
			return true
		}
	}
	return false
}

func (p pod) String() string {
	s := fmt.Sprintf("%s(%s", p.Metadata.Name, p.Status.Phase)
	if p.Metadata.DeletionTimestamp != "" {
		s += ",deleting"
	}
	if p.unschedulable() {
		s += ",unschedulable"
	}
	if p.Spec.NodeName != "" {
		s += "@" + p.Spec.NodeName
	}
	return s + ")"
}

type podList struct{ Items []pod }

type service struct {
	Metadata objectMeta
	Spec     struct {
		Selector map[string]string
		Ports    []struct{ Port, TargetPort any }
	}
}

type event struct {
	Type, Reason, Message string
	InvolvedObject        struct{ Kind, Name string }
	Count                 int
}

// ---- namespaces -----------------------------------------------------------------------------

var nameRE = regexp.MustCompile(`[^a-z0-9-]+`)

func uniqueName(t *testing.T, prefix string) string {
	b := make([]byte, 3)
	rand.Read(b)
	base := strings.Trim(nameRE.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	base = strings.TrimPrefix(base, "test")
	if len(base) > 30 {
		base = base[:30]
	}
	return strings.Trim(prefix+"-"+strings.Trim(base, "-"), "-") + "-" + hex.EncodeToString(b)
}

// newBareNamespace creates a namespace with nothing of elasticdl in it; the
// test's Cleanup deletes it (without waiting: the job's pods are gone by then).
func newBareNamespace(t *testing.T) string {
	t.Helper()
	ns := uniqueName(t, "e2e")
	kubectl(t, "create", "namespace", ns)
	t.Cleanup(func() {
		if _, err := kubectlCmd(context.Background(), "", "delete", "namespace", ns, "--wait=false", "--ignore-not-found"); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return ns
}

// rbacManifest is deploy/rbac.yaml for namespace ns, as deploy/README.md applies it.
func rbacManifest(t *testing.T, ns string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "namespace: default", "namespace: "+ns)
}

// newNamespace creates a namespace with deploy/rbac.yaml applied.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := newBareNamespace(t)
	kubectlApply(t, rbacManifest(t, ns), "-n", ns)
	return ns
}

// ---- process nodes --------------------------------------------------------------------------

// startProcNodes starts n process nodes PREFIX-0..n-1 with cpu and mem
// (Kubernetes quantities), labelled e2e=PREFIX, whose containers of image
// elasticdl run the binary under test (and of image websvc, the web server
// of test/e2e/websvc). It returns the label value (use it
// as --node_selector=e2e=VALUE). Cleanup deletes the pods still on them,
// stops exactly these procnodes and deletes their Node objects.
func startProcNodes(t *testing.T, prefix string, n int, cpu, mem string) string {
	t.Helper()
	return startProcNodesLabelled(t, prefix, prefix, n, cpu, mem)
}

// startProcNodesLabelled is startProcNodes with another label value, to add
// nodes to an existing pool.
func startProcNodesLabelled(t *testing.T, prefix, label string, n int, cpu, mem string) string {
	t.Helper()
	start := time.Now()
	_, err := script([]string{
		"K8S_RIG_PROCNODE_PREFIX=" + prefix,
		"K8S_RIG_PROCNODE_IMAGE_MAP=elasticdl=" + elasticdl + ",websvc=" + websvc,
		"K8S_RIG_PROCNODE_ARGS=--labels e2e=" + label,
	}, "hack/k8s-rig/procnodes.sh", fmt.Sprint(n), cpu, mem)
	if err != nil {
		t.Fatalf("procnodes.sh %d %s %s (prefix %s): %v", n, cpu, mem, prefix, err)
	}
	t.Logf("%d process node(s) %s-0..%d (cpu=%s memory=%s, label e2e=%s) Ready in %.1fs", n, prefix, n-1, cpu, mem, label, time.Since(start).Seconds())
	t.Cleanup(func() {
		for i := 0; i < n; i++ {
			node := fmt.Sprintf("%s-%d", prefix, i)
			if _, err := kubectlCmd(context.Background(), "", "delete", "pods", "-A", "--field-selector", "spec.nodeName="+node,
				"--wait", "--timeout=40s"); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
		if _, err := script(nil, "hack/k8s-rig/procnodes.sh", "--stop-prefix", prefix); err != nil {
			t.Logf("cleanup: procnodes.sh --stop-prefix %s: %v", prefix, err)
		}
	})
	return label
}

// ---- jobs -----------------------------------------------------------------------------------

// job is one elasticdl job submitted with `elasticdl train --backend=k8s`.
type job struct {
	t                    *testing.T
	ns, name, label      string
	masterPort, psPort   int
	submitted, submitEnd time.Time
	cliOutput            string
	output               string // --output: a temp dir (pods run on this machine)
}

// masterJob is the name of the batch/v1 Job that runs the job's master.
func (j *job) masterJob() string { return "elasticdl-" + j.name + "-master" }

// masterPod is the name of the job's newest master pod (the one running
// the job, or that ran it last); "" while there is none.
func (j *job) masterPod() string {
	ps := j.pods("master")
	if len(ps) == 0 {
		return ""
	}
	slices.SortStableFunc(ps, func(a, b pod) int {
		return cmp.Or(cmp.Compare(b.Metadata.CreationTimestamp, a.Metadata.CreationTimestamp), cmp.Compare(b.Metadata.Name, a.Metadata.Name))
	})
	return ps[0].Metadata.Name
}

// masterJobState is the job's master Job, as waitJob reads it.
type masterJobState struct {
	Metadata objectMeta
	Status   struct {
		Active, Failed, Succeeded int
		Conditions                []condition
	}
}

// ended is "Succeeded" or "Failed" once the Job has ended, else "".
func (m masterJobState) ended() string {
	for _, c := range m.Status.Conditions {
		if c.Status != "True" {
			continue
		}
		switch c.Type {
		case "Complete":
			return "Succeeded"
		case "Failed":
			return "Failed"
		}
	}
	return ""
}

var (
	portMu   sync.Mutex
	nextPort int // 0: not yet chosen
)

// freePortBlock returns the first of n consecutive free ports on 127.0.0.1:
// all pods of all tests share the loopback address.
func freePortBlock(n int) int {
	portMu.Lock()
	defer portMu.Unlock()
	if nextPort == 0 {
		// Below the ephemeral range (32768-60999) for the default port
		// base, so no outgoing connection takes a job's port meanwhile.
		nextPort = portBase() + 8000
	}
	for {
		base := nextPort
		nextPort += 10
		ok := true
		for p := base; p < base+n; p++ {
			if !portFree(p) {
				ok = false
				break
			}
		}
		if ok {
			return base
		}
	}
}

// jobArgs returns `train --backend=k8s ...` for a job on the nodes labelled
// e2e=label: fashion_mnist.mlp, 1 epoch, 2 workers, 1 PS, small tasks, small
// resource requests, ports of its own. extra flags replace defaults of the
// same name.
func jobArgs(j *job, extra ...string) []string {
	ns, name, label := j.ns, j.name, j.label
	defaults := []string{
		"--backend=k8s",
		"--image=elasticdl:e2e",
		"--namespace=" + ns,
		"--job_name=" + name,
		"--ps_host=127.0.0.1",
		"--master_host=127.0.0.1",
		"--node_selector=e2e=" + label,
		fmt.Sprintf("--master_port=%d", j.masterPort),
		fmt.Sprintf("--ps_port=%d", j.psPort),
		"--model_def=fashion_mnist.mlp",
		"--training_data=" + dataDir + "/train-images-idx3-ubyte.gz",
		"--validation_data=" + dataDir + "/t10k-images-idx3-ubyte.gz",
		"--output=" + j.output,
		"--num_workers=2",
		"--num_ps_pods=1",
		"--num_epochs=1",
		"--minibatch_size=16",
		"--num_minibatches_per_task=4",
		"--log_interval=2s",
		"--master_resource_request=cpu=250m,memory=256Mi",
		"--ps_resource_request=cpu=250m,memory=256Mi",
		"--worker_resource_request=cpu=500m,memory=256Mi",
	}
	flagName := func(a string) string {
		a = strings.TrimLeft(a, "-")
		if i := strings.IndexByte(a, '='); i >= 0 {
			a = a[:i]
		}
		return a
	}
	override := map[string]bool{}
	for _, a := range extra {
		override[flagName(a)] = true
	}
	args := []string{"train"}
	for _, a := range defaults {
		if !override[flagName(a)] {
			args = append(args, a)
		}
	}
	return append(args, extra...)
}

// cli runs the elasticdl binary under test with KUBECONFIG set to the rig's
// admin kubeconfig (plus env), and returns its output (stdout+stderr), exit
// code and how long it ran. It is killed after limit.
func cli(t *testing.T, env []string, limit time.Duration, args ...string) (out string, code int, took time.Duration) {
	t.Helper()
	var buf bytes.Buffer
	code, took = runCLI(t, env, limit, &buf, &buf, args)
	return buf.String(), code, took
}

// cliStdout is cli with stdout and stderr apart (for --yaml).
func cliStdout(t *testing.T, limit time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code, _ = runCLI(t, nil, limit, &o, &e, args)
	return o.String(), e.String(), code
}

// runCLI runs elasticdl; code is -1 when it was killed after limit.
func runCLI(t *testing.T, env []string, limit time.Duration, stdout, stderr io.Writer, args []string) (code int, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, elasticdl, args...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig), env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		code = -1
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run elasticdl %v: %v", args, err)
	}
	return code, took
}

// needK8sCLI fails a test that needs `elasticdl train --backend=k8s` when
// the binary under test has no Kubernetes backend.
func needK8sCLI(t *testing.T) {
	t.Helper()
	if !k8sCLI {
		t.Fatal("elasticdl train -h lists no --image flag: no Kubernetes backend (internal/cluster/k8s, cli) in this build")
	}
}

// newJob prepares a job on the nodes labelled e2e=label in namespace ns and
// registers its Cleanup: on failure a dump of the job's pods, events and
// logs; then the master pod is deleted and the job's pods are waited for.
func newJob(t *testing.T, ns, name, label string) *job {
	t.Helper()
	needK8sCLI(t)
	base := freePortBlock(8)
	// TempDir first: its removal must come after the job's pods are gone.
	j := &job{t: t, ns: ns, name: name, label: label, masterPort: base, psPort: base + 1, output: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			j.dump()
		}
		j.delete()
	})
	return j
}

// submit submits a job with `elasticdl train --backend=k8s` (see jobArgs) and
// fails the test if the CLI does.
func submit(t *testing.T, ns, name, label string, extra ...string) *job {
	t.Helper()
	j := newJob(t, ns, name, label)
	submitJob(t, j, extra...)
	return j
}

// submitJob is submit for a job made with newJob (whose ports the caller
// may need first).
func submitJob(t *testing.T, j *job, extra ...string) {
	t.Helper()
	j.submitted = time.Now()
	out, code, took := cli(t, nil, 60*time.Second, jobArgs(j, extra...)...)
	j.submitEnd = time.Now()
	j.cliOutput = out
	if code != 0 {
		t.Fatalf("elasticdl train --backend=k8s exited %d after %.1fs:\n%s", code, took.Seconds(), out)
	}
	t.Logf("submitted job %s in %s in %.2fs: %s", j.name, j.ns, took.Seconds(), tail(out, 6))
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// dump logs what there is to know about a job that failed a test.
func (j *job) dump() {
	t := j.t
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "==== dump of job %s in %s\n", j.name, j.ns)
	if out, err := kubectlCmd(ctx, "", "get", "pods,services,configmaps", "-n", j.ns, "-o", "wide", "--show-labels"); err == nil {
		b.WriteString(out)
	} else {
		fmt.Fprintln(&b, err)
	}
	if out, err := kubectlCmd(ctx, "", "get", "events", "-n", j.ns, "--sort-by=.lastTimestamp"); err == nil {
		b.WriteString("---- events\n" + tail(out, 60) + "\n")
	}
	if out, err := kubectlCmd(ctx, "", "get", "job", "-n", j.ns, j.masterJob(), "-o", "yaml"); err == nil {
		b.WriteString("---- master Job\n" + tail(out, 40) + "\n")
	}
	b.WriteString("---- master log (last 80 lines)\n" + tail(j.podLog(j.masterPod()), 80) + "\n")
	files, _ := filepath.Glob(filepath.Join(rigState, "procnodes", "*", "pods", j.ns+"_elasticdl-"+j.name+"-*", "*.log"))
	for _, f := range files {
		if strings.Contains(f, "-master_") {
			continue
		}
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "---- %s (last 15 lines)\n%s\n", f, tail(string(data), 15))
	}
	t.Log(b.String())
}

// delete stops the job (deletes the master Job) and waits until its pods are gone.
func (j *job) delete() {
	t := j.t
	ctx := context.Background()
	if _, err := kubectlCmd(ctx, "", "delete", "job", "-n", j.ns, j.masterJob(), "--cascade=foreground", "--ignore-not-found", "--wait", "--timeout=40s"); err != nil {
		t.Logf("cleanup: %v", err)
	}
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		out, err := kubectlCmd(ctx, "", "get", "pods", "-n", j.ns, "-l", "elasticdl.io/job-name="+j.name, "-o", "name")
		if err != nil || strings.TrimSpace(out) == "" {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("cleanup: pods of job %s still there 40 s after its master Job was deleted", j.name)
}

// podLog returns a pod's log: kubectl logs while the pod exists, else the
// file its procnode wrote.
func (j *job) podLog(name string) string {
	if out, err := kubectlCmd(context.Background(), "", "logs", "-n", j.ns, name, "--tail=400"); err == nil {
		return out
	}
	files, _ := filepath.Glob(filepath.Join(rigState, "procnodes", "*", "pods", j.ns+"_"+name+"_*", "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}

// jobPods lists the job's pods of a replica type (master, worker, ps).
func jobPods(t *testing.T, ns, name, replicaType string) []pod {
	t.Helper()
	var l podList
	getJSON(t, &l, "pods", "-n", ns, "-l",
		"app.kubernetes.io/name=elasticdl,elasticdl.io/job-name="+name+",elasticdl.io/replica-type="+replicaType)
	return l.Items
}

func (j *job) pods(replicaType string) []pod { return jobPods(j.t, j.ns, j.name, replicaType) }

func countRunning(ps []pod) (running, unschedulable int) {
	for _, p := range ps {
		if p.running() {
			running++
		}
		if p.unschedulable() {
			unschedulable++
		}
	}
	return
}

// events returns the events about the job's master Job (the master's
// own, and the Job controller's).
func (j *job) events() []event {
	var l struct{ Items []event }
	getJSON(j.t, &l, "events", "-n", j.ns, "--field-selector", "involvedObject.kind=Job,involvedObject.name="+j.masterJob())
	return l.Items
}

// jobResult is how a job ended.
type jobResult struct {
	Phase   string // of the master Job: Succeeded (Complete) or Failed
	Summary master.Summary
	Raw     string // the summary JSON; empty when there is no summary ConfigMap
	// FirstTaskTrainedAt is the summary's first_task_trained_at (zero if absent).
	FirstTaskTrainedAt time.Time
	Took               time.Duration // from submission to the end of the master pod
}

// waitJob waits for the master Job to end (Complete or Failed) and returns
// the summary from ConfigMap elasticdl-JOB-summary, key job_summary.json.
// On timeout it fails the test with the master's log.
func waitJob(t *testing.T, j *job, timeout time.Duration) jobResult {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var mj masterJobState
	for {
		if getJSON(t, &mj, "job", "-n", j.ns, j.masterJob()) {
			if mj.ended() != "" {
				break
			}
		} else if time.Since(j.submitEnd) > 30*time.Second {
			t.Fatalf("master Job %s/%s does not exist 30 s after the job was submitted", j.ns, j.masterJob())
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not finish within %s (master Job %+v); master log:\n%s",
				j.name, timeout, mj.Status, tail(j.podLog(j.masterPod()), 60))
		}
		time.Sleep(time.Second)
	}
	r := jobResult{Phase: mj.ended(), Took: time.Since(j.submitted)}
	var cm struct{ Data map[string]string }
	if getJSON(t, &cm, "configmap", "-n", j.ns, "elasticdl-"+j.name+"-summary") {
		r.Raw = cm.Data["job_summary.json"]
		if r.Raw == "" {
			t.Fatalf("ConfigMap elasticdl-%s-summary has no key job_summary.json (keys: %v)", j.name, keys(cm.Data))
		}
		if err := json.Unmarshal([]byte(r.Raw), &r.Summary); err != nil {
			t.Fatalf("decode job_summary.json: %v\n%s", err, r.Raw)
		}
		var extra struct {
			FirstTaskTrainedAt string `json:"first_task_trained_at"`
		}
		json.Unmarshal([]byte(r.Raw), &extra)
		if extra.FirstTaskTrainedAt != "" {
			ts, err := time.Parse(time.RFC3339Nano, extra.FirstTaskTrainedAt)
			if err != nil {
				t.Errorf("first_task_trained_at %q is not RFC3339: %v", extra.FirstTaskTrainedAt, err)
			}
			r.FirstTaskTrainedAt = ts
		}
	}
	t.Logf("job %s ended %s %.1fs after submission: %s", j.name, r.Phase, r.Took.Seconds(), summaryLine(r.Summary))
	return r
}

// waitSucceeded is waitJob that requires a succeeded job with a summary.
func waitSucceeded(t *testing.T, j *job, timeout time.Duration) jobResult {
	t.Helper()
	r := waitJob(t, j, timeout)
	if r.Phase != "Succeeded" || r.Raw == "" || r.Summary.Status != "succeeded" {
		t.Fatalf("job %s: master Job %s, summary status %q error %q (summary present: %v); master log:\n%s",
			j.name, r.Phase, r.Summary.Status, r.Summary.Error, r.Raw != "", tail(j.podLog(j.masterPod()), 60))
	}
	return r
}

func summaryLine(s master.Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status=%s", s.Status)
	if s.Error != "" {
		fmt.Fprintf(&b, " error=%q", s.Error)
	}
	for _, e := range s.Epochs {
		fmt.Fprintf(&b, " epoch%d=%d/%d(twice %d, missed %d)", e.Epoch, e.RecordsTrained, e.Records, e.RecordsTrainedTwice, e.RecordsMissed)
	}
	if s.Eval != nil {
		fmt.Fprintf(&b, " accuracy=%.4f", s.Eval.Accuracy)
	}
	fmt.Fprintf(&b, " workers=%+v ps=%+v tasks=%+v duration=%.1fs", s.Workers, s.PS, s.Tasks, s.DurationSeconds)
	return b.String()
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// assertTrained checks exactly-once training of every epoch and the final
// test accuracy.
func assertTrained(t *testing.T, r jobResult, epochs int, minAccuracy float64) {
	t.Helper()
	s := r.Summary
	if len(s.Epochs) != epochs {
		t.Errorf("summary has %d epochs, want %d: %s", len(s.Epochs), epochs, r.Raw)
	}
	for _, e := range s.Epochs {
		if e.Records != 60000 || e.RecordsTrained != e.Records || e.RecordsTrainedTwice != 0 || e.RecordsMissed != 0 {
			t.Errorf("epoch %d is not exactly-once: records %d, trained %d, twice %d, missed %d",
				e.Epoch, e.Records, e.RecordsTrained, e.RecordsTrainedTwice, e.RecordsMissed)
		}
	}
	if s.Eval == nil {
		t.Errorf("summary has no final evaluation: %s", r.Raw)
	} else if s.Eval.Accuracy < minAccuracy || s.Eval.Records != 10000 {
		t.Errorf("final evaluation: accuracy %.4f on %d records, want >= %.2f on 10000", s.Eval.Accuracy, s.Eval.Records, minAccuracy)
	}
}

// waitFor polls cond every 250 ms until it returns true; after timeout it
// fails the test with what and cond's last description.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		ok, desc := cond()
		if ok {
			return time.Since(start)
		}
		last = desc
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitWorkers waits until the job has `running` worker pods Running and
// `unschedulable` Pending unschedulable ones.
func (j *job) waitWorkers(timeout time.Duration, running, unschedulable int) []pod {
	j.t.Helper()
	var ps []pod
	took := waitFor(j.t, timeout, fmt.Sprintf("%d worker pods Running and %d unschedulable", running, unschedulable), func() (bool, string) {
		ps = j.pods("worker")
		r, u := countRunning(ps)
		return r == running && u == unschedulable, fmt.Sprint(ps)
	})
	j.t.Logf("%.1fs after submission: %v (waited %.1fs)", time.Since(j.submitted).Seconds(), ps, took.Seconds())
	return ps
}

// waitTraining waits until the master's log reports training progress (a
// progress line with records done > 0).
var progressRE = regexp.MustCompile(`records_done=([1-9][0-9]*)`)

// recordsDoneRE reads a progress line's records done over all epochs.
var recordsDoneRE = regexp.MustCompile(`records_done=([0-9]+)`)

// recordsDone is the records trained, over all epochs, as of the master's
// last progress line.
func (j *job) recordsDone() int64 {
	m := recordsDoneRE.FindAllStringSubmatch(j.podLog(j.masterPod()), -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(m[len(m)-1][1], 10, 64)
	return n
}

func (j *job) waitTraining(timeout time.Duration) {
	j.t.Helper()
	waitFor(j.t, timeout, "the master to report training progress", func() (bool, string) {
		l := j.podLog(j.masterPod())
		return progressRE.MatchString(l), tail(l, 3)
	})
	j.t.Logf("%.1fs after submission: training in progress", time.Since(j.submitted).Seconds())
}

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
