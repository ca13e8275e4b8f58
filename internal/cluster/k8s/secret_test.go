package k8s

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The password Secret is owned by the job's master Job, as its ConfigMaps
// are, so that deleting the job deletes it.
func TestPasswordSecretOwnedByJob(t *testing.T) {
	ctx := context.Background()
	mj := NewMasterJob("j", "ns", NewPod("", "ns", JobLabels("j", ReplicaMaster), PodSettings{Image: "x"}, []string{"master"}, nil))
	mj.UID = "uid-1"
	cs := fake.NewClientset(mj)
	c := NewClient(cs, 5*time.Second)
	name, err := c.CreatePasswordSecret(ctx, "ns", "j", "pw")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.OwnSecret(ctx, "ns", "j", name); err != nil {
		t.Fatal(err)
	}
	s, err := cs.CoreV1().Secrets("ns").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own := s.OwnerReferences
	if len(own) != 1 || own[0].Kind != "Job" || own[0].Name != MasterName("j") || own[0].UID != mj.UID {
		t.Errorf("Secret %s owners %+v, want Job %s", name, own, MasterName("j"))
	}
	if s.StringData[SecretKeyPassword] != "pw" || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("Secret %s: %+v", name, s)
	}
	if err := c.DeleteSecret(ctx, "ns", name); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSecret(ctx, "ns", name); err != nil {
		t.Errorf("deleting a Secret already gone: %v", err)
	}
}
