package k8s

// These tests drive what the command line asks of the API server (submit,
// status, logs, stop, the master's own pod) against client-go's fake
// clientset; test/e2e runs the same commands on a real control plane.

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"elasticdl/internal/cluster"
)

// jobPod is a pod of job j in namespace ns.
func jobPod(name string, role string, id string, phase corev1.PodPhase) *corev1.Pod {
	labels := JobLabels("j", role)
	labels[LabelInstanceID] = id
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels}, Status: corev1.PodStatus{Phase: phase}}
}

// rbac makes the fake answer SubjectAccessReviews: allowed unless denied
// lists the "verb resource".
func rbac(denied ...string) func(*fake.Clientset) {
	return func(client *fake.Clientset) { answerRBAC(client, denied) }
}

func answerRBAC(client *fake.Clientset, denied []string) {
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		ra := r.Spec.ResourceAttributes
		r.Status.Allowed = true
		for _, d := range denied {
			if d == ra.Verb+" "+ra.Resource {
				r.Status.Allowed = false
			}
		}
		return true, r, nil
	})
}

func masterManifest() *batchv1.Job {
	pod := NewPod("", "ns", JobLabels("j", ReplicaMaster), PodSettings{Image: "img", ServiceAccount: "elasticdl"}, []string{"master"}, nil)
	return NewMasterJob("j", "ns", pod)
}

// masterJob is the master Job of job j, with uid.
func masterJob(uid types.UID) *batchv1.Job {
	mj := masterManifest()
	mj.UID = uid
	return mj
}

// jobMasterPod is a master pod of job j that the Job jobUID runs.
func jobMasterPod(name string, jobUID types.UID, phase corev1.PodPhase, created time.Time) *corev1.Pod {
	p := jobPod(name, ReplicaMaster, "", phase)
	p.CreationTimestamp = metav1.Time{Time: created}
	t := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: MasterName("j"), UID: jobUID, Controller: &t}}
	return p
}

func serviceAccount() *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "elasticdl", Namespace: "ns"}}
}

func TestSubmitJob(t *testing.T) {
	high := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "elasticdl-high"}}
	classes := []PriorityClassUse{{"master_pod_priority", ""}, {"worker_pod_priority", "elasticdl-high"}, {"worker_pod_priority", "elasticdl-high"}}
	cases := []struct {
		name    string
		objects []runtime.Object
		setup   func(*fake.Clientset)
		classes []PriorityClassUse
		want    string // error text; "" for a created pod
	}{
		{"no ServiceAccount", nil, rbac(), nil, "namespace ns has no ServiceAccount elasticdl for the master: apply deploy/rbac.yaml"},
		{"API server down", nil, func(c *fake.Clientset) {
			c.PrependReactor("get", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("connection refused")
			})
		}, nil, "cannot reach the Kubernetes API server: connection refused"},
		{"RBAC missing", []runtime.Object{serviceAccount()}, rbac("create services", "patch pods"), nil,
			"ServiceAccount ns/elasticdl may not patch pods, create services: apply deploy/rbac.yaml to namespace ns"},
		{"may not ask about RBAC", []runtime.Object{serviceAccount()}, func(c *fake.Clientset) {
			c.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "subjectaccessreviews"}, "", nil)
			})
		}, nil, ""},
		{"PriorityClass missing", []runtime.Object{serviceAccount(), high}, rbac(), append(classes, PriorityClassUse{"ps_pod_priority", "gold"}),
			`--ps_pod_priority: PriorityClass "gold" does not exist in the cluster`},
		{"PriorityClass unreadable", []runtime.Object{serviceAccount()}, func(c *fake.Clientset) {
			answerRBAC(c, nil)
			c.PrependReactor("get", "priorityclasses", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "priorityclasses"}, "", nil)
			})
		}, []PriorityClassUse{{"ps_pod_priority", "gold"}}, ""},
		{"created", []runtime.Object{serviceAccount(), high}, rbac(), classes, ""},
		{"exists", []runtime.Object{serviceAccount(), masterManifest()}, rbac(), nil,
			"job j exists in namespace ns (Job elasticdl-j-master): `elasticdl stop j --namespace=ns` or choose another --job_name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := fake.NewClientset(c.objects...)
			c.setup(cs)
			err := NewClient(cs, time.Second).SubmitJob(context.Background(), masterManifest(), c.classes)
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("got %v, want %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mj, err := cs.BatchV1().Jobs("ns").Get(context.Background(), MasterName("j"), metav1.GetOptions{})
			if err != nil {
				t.Fatalf("master Job: %v", err)
			}
			if mj.Spec.Template.Spec.ServiceAccountName != "elasticdl" || mj.Spec.PodFailurePolicy == nil {
				t.Errorf("master Job %+v", mj.Spec)
			}
		})
	}
}

