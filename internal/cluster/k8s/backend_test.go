package k8s

// These tests drive the backend's own logic (retries, stuck pods, event
// order) with client-go's fake clientset; the behaviour against a real API
// server, scheduler and kubelet is tested in test/e2e.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"elasticdl/internal/cluster"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// deleteCollections makes client's collection deletes of pods delete what
// their selector selects (the fake clientset answers them doing nothing),
// after the reactors the test prepends.
func deleteCollections(client *fake.Clientset) {
	client.AddReactor("delete-collection", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		dc := a.(k8stesting.DeleteCollectionAction)
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		obj, err := client.Tracker().List(gvr, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, dc.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		for _, p := range obj.(*corev1.PodList).Items {
			if dc.GetListRestrictions().Labels.Matches(labels.Set(p.Labels)) {
				if err := client.Tracker().Delete(gvr, p.Namespace, p.Name); err != nil {
					return true, nil, err
				}
			}
		}
		return true, nil, nil
	})
}

func newFakeBackend(t *testing.T, client *fake.Clientset, clock *fakeClock) *Backend {
	t.Helper()
	deleteCollections(client)
	// The fake clientset does not replay what was created between an
	// informer's List and its Watch (kubernetes/kubernetes#95372): a pod
	// launched then gave no event. So the backend is returned only once
	// its informer's watch is open (the fake's own reactor, then a signal).
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(watching) })
		return true, w, nil
	})
	b, err := New(context.Background(), Config{
		Client: client, Namespace: "ns", JobName: "j", PSPort: 2222,
		Worker: PodSettings{Image: "img"}, PS: PodSettings{Image: "img"},
		SyncTimeout: 5 * time.Second, StuckTimeout: time.Minute, Now: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		b.Close(ctx)
	})
	select {
	case <-watching:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's pod informer did not watch within 5 s")
	}
	return b
}

func nextEvent(t *testing.T, b *Backend) cluster.Event {
	t.Helper()
	select {
	case ev := <-b.Events():
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
	}
	return cluster.Event{}
}

