package k8s

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// dashPod is a master pod of job j created at second s, with the
// dashboard annotation port ("": none).
func dashPod(name string, s int, phase corev1.PodPhase, port string) corev1.Pod {
	p := jobMasterPod(name, "u", phase, time.Unix(1000+int64(s), 0))
	if port != "" {
		p.Annotations = map[string]string{AnnotationDashboardPort: port}
	}
	return *p
}

func TestPickMasterDashboard(t *testing.T) {
	deleting := dashPod("m-deleting", 5, corev1.PodRunning, "8042")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(2000, 0)}
	ended := dashPod("m-ended", 3, corev1.PodSucceeded, "8042")
	ended.Labels[LabelStatus] = StatusFinished
	cases := []struct {
		name string
		pods []corev1.Pod
		want string // the target, or the error's text
		err  error
	}{
		{"the newest running one", []corev1.Pod{dashPod("m-a", 1, corev1.PodRunning, "8042"), dashPod("m-b", 2, corev1.PodRunning, "9000"), dashPod("m-c", 3, corev1.PodFailed, "8042")},
			"ns/m-b:9000", nil},
		{"a pod being deleted is skipped", []corev1.Pod{dashPod("m-a", 1, corev1.PodRunning, "8042"), deleting}, "ns/m-a:8042", nil},
		{"none yet", []corev1.Pod{dashPod("m-a", 1, corev1.PodPending, "8042")}, "job j has no running master pod: not running yet", ErrNotRunning},
		{"only one being replaced", []corev1.Pod{deleting}, "job j has no running master pod: not running yet", ErrNotRunning},
		{"no pods", nil, "job j has no running master pod: not running yet", ErrNotRunning},
		{"ended", []corev1.Pod{ended}, "job j: the job has ended (master pod m-ended: Finished), its master is gone", ErrJobEnded},
		{"dashboard off", []corev1.Pod{dashPod("m-a", 1, corev1.PodRunning, "")},
			"job j: no dashboard: master pod m-a has no annotation elasticdl.io/dashboard-port (the job was started with --dashboard_port=-1)", ErrNoDashboard},
		{"a bad annotation", []corev1.Pod{dashPod("m-a", 1, corev1.PodRunning, "0")},
			`job j: no dashboard: master pod m-a has elasticdl.io/dashboard-port="0", not a port`, ErrNoDashboard},
	}
	for _, c := range cases {
		got, err := pickMasterDashboard("j", c.pods)
		text := got.String()
		if err != nil {
			text = err.Error()
		}
		if text != c.want || !errors.Is(err, c.err) || (c.err != nil) != (err != nil) {
			t.Errorf("%s: got %q, %v; want %q (%v)", c.name, text, err, c.want, c.err)
		}
	}
}

func TestPickAutoscalerDashboard(t *testing.T) {
	pod := func(name string, s int, phase corev1.PodPhase, ports ...corev1.ContainerPort) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sys", CreationTimestamp: metav1.Time{Time: time.Unix(int64(s), 0)}},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "autoscaler", Ports: ports}}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	metrics := corev1.ContainerPort{Name: "metrics", ContainerPort: 9090}
	dash := corev1.ContainerPort{Name: PortNameDashboard, ContainerPort: 7000}
	cases := []struct {
		name string
		pods []corev1.Pod
		want string
		err  error
	}{
		{"its dashboard port", []corev1.Pod{pod("a", 1, corev1.PodRunning, metrics, dash)}, "sys/a:7000", nil},
		{"the default port", []corev1.Pod{pod("a", 1, corev1.PodRunning, metrics)}, "sys/a:8043", nil},
		{"the newest running", []corev1.Pod{pod("a", 1, corev1.PodRunning), pod("b", 2, corev1.PodRunning, dash), pod("c", 3, corev1.PodPending)}, "sys/b:7000", nil},
		{"pending", []corev1.Pod{pod("a", 1, corev1.PodPending)}, "the autoscaler in namespace sys has no running pod: not running yet", ErrNotRunning},
		{"none", nil, "no pod labelled app.kubernetes.io/name=elasticdl-autoscaler in namespace sys (deploy/autoscaler.yaml; --namespace)", nil},
	}
	for _, c := range cases {
		got, err := pickAutoscalerDashboard("sys", c.pods)
		text := got.String()
		if err != nil {
			text = err.Error()
		}
		if text != c.want || (c.err != nil && !errors.Is(err, c.err)) {
			t.Errorf("%s: got %q, %v; want %q (%v)", c.name, text, err, c.want, c.err)
		}
	}
}