func TestSubmitJobNamesTheMissingPriorityClass(t *testing.T) {
	cs := fake.NewClientset(serviceAccount())
	answerRBAC(cs, nil)
	err := NewClient(cs, time.Second).SubmitJob(context.Background(), masterManifest(), []PriorityClassUse{{"worker_pod_priority", "low"}})
	var pe *PriorityClassError
	if !errors.As(err, &pe) || *pe != (PriorityClassError{"worker_pod_priority", "low"}) {
		t.Fatalf("got %v, want a PriorityClassError for worker_pod_priority", err)
	}
	if jobs, _ := cs.BatchV1().Jobs("ns").List(context.Background(), metav1.ListOptions{}); len(jobs.Items) != 0 {
		t.Error("the master Job was created despite the failed preflight")
	}
}

func TestJobStatus(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	c := NewClient(cs, time.Second)
	_, err := c.JobStatus(ctx, "ns", "j")
	if !errors.Is(err, ErrNoJob) || err.Error() != "no job j in namespace ns (no Job elasticdl-j-master)" {
		t.Fatalf("unknown job: %v", err)
	}

	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	mj := masterJob("job-uid")
	mj.Status.StartTime = &metav1.Time{Time: start}
	mj.Status.Failed, mj.Status.Succeeded = 1, 1
	// The Job replaced its first master pod, deleted at 10 s.
	first := jobMasterPod("elasticdl-j-master-aaaaa", "job-uid", corev1.PodFailed, start)
	mp := jobMasterPod("elasticdl-j-master-bbbbb", "job-uid", corev1.PodSucceeded, start.Add(10*time.Second))
	mp.Labels[LabelStatus] = StatusFinished
	objs := []runtime.Object{mj, mp, first,
		jobPod("w0", "worker", "0", corev1.PodRunning), jobPod("w1", "worker", "1", corev1.PodPending),
		jobPod("w2", "worker", "2", corev1.PodRunning), jobPod("w3", "worker", "3", corev1.PodFailed),
		jobPod("p0", "ps", "0", corev1.PodRunning),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: SummaryConfigMapName("j"), Namespace: "ns"}, Data: map[string]string{SummaryKey: `{"job":"j"}`}},
	}
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	for i, e := range []corev1.Event{
		{Reason: "Last", LastTimestamp: metav1.Time{Time: at(30)}},
		{Reason: "Scheduled", EventTime: metav1.MicroTime{Time: at(1)}}, // events.k8s.io: EventTime only
		{Reason: "Created", ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.Time{Time: at(2)}}},
	} {
		e.Name, e.Namespace, e.Type = "e"+string(rune('a'+i)), "ns", corev1.EventTypeNormal
		e.InvolvedObject = corev1.ObjectReference{Kind: "Job", Name: mj.Name, Namespace: "ns"}
		objs = append(objs, &e)
	}
	cs = fake.NewClientset(objs...)
	st, err := NewClient(cs, time.Second).JobStatus(ctx, "ns", "j")
	if err != nil {
		t.Fatal(err)
	}
	want := &JobStatus{
		MasterPod: mp.Name, MasterPhase: "Succeeded", MasterPodsFailed: 1, Started: start, Result: StatusFinished,
		Pods: map[cluster.Role][]PhaseCount{
			cluster.Worker: {{"Pending", 1}, {"Running", 2}, {"Failed", 1}},
			cluster.PS:     {{"Running", 1}},
		},
		Summary: []byte(`{"job":"j"}`),
		Events: []Event{
			{Time: at(1), Type: "Normal", Reason: "Scheduled"},
			{Time: at(2), Type: "Normal", Reason: "Created"},
			{Time: at(30), Type: "Normal", Reason: "Last"},
		},
	}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("status\n%+v\nwant\n%+v", st, want)
	}
}

