package k8s

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestProgressStore: the master writes its progress on its Job, beside
// the Job's other annotations, and the next master pod of the Job reads it
// back; a pod no Job runs has no store.
func TestProgressStore(t *testing.T) {
	ctx := context.Background()
	mj := masterJob("job-uid")
	mj.Annotations = map[string]string{AnnotationTargetWorkers: "3"}
	first := jobMasterPod("elasticdl-j-master-a", "job-uid", corev1.PodRunning, time.Now())
	second := jobMasterPod("elasticdl-j-master-b", "job-uid", corev1.PodRunning, time.Now())
	cs := fake.NewClientset(mj, first, second)
	c := NewClient(cs, time.Second)
	self, err := c.MasterPod(ctx, "ns", first.Name)
	if err != nil {
		t.Fatal(err)
	}
	store := self.ProgressStore()
	if v, ok, err := store.Load(ctx); ok || err != nil {
		t.Fatalf("nothing published yet: got %q, %v, %v", v, ok, err)
	}
	const value = `{"v":1,"remaining":5,"min":1,"max":2,"samples":[{"w":1,"rps":2.5,"n":3,"s":3}]}`
	if err := store.Save(ctx, value); err != nil {
		t.Fatal(err)
	}
	got, err := cs.BatchV1().Jobs("ns").Get(ctx, mj.Name, metav1.GetOptions{})
	if err != nil || got.Annotations[AnnotationProgress] != value || got.Annotations[AnnotationTargetWorkers] != "3" {
		t.Fatalf("Job annotations %v (%v); want the progress beside the target", got.Annotations, err)
	}
	// The first pod is gone; the Job's next one reads the value back.
	if err := cs.CoreV1().Pods("ns").Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next, err := c.MasterPod(ctx, "ns", second.Name)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := next.ProgressStore().Load(ctx); v != value || !ok || err != nil {
		t.Errorf("after a restart: %q, %v, %v; want %q", v, ok, err, value)
	}

	bare := jobPod("elasticdl-k-master", ReplicaMaster, "", corev1.PodRunning)
	bself, err := NewClient(fake.NewClientset(bare), time.Second).MasterPod(ctx, "ns", bare.Name)
	if err != nil {
		t.Fatal(err)
	}
	if bself.ProgressStore() != nil {
		t.Error("a pod no Job runs has a progress store")
	}
}
