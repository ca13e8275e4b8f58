// Package e2e runs elasticdl jobs on a real Kubernetes control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler from hack/k8s-rig)
// whose pods run as local processes on process nodes (hack/k8s-rig/procnode).
// The job's manifests are the ones a real cluster gets; the image elasticdl:e2e
// is mapped to an elasticdl binary built by TestMain.
//
// The tests run only with ELASTICDL_E2E=1 (`make e2e`, hack/e2e.sh). TestMain
// builds elasticdl and the rig, starts the rig in its own state directory and
// ports, and stops it at the end; when a test failed, the state directory
// (component logs, every pod's log under procnodes/) is kept and named.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"testing"
)

const dataDir = "/usr/share/datasets/fashion-mnist"

// Set by TestMain.
var (
	repoRoot   string // the repository root
	elasticdl  string // the elasticdl binary under test (also what elasticdl:e2e maps to)
	websvc     string // the online service's web server (websvc:e2e maps to it)
	rigBin     string // bin dir of the rig: kubectl, ...
	rigState   string // K8S_RIG_STATE of the rig the tests use
	kubeconfig string // its admin kubeconfig
	rigEnv     []string
	k8sCLI     bool // elasticdl train has --backend=k8s flags (--image)
	testTimes  []string
)

// The rig's ports: away from the defaults (hack/k8s-rig/lib.sh) so that the
// e2e rig runs next to a developer's `make k8s-up` rig. ELASTICDL_E2E_PORT_BASE
// moves them all.
func portBase() int {
	if v, err := strconv.Atoi(os.Getenv("ELASTICDL_E2E_PORT_BASE")); err == nil && v > 0 {
		return v
	}
	return 20000
}

