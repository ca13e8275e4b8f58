package k8s

// These tests drive what the command line asks of the API server (submit,
// status, logs, stop, the master's own pod) against client-go's fake
// clientset; test/e2e runs the same commands on a real control plane.

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

func masterManifest() *corev1.Pod {
	return NewPod(MasterPodName("j"), "ns", JobLabels("j", ReplicaMaster), PodSettings{Image: "img", ServiceAccount: "elasticdl"}, []string{"master"}, nil)
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
			"job j exists in namespace ns (pod elasticdl-j-master): `elasticdl stop j --namespace=ns` or choose another --job_name"},
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
			if _, err := cs.CoreV1().Pods("ns").Get(context.Background(), MasterPodName("j"), metav1.GetOptions{}); err != nil {
				t.Errorf("master pod: %v", err)
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
	if pods, _ := cs.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Error("the master pod was created despite the failed preflight")
	}
}

func TestJobStatus(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	c := NewClient(cs, time.Second)
	_, err := c.JobStatus(ctx, "ns", "j")
	if !errors.Is(err, ErrNoJob) || err.Error() != "no job j in namespace ns (no pod elasticdl-j-master)" {
		t.Fatalf("unknown job: %v", err)
	}

	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	mp := jobPod(MasterPodName("j"), ReplicaMaster, "", corev1.PodSucceeded)
	mp.Labels[LabelStatus] = StatusFinished
	mp.Status.StartTime = &metav1.Time{Time: start}
	objs := []runtime.Object{mp,
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
		e.InvolvedObject = corev1.ObjectReference{Kind: "Pod", Name: mp.Name, Namespace: "ns"}
		objs = append(objs, &e)
	}
	cs = fake.NewClientset(objs...)
	st, err := NewClient(cs, time.Second).JobStatus(ctx, "ns", "j")
	if err != nil {
		t.Fatal(err)
	}
	want := &JobStatus{
		MasterPod: "elasticdl-j-master", MasterPhase: "Succeeded", Started: start, Result: StatusFinished,
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

func TestPodNamesByInstanceID(t *testing.T) {
	cs := fake.NewClientset(jobPod("w10", "worker", "10", corev1.PodRunning), jobPod("w2", "worker", "2", corev1.PodRunning),
		jobPod("w9", "worker", "9", corev1.PodRunning), jobPod("p0", "ps", "0", corev1.PodRunning))
	names, err := NewClient(cs, time.Second).PodNames(context.Background(), "ns", "j", cluster.Worker)
	if err != nil || !reflect.DeepEqual(names, []string{"w2", "w9", "w10"}) {
		t.Errorf("got %q, %v", names, err)
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
	// The fake has no garbage collector: a pod of the job other than the
	// master stays, as a terminating one would.
	cs := fake.NewClientset(jobPod(MasterPodName("j"), ReplicaMaster, "", corev1.PodRunning), jobPod("w0", "worker", "0", corev1.PodRunning))
	err := NewClient(cs, 300*time.Millisecond).StopJob(ctx, "ns", "j")
	if err == nil || err.Error() != "job j: master pod deleted, 1 pods still terminating after 300ms" {
		t.Fatalf("pods left: %v", err)
	}
	if err := cs.CoreV1().Pods("ns").Delete(ctx, "w0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.CoreV1().Pods("ns").Create(ctx, jobPod(MasterPodName("j"), ReplicaMaster, "", corev1.PodRunning), metav1.CreateOptions{})
	if err := NewClient(cs, time.Second).StopJob(ctx, "ns", "j"); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func TestMasterPod(t *testing.T) {
	ctx := context.Background()
	mp := jobPod(MasterPodName("j"), ReplicaMaster, "", corev1.PodRunning)
	mp.UID = "uid-1"
	cs := fake.NewClientset(mp)
	c := NewClient(cs, time.Second)
	if _, err := c.MasterPod(ctx, "ns", "nope"); err == nil || !strings.HasPrefix(err.Error(), "get own pod ns/nope: ") {
		t.Fatalf("unknown pod: %v", err)
	}
	self, err := c.MasterPod(ctx, "ns", mp.Name)
	if err != nil {
		t.Fatal(err)
	}

	// The backend's pods are owned by the master pod, in its namespace.
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
	if o := w.OwnerReferences; len(o) != 1 || o[0].UID != "uid-1" || o[0].Name != mp.Name {
		t.Errorf("worker pod owners %+v, want the master pod", o)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	be.Close(cctx)

	// The result: summary first (created, then updated), then the label.
	check := func(summary, status string) {
		t.Helper()
		cm, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, SummaryConfigMapName("j"), metav1.GetOptions{})
		if err != nil || cm.Data[SummaryKey] != summary || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != "uid-1" {
			t.Errorf("summary ConfigMap %+v, %v; want %q owned by the master pod", cm, err, summary)
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
