package k8s

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"elasticdl/internal/autoscale"
	"elasticdl/internal/autoscale/rounds"
	"elasticdl/internal/cluster"
)

// TestAutoscalerRoundReports: each round tells Rounds what it saw — the
// capacity, the services' CPU and pods waiting, every job's CPU (all its
// pods bound to the capacity), workers and decision — and the targets it
// changed: from the annotation, or the maximum while none is set; a
// target written that equals the job's maximum, and one that could not be
// written, are no change.
func TestAutoscalerRoundReports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a5 := autoscaledMasterJob("ns", "a", 1, 8, "cpu=1")
	a5.Annotations[AnnotationTargetWorkers] = "5"
	pod := func(job, role, name, cpu, node string, priority int32) *corev1.Pod {
		p := jobPod(name, role, "0", corev1.PodRunning)
		p.Labels[LabelJob] = job
		return requesting(p, cpu, node, priority)
	}
	cs := fake.NewClientset(testNode("n0", "4", true), testNode("n1", "4", true), testNode("down", "4", false),
		a5, autoscaledMasterJob("ns", "b", 1, 2, "cpu=1"), autoscaledMasterJob("ns", "c", 1, 8, "cpu=1"),
		pod("a", string(cluster.Worker), "a-w0", "1", "n0", 100),
		pod("a", string(cluster.Worker), "a-w1", "1", "", 100),     // waiting: pending, no CPU
		pod("a", ReplicaMaster, "a-master", "250m", "n0", 1000),    // every pod of the job counts
		pod("a", string(cluster.PS), "a-ps", "250m", "down", 1000), // not on the capacity
		requesting(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "svc"}}, "1500m", "n1", 1000),
		requesting(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: "svc"}}, "500m", "", 1000),
	)
	cs.PrependReactor("patch", "jobs", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.(k8stesting.PatchAction).GetName() == MasterName("c") {
			return true, nil, errors.New("refused")
		}
		return false, nil, nil
	})
	var got []rounds.Round
	a := syncedAutoscaler(ctx, t, cs)
	a.rounds = func(r rounds.Round) { got = append(got, r) }
	ds, err := a.round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(ds) != 3 {
		t.Fatalf("rounds %+v, decisions %+v; want one round, three decisions", got, ds)
	}
	r := got[0]
	if r.CapacityCPU != 8 || r.ServicesCPU != 1.5 || r.PendingServicePods != 1 || r.At.IsZero() {
		t.Errorf("round %+v: want capacity 8, services 1.5 with 1 pod waiting", r)
	}
	want := map[string]rounds.Job{
		"ns/a": {Key: "ns/a", Min: 1, Max: 8, Running: 1, Pending: 1, CPU: 1.25},
		"ns/b": {Key: "ns/b", Min: 1, Max: 2},
		"ns/c": {Key: "ns/c", Min: 1, Max: 8},
	}
	for i, j := range r.Jobs {
		w := want[j.Key]
		w.Target, w.Placed, w.Reason = ds[i].Target, ds[i].Placed, ds[i].Reason
		if j != w || j.Reason == "" {
			t.Errorf("job %+v, want %+v", j, w)
		}
	}
	if ds[0].Target == 5 || ds[1].Target != 2 {
		t.Fatalf("decisions %+v: the test wants ns/a moved off 5 and ns/b at its maximum", ds)
	}
	wantChange := rounds.Change{At: r.At, Job: "ns/a", From: 5, To: ds[0].Target, Reason: ds[0].Reason}
	if len(r.Changes) != 1 || r.Changes[0] != wantChange {
		t.Errorf("changes %+v, want %+v", r.Changes, wantChange)
	}
	// The informer sees the first round's patch in its own time; the
	// second round must read the target it wrote, or it reports 5 → N again.
	written := strconv.Itoa(ds[0].Target)
	err = wait.PollUntilContextCancel(ctx, time.Millisecond, true, func(context.Context) (bool, error) {
		j, err := a.jobs.Jobs("ns").Get(MasterName("a"))
		return err == nil && j.Annotations[AnnotationTargetWorkers] == written, nil
	})
	if err != nil {
		t.Fatalf("the informer never saw ns/a's target %s: %v", written, err)
	}
	if _, err := a.round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got[1].Changes) != 0 {
		t.Errorf("second round's changes %+v, want none", got[len(got)-1].Changes)
	}
}

