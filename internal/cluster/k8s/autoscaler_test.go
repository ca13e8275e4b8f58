package k8s

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"elasticdl/internal/autoscale"
	"elasticdl/internal/cluster"
)

func testNode(name, cpu string, ready bool) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Gi")},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}},
	}}
}

func autoscaledMasterJob(ns, job string, lo, hi int, request string) *batchv1.Job {
	pod := NewPod("", ns, JobLabels(job, ReplicaMaster), PodSettings{Image: "img"}, []string{"master"}, nil)
	mj := NewMasterJob(job, ns, pod)
	mj.Annotations = map[string]string{AnnotationMinWorkers: itoa(lo), AnnotationMaxWorkers: itoa(hi), AnnotationWorkerRequest: request}
	return mj
}

func itoa(n int) string { return strconv.Itoa(n) }

func requesting(p *corev1.Pod, cpu string, node string, priority int32) *corev1.Pod {
	p.Spec.NodeName, p.Spec.Priority = node, &priority
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}
	return p
}

// TestAutoscalerRound: the autoscaler reads the jobs' bounds from their
// master Jobs and the room other pods leave, and sets each job's target
// annotation; an ended job and one without bounds are left alone.
func TestAutoscalerRound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ended := autoscaledMasterJob("ns", "old", 1, 4, "cpu=1")
	ended.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	unbounded := autoscaledMasterJob("ns", "manual", 1, 4, "cpu=1")
	unbounded.Annotations = nil
	garbled := autoscaledMasterJob("ns", "garbled", 1, 4, "cpu=lots")
	// team/b's pods may go only to nodes of a pool the cluster lacks.
	pooled := autoscaledMasterJob("team", "b", 2, 8, "cpu=1,memory=1Gi")
	pooled.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "gpu"}
	worker := jobPod("elasticdl-a-worker-0", string(cluster.Worker), "0", corev1.PodRunning)
	worker.Labels[LabelJob] = "a"
	service := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "svc"}}
	waiting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: "svc"}}
	cs := fake.NewClientset(
		testNode("n0", "4", true), testNode("n1", "4", true), testNode("down", "4", false),
		autoscaledMasterJob("ns", "a", 1, 8, "cpu=1,memory=1Gi"), pooled, ended, unbounded, garbled,
		requesting(worker, "1", "n0", 100),
		requesting(service, "1", "n0", 1000), // bound: its room is taken
		requesting(waiting, "1", "", 1000),   // waiting, higher priority: placed first
	)
	c := NewClient(cs, 5*time.Second)
	all := informers.NewSharedInformerFactory(cs, 0)
	var logged strings.Builder
	a := &autoscaler{c: c, log: slog.New(slog.NewTextHandler(&logged, nil)), warned: map[string]bool{}, nodes: all.Core().V1().Nodes().Lister(), pods: all.Core().V1().Pods().Lister(), jobs: all.Batch().V1().Jobs().Lister()}
	reg := prometheus.NewRegistry()
	var err error
	if a.metrics, err = newAutoscalerMetrics(reg); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	all.Start(stop)
	defer all.Shutdown()
	defer close(stop) // before Shutdown, which waits for the informers
	if !cache.WaitForCacheSync(ctx.Done(), all.Core().V1().Nodes().Informer().HasSynced, all.Core().V1().Pods().Informer().HasSynced, all.Batch().V1().Jobs().Informer().HasSynced) {
		t.Fatal("informers not synced")
	}
	ds, err := a.round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// What a decision starts from (logged with --verbose): the service's
	// CPU on n0, besides the job's worker; the waiting service pod.
	_, _, usage, err := a.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := usage.others["n0"].MilliCPU; got != 1000 || usage.othersWaiting != 1 || len(usage.others) != 1 {
		t.Errorf("room used on n0 %d mCPU, %d waiting, nodes %v; want the service's 1000 and 1 waiting", got, usage.othersWaiting, usage.others)
	}
	// The metrics: 8 CPUs schedulable, 1 used by the worker, 1 by the
	// service, 1 service pod waiting.
	for _, c := range []struct {
		metric *prometheus.GaugeVec
		labels []string
		want   float64
	}{
		{a.metrics.capacity, []string{"cpu"}, 8},
		{a.metrics.requested, []string{"cpu", kindTraining}, 1},
		{a.metrics.requested, []string{"cpu", kindServices}, 1},
		{a.metrics.utilization, []string{"cpu"}, 0.25},
		{a.metrics.pending, []string{kindServices}, 1},
		{a.metrics.pending, []string{kindTraining}, 0},
		{a.metrics.target, []string{"ns/a"}, 6},
		{a.metrics.workers, []string{"ns/a", "bound"}, 1},
		{a.metrics.workers, []string{"team/b", "pending"}, 0},
	} {
		if got := testutil.ToFloat64(c.metric.WithLabelValues(c.labels...)); got != c.want {
			t.Errorf("metric %v = %v, want %v", c.labels, got, c.want)
		}
	}
	// 8 CPUs on the ready nodes, 2 for the service: 6 workers, all for
	// ns/a, as team/b's node selector matches no node (its minimum, unplaced).
	got := map[string]autoscale.Decision{}
	for _, d := range ds {
		got[d.Key] = d
	}
	if len(got) != 2 || got["ns/a"].Target != 6 || got["team/b"].Target != 2 || got["team/b"].Placed != 0 {
		t.Fatalf("decisions %+v, want ns/a at 6 and team/b at 2 with none placed", ds)
	}
	for ns, job := range map[string]string{"ns": "a", "team": "b"} {
		mj, err := cs.BatchV1().Jobs(ns).Get(ctx, MasterName(job), metav1.GetOptions{})
		if want := strconv.Itoa(got[ns+"/"+job].Target); err != nil || mj.Annotations[AnnotationTargetWorkers] != want {
			t.Errorf("job %s/%s target annotation %q, %v; want %s", ns, job, mj.Annotations[AnnotationTargetWorkers], err, want)
		}
	}
	if n := strings.Count(logged.String(), "bounds cannot be read"); n != 1 || !strings.Contains(logged.String(), "ns/elasticdl-garbled-master") {
		t.Errorf("the garbled job warned %d times, want once:\n%s", n, logged.String())
	}
	a.round(ctx) // said once
	if n := strings.Count(logged.String(), "bounds cannot be read"); n != 1 {
		t.Errorf("the garbled job warned %d times after two rounds, want once", n)
	}
	for _, job := range []string{"old", "manual", "garbled"} {
		mj, _ := cs.BatchV1().Jobs("ns").Get(ctx, MasterName(job), metav1.GetOptions{})
		if _, ok := mj.Annotations[AnnotationTargetWorkers]; ok {
			t.Errorf("job %s was given a target", job)
		}
	}
}

