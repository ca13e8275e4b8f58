package e2e

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

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
// resource requests, ports of its own, TLS on (--tls=false with
// ELASTICDL_E2E_TLS=false). extra flags replace defaults of the same name.
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
	if os.Getenv("ELASTICDL_E2E_TLS") == "false" {
		// Until every role speaks TLS: the jobs' own flags still win.
		defaults = append(defaults, "--tls=false")
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