// TestJobStatusFailedJob: a Job that gave up (its master pods failed too
// often) has failed, though no master said so.
func TestJobStatusFailedJob(t *testing.T) {
	mj := masterJob("job-uid")
	mj.Status.Failed = 7
	mj.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}}
	cs := fake.NewClientset(mj, jobMasterPod("elasticdl-j-master-aaaaa", "job-uid", corev1.PodFailed, time.Now()))
	st, err := NewClient(cs, time.Second).JobStatus(context.Background(), "ns", "j")
	if err != nil {
		t.Fatal(err)
	}
	if st.Result != StatusFailed || st.Condition != "BackoffLimitExceeded: Job has reached the specified backoff limit" || st.MasterPodsFailed != 7 {
		t.Errorf("status %+v, want failed with the Job's condition, 7 master pods failed", st)
	}
}

func TestPodNames(t *testing.T) {
	now := time.Now()
	cs := fake.NewClientset(jobPod("w10", "worker", "10", corev1.PodRunning), jobPod("w2", "worker", "2", corev1.PodRunning),
		jobPod("w9", "worker", "9", corev1.PodRunning), jobPod("p0", "ps", "0", corev1.PodRunning),
		jobMasterPod("m-old", "u", corev1.PodFailed, now), jobMasterPod("m-new", "u", corev1.PodRunning, now.Add(time.Second)))
	c := NewClient(cs, time.Second)
	names, err := c.PodNames(context.Background(), "ns", "j", cluster.Worker)
	if err != nil || !reflect.DeepEqual(names, []string{"w2", "w9", "w10"}) {
		t.Errorf("workers by instance ID: got %q, %v", names, err)
	}
	names, err = c.PodNames(context.Background(), "ns", "j", ReplicaMaster)
	if err != nil || !reflect.DeepEqual(names, []string{"m-new", "m-old"}) {
		t.Errorf("master pods, the newest first: got %q, %v", names, err)
	}
	// No master pod: none yet, or no job at all.
	empty := NewClient(fake.NewClientset(masterJob("u")), time.Second)
	if names, err := empty.PodNames(context.Background(), "ns", "j", ReplicaMaster); err != nil || len(names) != 0 {
		t.Errorf("a job with no master pod yet: %q, %v", names, err)
	}
	if _, err := empty.PodNames(context.Background(), "ns", "nope", ReplicaMaster); !errors.Is(err, ErrNoJob) {
		t.Errorf("master pods of an unknown job: %v, want ErrNoJob", err)
	}
}

func TestLogs(t *testing.T) {
	cs := fake.NewClientset(jobPod("w0", "worker", "0", corev1.PodRunning))
	var out bytes.Buffer
	if err := NewClient(cs, time.Second).Logs(context.Background(), &out, "ns", "w0", false); err != nil {
		t.Fatal(err)
	}
	if out.String() != "fake logs" { // what the fake clientset streams
		t.Errorf("logs %q", out.String())
	}
}