// TestAutoscalerIsStable: the same cluster gets the same targets in every
// round, whatever order the listers return it in. Two equal jobs share 5
// workers' room: the odd worker stays with one job (before the snapshot
// was sorted it moved between them, a worker let go and one launched at
// each move).
func TestAutoscalerIsStable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	objs := []runtime.Object{testNode("n0", "2", true), testNode("n1", "2", true), testNode("n2", "1", true)}
	for _, name := range []string{"d", "a", "c", "b", "e", "f"} {
		objs = append(objs, autoscaledMasterJob("ns-"+name, name, 0, 8, "cpu=1"))
	}
	cs := fake.NewClientset(objs...)
	all := informers.NewSharedInformerFactory(cs, 0)
	a := &autoscaler{c: NewClient(cs, 5*time.Second), log: slog.New(slog.DiscardHandler), warned: map[string]bool{},
		nodes: all.Core().V1().Nodes().Lister(), pods: all.Core().V1().Pods().Lister(), jobs: all.Batch().V1().Jobs().Lister()}
	stop := make(chan struct{})
	all.Start(stop)
	defer all.Shutdown()
	defer close(stop)
	if !cache.WaitForCacheSync(ctx.Done(), all.Core().V1().Nodes().Informer().HasSynced, all.Batch().V1().Jobs().Informer().HasSynced, all.Core().V1().Pods().Informer().HasSynced) {
		t.Fatal("informers not synced")
	}
	var first []autoscale.Decision
	for round := range 50 {
		s, _, _, err := a.snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(s.Jobs); i++ {
			if s.Jobs[i-1].Key >= s.Jobs[i].Key {
				t.Fatalf("round %d: jobs out of order: %s before %s", round, s.Jobs[i-1].Key, s.Jobs[i].Key)
			}
		}
		for i := 1; i < len(s.Nodes); i++ {
			if s.Nodes[i-1].Name >= s.Nodes[i].Name {
				t.Fatalf("round %d: nodes out of order: %s before %s", round, s.Nodes[i-1].Name, s.Nodes[i].Name)
			}
		}
		ds := autoscale.Decide(s)
		if first == nil {
			first = ds
			continue
		}
		if !slices.Equal(ds, first) {
			t.Fatalf("round %d: targets %+v, round 0 %+v: the same cluster, other targets", round, ds, first)
		}
	}
}

// TestAutoscalerReactsToChanges: with a long interval, a change in the
// cluster (a node added, a service pod waiting) still moves the targets
// within the settle time, not at the next interval.
func TestAutoscalerReactsToChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := fake.NewClientset(testNode("n0", "4", true), autoscaledMasterJob("ns", "a", 1, 8, "cpu=1"))
	c := NewClient(cs, 5*time.Second)
	done := make(chan error, 1)
	go func() {
		done <- c.RunAutoscaler(ctx, AutoscalerConfig{Interval: time.Hour, Settle: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	}()
	target := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mj, err := cs.BatchV1().Jobs("ns").Get(ctx, MasterName("a"), metav1.GetOptions{})
			if err == nil && mj.Annotations[AnnotationTargetWorkers] == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("target %q, want %s", mj.Annotations[AnnotationTargetWorkers], want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	target("4") // the first round
	if _, err := cs.CoreV1().Nodes().Create(ctx, testNode("n1", "4", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	target("8")
	web := requesting(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "svc"}}, "3", "", 1000)
	if _, err := cs.CoreV1().Pods("svc").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	target("5")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