// JobDashboard and AutoscalerDashboard read the pods of the API server;
// an unknown job is ErrNoJob, a failed list is said.
func TestJobDashboard(t *testing.T) {
	ctx := context.Background()
	running := dashPod("m-a", 1, corev1.PodRunning, "8042")
	c := NewClient(fake.NewClientset(masterJob("u"), &running), time.Second)
	if got, err := c.JobDashboard(ctx, "ns", "j"); err != nil || got.String() != "ns/m-a:8042" {
		t.Errorf("JobDashboard: %v, %v", got, err)
	}
	if _, err := c.JobDashboard(ctx, "ns", "nope"); !errors.Is(err, ErrNoJob) {
		t.Errorf("an unknown job: %v", err)
	}
	empty := NewClient(fake.NewClientset(masterJob("u")), time.Second)
	if _, err := empty.JobDashboard(ctx, "ns", "j"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("a job without a master pod yet: %v", err)
	}
	cs := fake.NewClientset()
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("boom")
	})
	failing := NewClient(cs, time.Second)
	if _, err := failing.JobDashboard(ctx, "ns", "j"); err == nil || err.Error() != "list pods: boom" {
		t.Errorf("a failed list: %v", err)
	}
	if _, err := failing.AutoscalerDashboard(ctx, "sys"); err == nil || err.Error() != "list pods: boom" {
		t.Errorf("a failed list: %v", err)
	}
	as := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "as", Namespace: "sys", Labels: map[string]string{LabelAppName: AutoscalerAppName}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	c = NewClient(fake.NewClientset(&as), time.Second)
	if got, err := c.AutoscalerDashboard(ctx, "sys"); err != nil || got.String() != "sys/as:8043" {
		t.Errorf("AutoscalerDashboard: %v, %v", got, err)
	}
}

// Port-forward and the proxy stream through a real API server: a Client
// on a fake clientset says so.
func TestTunnelNeedsAPIServer(t *testing.T) {
	c := NewClient(fake.NewClientset(), time.Second)
	target := DashboardTarget{Namespace: "ns", Pod: "p", Port: 8042}
	if _, err := c.OpenTunnel(target); err == nil || !strings.Contains(err.Error(), "needs a real API server") {
		t.Errorf("OpenTunnel: %v", err)
	}
	if _, err := c.PodProxyURL(target); err == nil || !strings.Contains(err.Error(), "needs a real API server") {
		t.Errorf("PodProxyURL: %v", err)
	}
	if _, err := c.Transport(); err == nil || !strings.Contains(err.Error(), "needs a real API server") {
		t.Errorf("Transport: %v", err)
	}
}

// The history ConfigMap: none at first, created owned by the job on the
// first save, replaced by the next, read back; failures are said.
func TestHistoryStore(t *testing.T) {
	ctx := context.Background()
	mp := jobMasterPod("elasticdl-j-master-x1", "job-uid", corev1.PodRunning, time.Now())
	cs := fake.NewClientset(mp)
	self, err := NewClient(cs, time.Second).MasterPod(ctx, "ns", mp.Name)
	if err != nil {
		t.Fatal(err)
	}
	s := self.HistoryStore("j")
	if data, ok, err := s.Load(ctx); ok || err != nil || data != nil {
		t.Fatalf("Load before any save: %q, %v, %v", data, ok, err)
	}
	for _, v := range []string{`{"a":1}`, `{"a":2}`} {
		if err := s.Save(ctx, []byte(v)); err != nil {
			t.Fatal(err)
		}
		if data, ok, err := s.Load(ctx); !ok || err != nil || string(data) != v {
			t.Fatalf("Load after saving %s: %q, %v, %v", v, data, ok, err)
		}
	}
	cm, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, "elasticdl-j-master-history", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != "job-uid" || cm.Labels[LabelJob] != "j" {
		t.Errorf("ConfigMap owners %+v, labels %v: want the job's", cm.OwnerReferences, cm.Labels)
	}
	// A replacement master pod reads what the first saved.
	next := jobMasterPod("elasticdl-j-master-x2", "job-uid", corev1.PodRunning, time.Now())
	cs.Tracker().Add(next)
	self2, err := NewClient(cs, time.Second).MasterPod(ctx, "ns", next.Name)
	if err != nil {
		t.Fatal(err)
	}
	if data, ok, err := self2.HistoryStore("j").Load(ctx); !ok || err != nil || string(data) != `{"a":2}` {
		t.Errorf("the next master loads %q, %v, %v", data, ok, err)
	}
	for _, verb := range []string{"get", "update"} {
		cs.PrependReactor(verb, "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("boom")
		})
	}
	if _, _, err := s.Load(ctx); err == nil || err.Error() != "history: get ConfigMap elasticdl-j-master-history: boom" {
		t.Errorf("a failed Load: %v", err)
	}
	if err := s.Save(ctx, []byte("{}")); err == nil || err.Error() != "history: save ConfigMap elasticdl-j-master-history: boom" {
		t.Errorf("a failed Save: %v", err)
	}
}

// Two masters saving the first history at once: the one whose create
// loses updates what the other created.
func TestHistoryStoreCreateRace(t *testing.T) {
	ctx := context.Background()
	mp := jobMasterPod("elasticdl-j-master-x1", "job-uid", corev1.PodRunning, time.Now())
	cs := fake.NewClientset(mp)
	self, err := NewClient(cs, time.Second).MasterPod(ctx, "ns", mp.Name)
	if err != nil {
		t.Fatal(err)
	}
	s := self.HistoryStore("j")
	cs.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// The other master's create lands first.
		cm := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		cm.Data = map[string]string{HistoryKey: "theirs"}
		cs.Tracker().Add(cm)
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("configmaps"), cm.Name)
	})
	if err := s.Save(ctx, []byte("ours")); err != nil {
		t.Fatal(err)
	}
	if data, ok, err := s.Load(ctx); !ok || err != nil || string(data) != "ours" {
		t.Errorf("Load: %q, %v, %v", data, ok, err)
	}
}
