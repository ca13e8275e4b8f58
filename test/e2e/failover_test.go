package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/proctest"
)

// TestK8sMasterKilled kills -9 the master process inside its pod while the
// job trains. The pod's first process keeps the master's port and starts a
// new master in place; it resumes from the state ConfigMap and adopts the
// worker and PS pods (found by label: the same pods, none relaunched), and
// the job finishes with every record trained exactly once.
func TestK8sMasterKilled(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-f", 2, "4", "8Gi")
	j := submit(t, ns, "failover", label, "--minibatch_size=8")
	j.waitWorkers(30*time.Second, 2, 0)
	j.waitTraining(30 * time.Second)

	uids := map[string]string{}
	for _, p := range append(j.pods("worker"), j.pods("ps")...) {
		uids[p.Metadata.Name] = p.Metadata.UID
	}
	var mp pod
	if !getJSON(t, &mp, "pod", "-n", ns, j.masterPod()) {
		t.Fatal("no master pod")
	}
	first := masterProcess(t, mp)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 the master %d: %v", first, err)
	}
	killed := time.Now()
	t.Logf("killed the master process %d in pod %s", first, mp.Metadata.Name)
	waitFor(t, 30*time.Second, "a new master process in the same pod", func() (bool, string) {
		ms := proctest.Children(containerPID(t, mp), "master")
		return len(ms) == 1 && ms[0].Pid != first, fmt.Sprint(ms)
	})
	// Still the same pods, and training goes on under the new master.
	for _, p := range append(j.pods("worker"), j.pods("ps")...) {
		if uid, ok := uids[p.Metadata.Name]; !ok || uid != p.Metadata.UID {
			t.Errorf("pod %s (uid %s) is new: the master relaunched instead of adopting (before: %v)", p.Metadata.Name, p.Metadata.UID, uids)
		}
	}
	r := waitSucceeded(t, j, 4*time.Minute)
	assertTrained(t, r, 1, minAccuracy)
	s := r.Summary
	if s.MasterRestarts != 1 || len(s.Failovers) != 1 || s.Failovers[0].FirstTaskAt == nil {
		t.Fatalf("master_restarts %d, failovers %+v: want one takeover that handed out work", s.MasterRestarts, s.Failovers)
	}
	if s.Workers.Launched != 2 || s.Workers.Lost != 0 || s.PS.Launched != 1 || s.PS.Lost != 0 {
		t.Errorf("workers %+v, ps %+v: want the 2 workers and the PS adopted, none lost or relaunched", s.Workers, s.PS)
	}
	t.Logf("kill -> new master resumed %.2fs, -> first task handed out %.2fs",
		s.Failovers[0].ResumedAt.Sub(killed).Seconds(), s.Failovers[0].FirstTaskAt.Sub(killed).Seconds())
}

// TestK8sMasterPodLost deletes the master pod while the job trains, then
// evicts the master pod that replaced it. Each time the master hands the
// job over (its state saved) and exits, and the master's Job starts a new
// master pod, which resumes from the state ConfigMap and adopts the worker
// and PS pods: the same pods, as the Job, not the master pod, owns them.
// The job finishes with every record trained exactly once. The deletion
// counts against the Job's limit of failed master pods; the eviction (a
// DisruptionTarget) does not.
func TestK8sMasterPodLost(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-g", 2, "4", "8Gi")
	j := submit(t, ns, "podlost", label, "--minibatch_size=8", "--num_epochs=2")
	j.waitWorkers(30*time.Second, 2, 0)
	j.waitTraining(30 * time.Second)

	uids := map[string]string{}
	for _, p := range append(j.pods("worker"), j.pods("ps")...) {
		uids[p.Metadata.Name] = p.Metadata.UID
	}
	sameInstances := func(when string) {
		t.Helper()
		ps := append(j.pods("worker"), j.pods("ps")...)
		for _, p := range ps {
			if uid, ok := uids[p.Metadata.Name]; !ok || uid != p.Metadata.UID {
				t.Errorf("%s: pod %s (uid %s) is new: the master relaunched instead of adopting (before: %v)", when, p.Metadata.Name, p.Metadata.UID, uids)
			}
		}
		if len(ps) != len(uids) {
			t.Errorf("%s: pods %v, want the %d adopted", when, ps, len(uids))
		}
	}
	failedMasters := func() int {
		var mj masterJobState
		getJSON(t, &mj, "job", "-n", ns, j.masterJob())
		return mj.Status.Failed
	}
	// lose ends the master pod by how, and returns the one that replaces
	// it once it trains.
	lose := func(how string, end func(name string)) string {
		t.Helper()
		old := j.masterPod()
		before := j.recordsDone()
		lostAt := time.Now()
		end(old)
		var next string
		replaced := waitFor(t, 90*time.Second, "a new master pod Running after "+how, func() (bool, string) {
			ms := j.pods("master")
			for _, m := range ms {
				if m.Metadata.Name != old && m.running() {
					next = m.Metadata.Name
					return true, ""
				}
			}
			return false, fmt.Sprint(ms)
		})
		training := waitFor(t, 60*time.Second, "training under the new master", func() (bool, string) {
			n := j.recordsDone()
			return n > before, fmt.Sprintf("%d records done, %d before", n, before)
		})
		t.Logf("%s master pod %s: %s Running %.1fs later, training %.1fs after that", how, old, next, replaced.Seconds(), training.Seconds())
		if took := time.Since(lostAt); took > time.Minute {
			t.Logf("the master was away %.0fs, longer than the workers wait for it", took.Seconds())
		}
		sameInstances("after " + how)
		return next
	}

	lose("deleted", func(name string) { kubectl(t, "delete", "pod", "-n", ns, name, "--wait=false") })
	if n := failedMasters(); n != 1 {
		t.Errorf("the Job counts %d failed master pods after the deletion, want 1", n)
	}
	lose("evicted", func(name string) {
		eviction := fmt.Sprintf(`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":%q,"namespace":%q}}`, name, ns)
		if out, err := kubectlCmd(context.Background(), eviction, "create", "--raw", "/api/v1/namespaces/"+ns+"/pods/"+name+"/eviction", "-f", "-"); err != nil {
			t.Fatalf("evict %s: %v: %s", name, err, out)
		}
	})
	if n := failedMasters(); n != 1 {
		t.Errorf("the Job counts %d failed master pods after the eviction, want still 1 (evictions are not the master's failures)", n)
	}

	r := waitSucceeded(t, j, 5*time.Minute)
	assertTrained(t, r, 2, minAccuracy)
	s := r.Summary
	if s.MasterRestarts != 2 || len(s.Failovers) != 2 || s.Failovers[0].FirstTaskAt == nil || s.Failovers[1].FirstTaskAt == nil {
		t.Fatalf("master_restarts %d, failovers %+v: want two takeovers that handed out work", s.MasterRestarts, s.Failovers)
	}
	for i, f := range s.Failovers {
		t.Logf("takeover %d: resumed → first task handed out %.2fs", i+1, f.FirstTaskAt.Sub(f.ResumedAt).Seconds())
	}
	if s.Workers.Launched != 2 || s.Workers.Lost != 0 || s.PS.Launched != 1 || s.PS.Lost != 0 {
		t.Errorf("workers %+v, ps %+v: want the 2 workers and the PS adopted, none lost or relaunched", s.Workers, s.PS)
	}
	reasons := map[string]int{}
	for _, e := range j.events() {
		reasons[e.Reason]++
	}
	if reasons["MasterHandedOver"] != 2 || reasons["MasterResumed"] != 2 {
		t.Errorf("events about the master Job %v: want MasterHandedOver and MasterResumed twice each", reasons)
	}
	out, code, _ := cli(t, nil, 30*time.Second, "status", j.name, "--namespace", ns)
	if code != 0 || !strings.Contains(out, "1 master pods lost") || !strings.Contains(out, "taken over 2 times") || strings.Contains(out, "EndpointSlice") {
		t.Errorf("elasticdl status exited %d, want it to count 1 master pod lost (the eviction is not), 2 takeovers, and only the Job's Events:\n%s", code, out)
	}
	out, code, _ = cli(t, nil, 30*time.Second, "logs", j.name, "--namespace", ns)
	if code != 0 || !strings.Contains(out, "resuming the job") {
		t.Errorf("elasticdl logs exited %d, want the log of the last master, which resumed:\n%s", code, tail(out, 10))
	}
}