// syncedAutoscaler is an autoscaler on cs whose informers have synced.
func syncedAutoscaler(ctx context.Context, t *testing.T, cs *fake.Clientset) *autoscaler {
	t.Helper()
	all := informers.NewSharedInformerFactory(cs, 0)
	a := &autoscaler{c: NewClient(cs, 5*time.Second), log: slog.New(slog.DiscardHandler), warned: map[string]bool{},
		nodes: all.Core().V1().Nodes().Lister(), pods: all.Core().V1().Pods().Lister(), jobs: all.Batch().V1().Jobs().Lister()}
	stop := make(chan struct{})
	all.Start(stop)
	t.Cleanup(all.Shutdown)
	t.Cleanup(func() { close(stop) }) // before Shutdown, which waits for the informers
	if !cache.WaitForCacheSync(ctx.Done(), all.Core().V1().Nodes().Informer().HasSynced, all.Core().V1().Pods().Informer().HasSynced, all.Batch().V1().Jobs().Informer().HasSynced) {
		t.Fatal("informers not synced")
	}
	return a
}

func TestPreviousTarget(t *testing.T) {
	cases := []struct {
		annotation string
		set        bool
		want       int
	}{
		{"", false, 8},
		{"3", true, 3},
		{"0", true, 0},
		{"lots", true, 8},
		{"-1", true, 8},
	}
	for _, c := range cases {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if c.set {
			j.Annotations[AnnotationTargetWorkers] = c.annotation
		}
		if got := previousTarget(j, 8); got != c.want {
			t.Errorf("annotation %q (set %v): previous target %d, want %d", c.annotation, c.set, got, c.want)
		}
	}
}

// TestNewRound: cores from millicores; each decision's job with its
// workers and CPU.
func TestNewRound(t *testing.T) {
	u := newClusterUsage()
	u.addNode(autoscale.Node{Name: "n0", Allocatable: autoscale.Resources{MilliCPU: 3500}, Schedulable: true})
	u.addNode(autoscale.Node{Name: "off", Allocatable: autoscale.Resources{MilliCPU: 4000}})
	u.addPod(autoscale.Pod{Node: "n0", Request: autoscale.Resources{MilliCPU: 700}}, false, "")
	u.addPod(autoscale.Pod{Request: autoscale.Resources{MilliCPU: 300}}, false, "")
	u.addPod(autoscale.Pod{Node: "n0", Request: autoscale.Resources{MilliCPU: 1000}, Job: "ns/a"}, true, "ns/a")
	u.addPod(autoscale.Pod{Node: "n0", Request: autoscale.Resources{MilliCPU: 250}}, true, "ns/a")
	u.addPod(autoscale.Pod{Request: autoscale.Resources{MilliCPU: 1000}, Job: "ns/a"}, true, "ns/a")
	u.addPod(autoscale.Pod{Node: "off", Request: autoscale.Resources{MilliCPU: 1000}, Job: "ns/a"}, true, "ns/a")
	at := time.Unix(100, 0)
	changes := []rounds.Change{{At: at, Job: "ns/a", From: 1, To: 2, Reason: "room"}}
	r := newRound(at, u, []autoscale.Job{{Key: "ns/a", Min: 1, Max: 4}, {Key: "ns/b", Max: 2}},
		[]autoscale.Decision{{Key: "ns/a", Target: 2, Placed: 2, Reason: "room"}, {Key: "ns/b", Target: 1, Reason: "min-unfit"}}, changes)
	want := rounds.Round{At: at, CapacityCPU: 3.5, ServicesCPU: 0.7, PendingServicePods: 1, Changes: changes, Jobs: []rounds.Job{
		// Running: bound anywhere; CPU: only on the capacity.
		{Key: "ns/a", Min: 1, Max: 4, Target: 2, Placed: 2, Running: 2, Pending: 1, CPU: 1.25, Reason: "room"},
		{Key: "ns/b", Max: 2, Target: 1, Reason: "min-unfit"},
	}}
	if r.At != want.At || r.CapacityCPU != want.CapacityCPU || r.ServicesCPU != want.ServicesCPU || r.PendingServicePods != want.PendingServicePods ||
		len(r.Jobs) != 2 || r.Jobs[0] != want.Jobs[0] || r.Jobs[1] != want.Jobs[1] || len(r.Changes) != 1 || r.Changes[0] != changes[0] {
		t.Errorf("round %+v\nwant %+v", r, want)
	}
}