func TestStopJob(t *testing.T) {
	ctx := context.Background()
	c := NewClient(fake.NewClientset(), time.Second)
	if err := c.StopJob(ctx, "ns", "j"); !errors.Is(err, ErrNoJob) {
		t.Fatalf("unknown job: %v", err)
	}
	// The fake has no garbage collector: the job's pods stay, as
	// terminating ones would.
	cs := fake.NewClientset(masterJob("u"), jobPod("w0", "worker", "0", corev1.PodRunning))
	err := NewClient(cs, 300*time.Millisecond).StopJob(ctx, "ns", "j")
	if err == nil || err.Error() != "job j: Job elasticdl-j-master deleted, 1 pods still terminating after 300ms" {
		t.Fatalf("pods left: %v", err)
	}
	if _, err := cs.BatchV1().Jobs("ns").Get(ctx, MasterName("j"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Job after stop: %v", err)
	}
	if err := cs.CoreV1().Pods("ns").Delete(ctx, "w0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.BatchV1().Jobs("ns").Create(ctx, masterJob("u"), metav1.CreateOptions{})
	if err := NewClient(cs, time.Second).StopJob(ctx, "ns", "j"); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func TestMasterPod(t *testing.T) {
	ctx := context.Background()
	mp := jobMasterPod("elasticdl-j-master-x1", "job-uid", corev1.PodRunning, time.Now())
	mp.UID = "pod-uid"
	cs := fake.NewClientset(mp)
	c := NewClient(cs, time.Second)
	if _, err := c.MasterPod(ctx, "ns", "nope"); err == nil || !strings.HasPrefix(err.Error(), "get own pod ns/nope: ") {
		t.Fatalf("unknown pod: %v", err)
	}
	self, err := c.MasterPod(ctx, "ns", mp.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !self.Replaced() || self.RunID() != "job-job-uid" {
		t.Errorf("replaced %v, run %q: want a pod the Job replaces, in the Job's run", self.Replaced(), self.RunID())
	}
	owned := func(what string, o []metav1.OwnerReference) {
		t.Helper()
		if len(o) != 1 || o[0].UID != "job-uid" || o[0].Kind != "Job" || o[0].Name != MasterName("j") ||
			o[0].Controller != nil || o[0].BlockOwnerDeletion == nil || !*o[0].BlockOwnerDeletion {
			t.Errorf("%s owners %+v, want the master's Job (no controller reference, blocking deletion)", what, o)
		}
	}

	// The backend's pods are owned by the master's Job, in its namespace.
	be, err := self.NewBackend(ctx, Config{Namespace: "elsewhere", JobName: "j", PSPort: 2222, Worker: PodSettings{Image: "img"}, SyncTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Launch(ctx, cluster.InstanceSpec{Role: cluster.Worker, ID: 0}); err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Pods("ns").Get(ctx, InstancePodName("j", cluster.Worker, 0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned("worker pod", w.OwnerReferences)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	be.Close(cctx)

	// The master's Service selects whichever master pod runs; a second
	// master finds it there.
	for range 2 {
		host, err := self.EnsureService(ctx, "j", 50001)
		if err != nil || host != "elasticdl-j-master.ns.svc" {
			t.Fatalf("master Service host %q, %v", host, err)
		}
	}
	svc, err := cs.CoreV1().Services("ns").Get(ctx, MasterName("j"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(svc.Spec.Selector, JobLabels("j", ReplicaMaster)) || svc.Spec.Ports[0].Port != 50001 {
		t.Errorf("master Service %+v", svc.Spec)
	}
	owned("master Service", svc.OwnerReferences)

	// Events are about the Job, reported by the pod.
	rec := self.NewRecorder("elasticdl-master", nil)
	rec.Notify(false, "Test", "hello")
	rec.Close(ctx)
	evs, _ := cs.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].InvolvedObject.Kind != "Job" || evs.Items[0].InvolvedObject.UID != "job-uid" ||
		evs.Items[0].ReportingInstance != mp.Name {
		t.Errorf("events %+v, want one about the Job reported by the pod", evs.Items)
	}

	// The result: summary first (created, then updated), then the label.
	check := func(summary, status string) {
		t.Helper()
		cm, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, SummaryConfigMapName("j"), metav1.GetOptions{})
		if err != nil || cm.Data[SummaryKey] != summary {
			t.Errorf("summary ConfigMap %+v, %v; want %q", cm, err, summary)
		} else {
			owned("summary ConfigMap", cm.OwnerReferences)
		}
		p, _ := cs.CoreV1().Pods("ns").Get(ctx, mp.Name, metav1.GetOptions{})
		if p.Labels[LabelStatus] != status {
			t.Errorf("master pod label %s=%q, want %q", LabelStatus, p.Labels[LabelStatus], status)
		}
	}
	if err := self.PublishResult(ctx, "j", []byte(`{"status":"failed"}`), true); err != nil {
		t.Fatal(err)
	}
	check(`{"status":"failed"}`, StatusFailed)
	if err := self.PublishResult(ctx, "j", []byte(`{"status":"succeeded"}`), false); err != nil {
		t.Fatal(err)
	}
	check(`{"status":"succeeded"}`, StatusFinished)
	// No summary: only the label.
	if err := self.PublishResult(ctx, "j", nil, true); err != nil {
		t.Fatal(err)
	}
	check(`{"status":"succeeded"}`, StatusFailed)
}

// TestBareMasterPod: a master pod that no Job runs owns the job itself,
// and nothing replaces it.
func TestBareMasterPod(t *testing.T) {
	ctx := context.Background()
	mp := jobPod("elasticdl-j-master", ReplicaMaster, "", corev1.PodRunning)
	mp.UID = "pod-uid"
	self, err := NewClient(fake.NewClientset(mp), time.Second).MasterPod(ctx, "ns", mp.Name)
	if err != nil {
		t.Fatal(err)
	}
	if self.Replaced() || self.RunID() != "pod-pod-uid" {
		t.Errorf("replaced %v, run %q: want a pod nothing replaces, in its own run", self.Replaced(), self.RunID())
	}
	if o := self.owner; o.Kind != "Pod" || o.UID != "pod-uid" {
		t.Errorf("owner %+v, want the pod", o)
	}
}

// TestScaleAndWatchTarget: `elasticdl scale` annotates the master's Job;
// the master sees each new value (a bad one apart), once.
func TestScaleAndWatchTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mj := masterJob("job-uid")
	mp := jobMasterPod("elasticdl-j-master-x1", "job-uid", corev1.PodRunning, time.Now())
	cs := fake.NewClientset(mj, mp)
	// The fake sends a watch only what happens after it started: changes
	// wait for the informer's watch.
	watching := make(chan struct{})
	var once sync.Once
	cs.PrependWatchReactor("jobs", func(k8stesting.Action) (bool, watch.Interface, error) {
		once.Do(func() { close(watching) })
		return false, nil, nil
	})
	c := NewClient(cs, time.Second)
	if err := c.ScaleJob(ctx, "ns", "nope", 2); !errors.Is(err, ErrNoJob) {
		t.Fatalf("scale an unknown job: %v", err)
	}
	self, err := c.MasterPod(ctx, "ns", mp.Name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := self.WatchTarget(wctx, map[string]TargetWatch{AnnotationTargetWorkers: {Set: func(n int) { got <- strconv.Itoa(n) }, Bad: func(v string) { got <- "bad " + v }}}); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-watching:
		time.Sleep(100 * time.Millisecond) // the reactor runs before the watch is registered
	case <-ctx.Done():
		t.Fatal("the master never watched its Job")
	}
	next := func(want string) {
		t.Helper()
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("watched %q, want %q", g, want)
			}
		case <-ctx.Done():
			t.Fatalf("watched nothing, want %q", want)
		}
	}
	for _, v := range []string{"3", "x", "1"} {
		if v == "x" {
			patch := `{"metadata":{"annotations":{"` + AnnotationTargetWorkers + `":"x"}}}`
			if _, err := cs.BatchV1().Jobs("ns").Patch(ctx, mj.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			next("bad x")
			continue
		}
		n, _ := strconv.Atoi(v)
		if err := c.ScaleJob(ctx, "ns", "j", n); err != nil {
			t.Fatal(err)
		}
		next(v)
	}
	// A change to something else of the Job is no new target.
	if _, err := cs.BatchV1().Jobs("ns").Patch(ctx, mj.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		t.Fatalf("watched %q after an unrelated change", g)
	case <-time.After(200 * time.Millisecond):
	}
	stop()
	<-done
}

// TestWatchTargetForbidden: a master that may not watch its Job says so
// (the job runs on, unscaled) instead of waiting silently.
func TestWatchTargetForbidden(t *testing.T) {
	ctx := context.Background()
	mp := jobMasterPod("elasticdl-j-master-x1", "job-uid", corev1.PodRunning, time.Now())
	cs := fake.NewClientset(masterJob("job-uid"), mp)
	cs.PrependReactor("list", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "", nil)
	})
	self, err := NewClient(cs, 300*time.Millisecond).MasterPod(ctx, "ns", mp.Name)
	if err != nil {
		t.Fatal(err)
	}
	err = self.WatchTarget(ctx, map[string]TargetWatch{AnnotationTargetWorkers: {Set: func(int) { t.Error("a target without a watch") }, Bad: func(string) {}}})
	if err == nil || !strings.Contains(err.Error(), "RBAC") {
		t.Fatalf("WatchTarget without RBAC: %v, want an error naming RBAC", err)
	}
}
