package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestK8sDashboard opens a job's dashboard with `elasticdl dashboard JOB`,
// which port-forwards through the API server to the master pod (the
// process node's kubelet API dials the pod's port), and reads api/job
// through it. It then deletes the master pod: the same local URL answers
// from the next master pod (a new boot), whose events still hold the first
// master's, then `resumed`: the history came back from its ConfigMap. On
// the rig --via=proxy cannot work (the API server does not proxy to the
// loopback pod IPs of process nodes), and a user without pods/portforward
// is told to try it: both are one-line errors.
func TestK8sDashboard(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-dash", 1, "4", "8Gi")
	j := newJob(t, ns, "dash", label)
	// Pods share the host's network: a port of the job's own, not 8042.
	submitJob(t, j, "--minibatch_size=8", "--num_epochs=2", fmt.Sprintf("--dashboard_port=%d", j.masterPort+7))
	j.waitTraining(60 * time.Second)

	d := startDashboardCLI(t, j.name, "--namespace="+ns, fmt.Sprintf("--port=%d", freePortBlock(1)))
	var first dashJob
	waitFor(t, 30*time.Second, "api/job with the job's 2 workers running", func() (bool, string) {
		err := getDashJSON(d.url+"api/job", &first)
		return err == nil && first.Job == j.name && first.Workers.Running == 2, fmt.Sprintf("%+v %v", first, err)
	})
	t.Logf("%s api/job: boot %s, phase %s, workers %+v", d.url, first.Boot, first.Phase, first.Workers)
	waitFor(t, 30*time.Second, "the history ConfigMap", func() (bool, string) {
		_, err := kubectlCmd(context.Background(), "", "get", "configmap", "-n", ns, "elasticdl-"+j.name+"-master-history")
		return err == nil, fmt.Sprint(err)
	})

	old := j.masterPod()
	kubectl(t, "delete", "pod", "-n", ns, old, "--wait=false")
	var next dashJob
	took := waitFor(t, 2*time.Minute, "the same URL to answer from the next master", func() (bool, string) {
		err := getDashJSON(d.url+"api/job", &next)
		return err == nil && next.Boot != first.Boot && next.Job == j.name, fmt.Sprintf("%+v %v", next, err)
	})
	t.Logf("master pod %s deleted: %s answers from boot %s %.1fs later (%s)", old, d.url, next.Boot, took.Seconds(),
		strings.TrimSpace(grepLines(d.stderr(), "forwarding")))
	// The restored history is published first, `resumed` a tick later.
	waitFor(t, 30*time.Second, "the first master's events (its 3 launches), then `resumed`", func() (bool, string) {
		var ev struct {
			Events []struct {
				Seq  int
				Kind string
			}
		}
		if err := getDashJSON(d.url+"api/events", &ev); err != nil {
			return false, err.Error()
		}
		launched := 0
		for _, e := range ev.Events {
			switch e.Kind {
			case "launched":
				launched++
			case "resumed":
				return launched >= 3, fmt.Sprintf("%+v", ev.Events)
			}
		}
		return false, fmt.Sprintf("%+v", ev.Events)
	})

	out, code, _ := cli(t, nil, 60*time.Second, "dashboard", j.name, "--namespace="+ns, "--via=proxy")
	if code != 1 || !strings.Contains(out, "does not proxy to pod") || !strings.Contains(out, "use --via=port-forward") {
		t.Errorf("--via=proxy on the rig: exit %d: %s", code, out)
	}
	viewer := viewerKubeconfig(t, ns)
	out, code, _ = cli(t, []string{"KUBECONFIG=" + viewer}, 60*time.Second, "dashboard", j.name, "--namespace="+ns, "--kubeconfig="+viewer)
	if code != 1 || !strings.Contains(out, "forbidden (RBAC: create pods/portforward") || !strings.Contains(out, "try --via=proxy") {
		t.Errorf("without pods/portforward: exit %d: %s", code, out)
	}
}

// dashJob is what the test reads of api/job.
type dashJob struct {
	Boot, Job, Phase string
	Workers          struct{ Running, Pending int }
}

func getDashJSON(url string, v any) error {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// dashboardCLI is `elasticdl dashboard` running: its URL and its stderr.
type dashboardCLI struct {
	url string
	mu  sync.Mutex
	err bytes.Buffer
}

func (d *dashboardCLI) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err.Write(p)
}

func (d *dashboardCLI) stderr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err.String()
}

// startDashboardCLI runs `elasticdl dashboard ARGS` until the test ends
// and waits for the URL it prints.
func startDashboardCLI(t *testing.T, args ...string) *dashboardCLI {
	t.Helper()
	d := &dashboardCLI{}
	cmd := exec.Command(elasticdl, append([]string{"dashboard"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stderr = d
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("elasticdl dashboard's stderr:\n%s", tail(d.stderr(), 30))
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "dashboard url="); ok {
				urls <- u
			}
		}
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatalf("elasticdl dashboard %v printed no URL: %s", args, d.stderr())
		}
		d.url = u
	case <-time.After(60 * time.Second):
		t.Fatalf("elasticdl dashboard %v: no URL after 60 s: %s", args, d.stderr())
	}
	return d
}

// viewerKubeconfig is a kubeconfig for a ServiceAccount of ns that may
// read pods and jobs but not port-forward (nor proxy).
func viewerKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	kubectlApply(t, fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: viewer, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: viewer, namespace: %[1]s}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list]}
- {apiGroups: [batch], resources: [jobs], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: viewer, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: viewer}
subjects: [{kind: ServiceAccount, name: viewer, namespace: %[1]s}]
`, ns))
	token := strings.TrimSpace(kubectl(t, "create", "token", "viewer", "-n", ns))
	var cfg struct {
		Clusters []struct {
			Cluster struct {
				Server string
				CA     string `json:"certificate-authority-data"`
			}
		}
	}
	if err := json.Unmarshal([]byte(kubectl(t, "config", "view", "--raw", "--minify", "-o", "json")), &cfg); err != nil || len(cfg.Clusters) != 1 {
		t.Fatalf("the admin kubeconfig: %v", err)
	}
	c := cfg.Clusters[0].Cluster
	path := filepath.Join(t.TempDir(), "viewer.kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: rig, cluster: {server: %q, certificate-authority-data: %q}}]\n"+
		"users: [{name: viewer, user: {token: %q}}]\ncontexts: [{name: viewer, context: {cluster: rig, user: viewer, namespace: %q}}]\ncurrent-context: viewer\n",
		c.Server, c.CA, token, ns)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