func rigPorts() map[string]int {
	base := portBase()
	return map[string]int{
		"K8S_RIG_ETCD_PORT":      base + 2379,
		"K8S_RIG_ETCD_PEER_PORT": base + 2380,
		"K8S_RIG_API_PORT":       base + 6443,
		"K8S_RIG_KCM_PORT":       base + 6457,
		"K8S_RIG_SCHED_PORT":     base + 6459,
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("ELASTICDL_E2E") != "1" {
		fmt.Println("e2e: set ELASTICDL_E2E=1 (make e2e)")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
}

func run(m *testing.M) (code int) {
	t0 := time.Now()
	wd, err := os.Getwd()
	if err != nil {
		logf("%v", err)
		return 1
	}
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	if _, err := os.Stat(filepath.Join(dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		logf("Fashion-MNIST is not installed (hack/deps.sh installs dataset-fashion-mnist): %v", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "elasticdl-e2e-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	keepTmp := false
	defer func() {
		if !keepTmp {
			os.RemoveAll(tmp)
		}
	}()

	// elasticdl, with the fastest BLAS here (as test/local does).
	elasticdl = filepath.Join(tmp, "bin", "elasticdl")
	tags, _ := exec.Command(filepath.Join(repoRoot, "hack", "blas-tags.sh")).Output()
	step := time.Now()
	build := exec.Command("go", "build", "-tags", strings.TrimSpace(string(tags)), "-o", elasticdl, "./cmd/elasticdl")
	build.Dir = repoRoot
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		logf("build elasticdl: %v", err)
		return 1
	}
	logf("built %s (tags %q) in %.1fs", elasticdl, strings.TrimSpace(string(tags)), time.Since(step).Seconds())
	websvc = filepath.Join(tmp, "bin", "websvc")
	build = exec.Command("go", "build", "-o", websvc, "./test/e2e/websvc")
	build.Dir = repoRoot
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		logf("build websvc: %v", err)
		return 1
	}
	help, _ := exec.Command(elasticdl, "train", "-h").CombinedOutput()
	if k8sCLI = strings.Contains(string(help), "-image"); !k8sCLI {
		logf("elasticdl train has no --image flag: the Kubernetes backend is missing, the job tests will fail")
	}

	// The rig's binaries (cached; ~7-12 min cold) and procnode.
	step = time.Now()
	out, err := script(nil, "hack/k8s-rig/build.sh")
	if err != nil {
		logf("hack/k8s-rig/build.sh: %v", err)
		return 1
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	rigBin = strings.TrimSpace(lines[len(lines)-1])
	if _, err := script(nil, "hack/k8s-rig/procnodes.sh", "--build"); err != nil {
		logf("hack/k8s-rig/procnodes.sh --build: %v", err)
		return 1
	}
	logf("rig binaries in %s (%.1fs)", rigBin, time.Since(step).Seconds())

	// A rig of our own: own state dir, own ports.
	rigState = filepath.Join(tmp, "rig")
	rigEnv = []string{"K8S_RIG_STATE=" + rigState, "K8S_RIG_BIN=" + rigBin}
	ports := rigPorts()
	// A run killed before it could stop its rig (go test -timeout, SIGKILL)
	// leaves it running on these ports: stop it if the run that started it
	// is gone. Its state dir and PID are in marker.
	marker := filepath.Join(os.TempDir(), fmt.Sprintf("elasticdl-e2e-%d.rig", ports["K8S_RIG_API_PORT"]))
	stopLeftoverRig(marker)
	for k, p := range ports {
		if !portFree(p) {
			logf("port %d (%s) is in use: another e2e run? Set ELASTICDL_E2E_PORT_BASE (default 20000) to move the rig's ports", p, k)
			return 1
		}
		rigEnv = append(rigEnv, fmt.Sprintf("%s=%d", k, p))
	}
	if err := os.WriteFile(marker, []byte(fmt.Sprintf("%d %s\n", os.Getpid(), rigState)), 0o644); err != nil {
		logf("%v", err)
		return 1
	}
	defer os.Remove(marker)
	down := func(failed bool) {
		env := []string{}
		if failed {
			env = append(env, "K8S_RIG_KEEP_STATE=1")
		}
		if _, err := script(env, "hack/k8s-rig/down.sh"); err != nil {
			logf("down.sh: %v", err)
		}
		if failed {
			keepTmp = true
			logf("a test failed: rig logs kept in %s/logs, pod logs in %s/procnodes/<node>/pods/<ns>_<pod>_<uid>/<container>.log", rigState, rigState)
		}
	}
	// Ctrl-C / SIGTERM of `go test`: stop the rig before dying.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		logf("got %v: stopping the rig", s)
		down(true)
		os.Exit(1)
	}()

	step = time.Now()
	out, err = script(nil, "hack/k8s-rig/up.sh")
	if err != nil {
		logf("hack/k8s-rig/up.sh: %v", err)
		down(true)
		return 1
	}
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "export KUBECONFIG="); ok {
			kubeconfig = v
		}
	}
	if kubeconfig == "" {
		logf("up.sh printed no export KUBECONFIG line: %q", out)
		down(true)
		return 1
	}
	logf("rig up in %.1fs: KUBECONFIG=%s", time.Since(step).Seconds(), kubeconfig)
	if out, err := kubectlCmd(context.Background(), "", "apply", "-f", filepath.Join(repoRoot, "deploy", "priority-classes.yaml")); err != nil {
		logf("apply deploy/priority-classes.yaml: %v\n%s", err, out)
		down(true)
		return 1
	}

	code = m.Run()
	signal.Stop(sig)
	down(code != 0)
	for _, l := range testTimes {
		logf("%s", l)
	}
	logf("whole e2e run (build, rig, tests) %.1fs", time.Since(t0).Seconds())
	return code
}

// script runs a repository script with the rig's environment plus env and
// returns its stdout; its stderr goes to ours.
func script(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(repoRoot, name), args...)
	cmd.Dir = repoRoot
	cmd.Env = append(append(os.Environ(), rigEnv...), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	return string(out), err
}

// stopLeftoverRig stops the rig named in marker ("PID STATE_DIR") when the
// process PID is gone. down.sh only signals processes whose command line
// names that state dir, so nothing else is touched.
func stopLeftoverRig(marker string) {
	b, err := os.ReadFile(marker)
	if err != nil {
		return
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		os.Remove(marker)
		return
	}
	if pid, err := strconv.Atoi(f[0]); err == nil && syscall.Kill(pid, 0) == nil {
		logf("e2e run %d (rig %s) is still running", pid, f[1])
		return
	}
	if _, err := os.Stat(f[1]); err == nil {
		logf("stopping the rig %s left by e2e run %s", f[1], f[0])
		cmd := exec.Command(filepath.Join(repoRoot, "hack/k8s-rig/down.sh"))
		cmd.Env = append(os.Environ(), "K8S_RIG_STATE="+f[1])
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			logf("down.sh %s: %v", f[1], err)
		}
		if dir := filepath.Dir(f[1]); strings.HasPrefix(filepath.Base(dir), "elasticdl-e2e-") {
			os.RemoveAll(dir)
		}
	}
	os.Remove(marker)
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// timeTest logs how long a test took, in the list TestMain prints at the end.
func timeTest(t *testing.T) {
	start := time.Now()
	t.Cleanup(func() {
		res := "PASS"
		if t.Failed() {
			res = "FAIL"
		} else if t.Skipped() {
			res = "SKIP"
		}
		testTimes = append(testTimes, fmt.Sprintf("%-32s %s %6.1fs", t.Name(), res, time.Since(start).Seconds()))
	})
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