// masterProcess is the PID of the master process in master pod p (a child
// of the pod's first process).
func masterProcess(t *testing.T, p pod) int {
	t.Helper()
	var pid int
	waitFor(t, 10*time.Second, "the master process", func() (bool, string) {
		ms := proctest.Children(containerPID(t, p), "master")
		if len(ms) != 1 {
			return false, fmt.Sprint(ms)
		}
		pid = ms[0].Pid
		return true, ""
	})
	return pid
}

// TestK8sStateStoreFencing: the state ConfigMap admits one master. A
// second master that opens it takes it over with what the first saved, and
// the first one's next save fails with ErrFenced instead of overwriting
// the newer state.
func TestK8sStateStoreFencing(t *testing.T) {
	timeTest(t)
	ns := newBareNamespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	self := standInMasterPod(ctx, t, ns, "m")
	a, err := self.OpenStateStore(ctx, "j", "master-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := a.Load(ctx); ok {
		t.Fatal("a new store has state")
	}
	if err := a.Save(ctx, []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(ctx, []byte(`{"n":2}`)); err != nil {
		t.Fatal(err)
	}
	b, err := self.OpenStateStore(ctx, "j", "master-b")
	if err != nil {
		t.Fatal(err)
	}
	if data, ok, _ := b.Load(ctx); !ok || string(data) != `{"n":2}` {
		t.Fatalf("the new master loads %q, %v; want the last save", data, ok)
	}
	if err := b.Save(ctx, []byte(`{"n":3}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(ctx, []byte(`{"n":99}`)); !errors.Is(err, k8s.ErrFenced) {
		t.Fatalf("the stale master's save: %v, want ErrFenced", err)
	}
	var cm struct{ Data map[string]string }
	getJSON(t, &cm, "configmap", "-n", ns, k8s.StateConfigMapName("j"))
	if cm.Data[k8s.StateKey] != `{"n":3}` {
		t.Fatalf("state %q, want the new master's", cm.Data[k8s.StateKey])
	}
	// The state deleted under a master (by hand, or with its owner): it
	// stops rather than write a state nobody will resume.
	kubectl(t, "delete", "configmap", "-n", ns, k8s.StateConfigMapName("j"))
	if err := b.Save(ctx, []byte(`{"n":4}`)); !errors.Is(err, k8s.ErrFenced) || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("save after the ConfigMap was deleted: %v, want ErrFenced saying it is gone", err)
	}
}

// standInMasterPod creates pod name in ns, which never runs, to own what a
// master made in a test process (as its own pod would).
func standInMasterPod(ctx context.Context, t *testing.T, ns, name string) *k8s.MasterPod {
	t.Helper()
	kubectlApply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  nodeSelector: {e2e: nowhere}
  containers: [{name: c, image: busybox:e2e}]
`, name, ns))
	c, err := k8s.Connect(kubeconfig, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	self, err := c.MasterPod(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return self
}