func setStatus(t *testing.T, client *fake.Clientset, name string, st corev1.PodStatus) {
	t.Helper()
	p, err := client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = st
	if _, err := client.CoreV1().Pods("ns").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestEventsFollowThePod(t *testing.T) {
	client := fake.NewClientset()
	b := newFakeBackend(t, client, &fakeClock{now: time.Unix(0, 0)})
	ctx := context.Background()
	if err := b.Launch(ctx, cluster.InstanceSpec{Role: cluster.PS, ID: 0, Index: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services("ns").Get(ctx, "elasticdl-j-ps-0", metav1.GetOptions{}); err != nil {
		t.Fatalf("PS service: %v", err)
	}
	if ev := nextEvent(t, b); ev.Phase != cluster.Pending || ev.Role != cluster.PS {
		t.Fatalf("first event %+v, want PS pending", ev)
	}
	// Scheduled, then running: the event names the node.
	p, err := client.CoreV1().Pods("ns").Get(ctx, "elasticdl-j-ps-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.NodeName = "node-a"
	if _, err := client.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	setStatus(t, client, "elasticdl-j-ps-0", corev1.PodStatus{Phase: corev1.PodRunning})
	if ev := nextEvent(t, b); ev.Phase != cluster.Running || ev.Node != "node-a" {
		t.Fatalf("event %+v, want running on node-a", ev)
	}
	setStatus(t, client, "elasticdl-j-ps-0", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}})
	ev := nextEvent(t, b)
	if ev.Phase != cluster.Exited || ev.Reason != cluster.OOMKilled || ev.ExitCode != 137 || ev.Requested {
		t.Fatalf("event %+v, want an OOM-killed exit", ev)
	}
	// Later updates and the deletion of an exited pod say nothing more.
	if err := client.CoreV1().Pods("ns").Delete(ctx, "elasticdl-j-ps-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-b.Events():
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestStopIsRequested(t *testing.T) {
	client := fake.NewClientset()
	b := newFakeBackend(t, client, &fakeClock{now: time.Unix(0, 0)})
	ctx := context.Background()
	if err := b.Launch(ctx, cluster.InstanceSpec{Role: cluster.Worker, ID: 3, Index: 1}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, b) // pending
	if err := b.Stop(ctx, cluster.Worker, 3); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, b)
	if ev.Phase != cluster.Exited || !ev.Requested || ev.ID != 3 || ev.Index != 1 {
		t.Fatalf("event %+v, want a requested exit of worker 3 in slot 1", ev)
	}
	if err := b.Stop(ctx, cluster.Worker, 99); err == nil {
		t.Error("Stop of an unknown instance succeeded")
	}
}

func TestStuckPodIsFailed(t *testing.T) {
	client := fake.NewClientset()
	clock := &fakeClock{now: time.Unix(0, 0)}
	b := newFakeBackend(t, client, clock)
	ctx := context.Background()
	if err := b.Launch(ctx, cluster.InstanceSpec{Role: cluster.Worker, ID: 0}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, b) // pending
	pull := func(reason string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "no such image"}}}}}
	}
	setStatus(t, client, "elasticdl-j-worker-0", pull("ErrImagePull"))
	// The clock moves only once the handler has seen the update.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b.mu.Lock()
		seen := !b.instances[instanceKey{cluster.Worker, 0}].stuckSince.IsZero()
		b.mu.Unlock()
		if seen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stuck pod was not noticed")
		}
	}
	clock.advance(30 * time.Second)
	setStatus(t, client, "elasticdl-j-worker-0", pull("ImagePullBackOff"))
	select {
	case ev := <-b.Events():
		t.Fatalf("failed after 30 s: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
	clock.advance(31 * time.Second)
	setStatus(t, client, "elasticdl-j-worker-0", pull("ErrImagePull"))
	ev := nextEvent(t, b)
	if ev.Phase != cluster.Exited || ev.Reason != cluster.Failed || ev.Requested {
		t.Fatalf("event %+v, want a failed exit", ev)
	}
	if want := "pod stuck for 1m1s: ErrImagePull: no such image"; ev.Message != want {
		t.Errorf("message %q, want %q", ev.Message, want)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := client.CoreV1().Pods("ns").Get(ctx, "elasticdl-j-worker-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("stuck pod not deleted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestUnschedulableIsNotStuck(t *testing.T) {
	client := fake.NewClientset()
	clock := &fakeClock{now: time.Unix(0, 0)}
	b := newFakeBackend(t, client, clock)
	if err := b.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 0}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, b)
	st := corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}}}
	for range 3 {
		setStatus(t, client, "elasticdl-j-worker-0", st)
		clock.advance(time.Hour)
	}
	select {
	case ev := <-b.Events():
		t.Fatalf("an unschedulable pod was reported: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestLaunchRetriesTransientErrors(t *testing.T) {
	client := fake.NewClientset()
	var calls atomic.Int32
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) <= 2 {
			return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "create", 0)
		}
		return false, nil, nil
	})
	b := newFakeBackend(t, client, &fakeClock{now: time.Unix(0, 0)})
	if err := b.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 0}); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d create calls, want 3", n)
	}
}

func TestLaunchFailsFastWhenForbidden(t *testing.T) {
	client := fake.NewClientset()
	var calls atomic.Int32
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", nil)
	})
	b := newFakeBackend(t, client, &fakeClock{now: time.Unix(0, 0)})
	err := b.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 0})
	if !apierrors.IsForbidden(err) || calls.Load() != 1 {
		t.Fatalf("Launch = %v after %d calls, want forbidden after 1", err, calls.Load())
	}
	// The failed launch is forgotten: the ID may be launched again.
	client.ReactionChain = client.ReactionChain[1:]
	if err := b.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 0}); err != nil {
		t.Fatalf("second Launch: %v", err)
	}
}

