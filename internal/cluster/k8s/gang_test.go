package k8s

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestWaitAdmitted: a gang waits while another job's pods hold the room,
// is admitted once they are gone, and a master that may not list the
// cluster fails at once naming deploy/rbac-gang.yaml.
func TestWaitAdmitted(t *testing.T) {
	ctx := context.Background()
	other := requesting(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns"}}, "3", "n0", 0)
	cs := fake.NewClientset(testNode("n0", "4", true), other)
	m := &MasterPod{c: NewClient(cs, 5*time.Second), pod: &corev1.Pod{}}
	var g Gang
	g.Add(2, PodSettings{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}})
	g.Interval, g.Logger = 10*time.Millisecond, slog.New(slog.DiscardHandler)
	if len(g.Pods) != 2 || g.Pods[0].Request.MilliCPU != 1000 {
		t.Fatalf("Add: %+v", g.Pods)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		cs.CoreV1().Pods("ns").Delete(ctx, "other", metav1.DeleteOptions{})
	}()
	waited, err := m.WaitAdmitted(ctx, g)
	if err != nil || waited < 100*time.Millisecond {
		t.Errorf("WaitAdmitted = %v, %v; want admitted after the other job's pod went (≥ 100 ms)", waited, err)
	}

	// Cancelled while waiting.
	full := fake.NewClientset(testNode("n0", "1", true))
	m = &MasterPod{c: NewClient(full, 5*time.Second), pod: &corev1.Pod{}}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := m.WaitAdmitted(cctx, g); err == nil {
		t.Errorf("WaitAdmitted on a cluster too small: want the context's error")
	}

	forbidden := fake.NewClientset()
	forbidden.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", nil)
	})
	m = &MasterPod{c: NewClient(forbidden, 5*time.Second), pod: &corev1.Pod{}}
	if _, err := m.WaitAdmitted(ctx, g); err == nil || !strings.Contains(err.Error(), "deploy/rbac-gang.yaml") {
		t.Errorf("WaitAdmitted without the RBAC: %v; want an error naming deploy/rbac-gang.yaml", err)
	}
}
