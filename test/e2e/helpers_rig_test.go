package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

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