func TestCloseDeletesTheJob(t *testing.T) {
	client := fake.NewClientset()
	b := newFakeBackend(t, client, &fakeClock{now: time.Unix(0, 0)})
	ctx := context.Background()
	for _, s := range []cluster.InstanceSpec{{Role: cluster.PS, ID: 0}, {Role: cluster.Worker, ID: 0}, {Role: cluster.Worker, ID: 1, Index: 1}} {
		if err := b.Launch(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.Close(cctx); err != nil {
		t.Fatal(err)
	}
	exits := 0
	for ev := range b.Events() {
		if ev.Phase == cluster.Exited {
			exits++
			if !ev.Requested {
				t.Errorf("exit %+v not marked requested", ev)
			}
		}
	}
	if exits != 3 {
		t.Errorf("%d exits reported, want 3", exits)
	}
	pods, _ := client.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
	svcs, _ := client.CoreV1().Services("ns").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 0 || len(svcs.Items) != 0 {
		t.Errorf("left behind: %d pods, %d services", len(pods.Items), len(svcs.Items))
	}
	if err := b.Launch(ctx, cluster.InstanceSpec{Role: cluster.Worker, ID: 9}); err == nil {
		t.Error("Launch after Close succeeded")
	}
}

// countVerbs counts the pod actions of client by verb.
func countVerbs(client *fake.Clientset) map[string]int {
	n := map[string]int{}
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "pods" {
			n[a.GetVerb()]++
		}
	}
	return n
}

func TestCloseDeletesPodsWithOneCall(t *testing.T) {
	client := fake.NewClientset()
	var selector string
	client.PrependReactor("delete-collection", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		selector = a.(k8stesting.DeleteCollectionAction).GetListRestrictions().Labels.String()
		return false, nil, nil
	})
	b := newFakeBackend(t, client, &fakeClock{now: time.Unix(0, 0)})
	ctx := context.Background()
	specs := []cluster.InstanceSpec{{Role: cluster.PS, ID: 0}}
	for i := range 20 {
		specs = append(specs, cluster.InstanceSpec{Role: cluster.Worker, ID: i, Index: i})
	}
	for _, s := range specs {
		if err := b.Launch(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	client.ClearActions()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if n := countVerbs(client); n["delete-collection"] != 1 || n["delete"] != 0 {
		t.Errorf("pod calls %v: want one delete-collection and no delete", n)
	}
	// The job's worker and PS pods, not its master's.
	if want := "app.kubernetes.io/name=elasticdl,elasticdl.io/job-name=j,elasticdl.io/replica-type in (ps,worker)"; selector != want {
		t.Errorf("collection delete of %q, want %q", selector, want)
	}
	if pods, _ := client.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("%d pods left", len(pods.Items))
	}
}

func TestCloseDeletesPodsOneByOneWhenRefused(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("delete-collection", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", nil)
	})
	b := newFakeBackend(t, client, &fakeClock{now: time.Unix(0, 0)})
	ctx := context.Background()
	for i := range 3 {
		if err := b.Launch(ctx, cluster.InstanceSpec{Role: cluster.Worker, ID: i, Index: i}); err != nil {
			t.Fatal(err)
		}
	}
	client.ClearActions()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if n := countVerbs(client); n["delete-collection"] != 1 || n["delete"] != 3 {
		t.Errorf("pod calls %v: want one delete-collection (refused), then 3 deletes", n)
	}
	if pods, _ := client.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("%d pods left", len(pods.Items))
	}
}

func TestLaunchBatch(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod); p.Labels[LabelInstanceID] == "7" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, p.Name, nil)
		}
		return false, nil, nil
	})
	deleteCollections(client)
	// The fake clientset does not replay what was created between an
	// informer's List and its Watch (kubernetes/kubernetes#95372): a pod
	// launched then gave no event. So the backend is returned only once
	// its informer's watch is open (the fake's own reactor, then a signal).
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(watching) })
		return true, w, nil
	})
	b, err := New(context.Background(), Config{
		Client: client, Namespace: "ns", JobName: "j", PSPort: 2222,
		Worker: PodSettings{Image: "img"}, PS: PodSettings{Image: "img"},
		SyncTimeout: 5 * time.Second, CreateParallelism: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	var specs []cluster.InstanceSpec
	for i := range 30 {
		specs = append(specs, cluster.InstanceSpec{Role: cluster.Worker, ID: i, Index: i})
	}
	errs := b.LaunchBatch(context.Background(), specs)
	if len(errs) != len(specs) {
		t.Fatalf("%d errors for %d specs", len(errs), len(specs))
	}
	for i, err := range errs {
		if (err != nil) != (i == 7) {
			t.Errorf("launch %d: %v", i, err)
		}
	}
	pods, _ := client.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
	if len(pods.Items) != 29 {
		t.Errorf("%d pods created, want 29", len(pods.Items))
	}
	// The failed one is forgotten: it may be launched again.
	b.mu.Lock()
	_, known := b.instances[instanceKey{cluster.Worker, 7}]
	b.mu.Unlock()
	if known {
		t.Error("failed launch still known")
	}
}
