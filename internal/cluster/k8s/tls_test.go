package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"elasticdl/internal/cluster"
	"elasticdl/internal/tlsid"
)

func testBundle(id string) *tlsid.Bundle {
	return &tlsid.Bundle{CA: []byte("CA-" + id), Cert: []byte("CERT-" + id), Key: []byte("SECRET-KEY-" + id)}
}

// checkSecretMount checks that pod mounts Secret secret read-only at path,
// files 0400.
func checkSecretMount(t *testing.T, pod *corev1.Pod, secret, path string) {
	t.Helper()
	var vol string
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			vol = v.Name
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400 {
				t.Errorf("pod %s: Secret %s's defaultMode = %v, want 0400", pod.Name, secret, v.Secret.DefaultMode)
			}
		}
	}
	if vol == "" {
		t.Fatalf("pod %s: no volume of Secret %s: %+v", pod.Name, secret, pod.Spec.Volumes)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.FSGroup == nil || *sc.FSGroup != SecretFSGroup || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("pod %s: security context %+v, want fsGroup %d (the non-root user reads the key) and still non-root", pod.Name, sc, SecretFSGroup)
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == vol {
			if m.MountPath != path || !m.ReadOnly {
				t.Errorf("pod %s: Secret %s mounted %+v, want read-only at %s", pod.Name, secret, m, path)
			}
			return
		}
	}
	t.Errorf("pod %s: volume %s not mounted", pod.Name, vol)
}

func TestLaunchWithTLS(t *testing.T) {
	client := fake.NewClientset()
	b := newFakeBackend(t, client, &fakeClock{now: time.Unix(0, 0)})
	specs := []cluster.InstanceSpec{
		{Role: cluster.Worker, ID: 0, TLS: testBundle("w0")},
		{Role: cluster.PS, ID: 1, TLS: testBundle("ps1")},
		{Role: cluster.Worker, ID: 2},
	}
	for i, err := range b.LaunchBatch(context.Background(), specs) {
		if err != nil {
			t.Fatalf("launch %s: %v", specs[i].Name(), err)
		}
	}
	ctx := context.Background()
	for _, spec := range specs {
		name := InstancePodName("j", spec.Role, spec.ID)
		pod, err := client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(pod)
		if bytes.Contains(raw, []byte("SECRET-KEY")) {
			t.Errorf("pod %s's spec holds key material", name)
		}
		s, err := client.CoreV1().Secrets("ns").Get(ctx, InstanceTLSSecretName(name), metav1.GetOptions{})
		if spec.TLS == nil {
			if !apierrors.IsNotFound(err) || len(pod.Spec.Volumes) != 0 || hasEnv(pod, cluster.EnvTLSDir) {
				t.Errorf("pod %s without TLS: Secret %v, volumes %v", name, err, pod.Spec.Volumes)
			}
			continue
		}
		if err != nil {
			t.Fatalf("pod %s's Secret: %v", name, err)
		}
		if !bytes.Equal(s.Data[tlsid.KeyFile], spec.TLS.Key) || !bytes.Equal(s.Data[tlsid.CertFile], spec.TLS.Cert) || !bytes.Equal(s.Data[tlsid.CACertFile], spec.TLS.CA) {
			t.Errorf("Secret %s = %v, want the bundle", s.Name, s.Data)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Pod" || s.OwnerReferences[0].Name != name {
			t.Errorf("Secret %s's owners = %+v, want pod %s", s.Name, s.OwnerReferences, name)
		}
		checkSecretMount(t, pod, s.Name, TLSMountPath)
		if !hasEnv(pod, cluster.EnvTLSDir+"="+TLSMountPath) {
			t.Errorf("pod %s: no %s=%s", name, cluster.EnvTLSDir, TLSMountPath)
		}
	}
}

func hasEnv(pod *corev1.Pod, kv string) bool {
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == kv || e.Name+"="+e.Value == kv {
			return true
		}
	}
	return false
}

func TestLaunchReplacesStaleTLSSecret(t *testing.T) {
	name := InstancePodName("j", cluster.Worker, 0)
	stale := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: InstanceTLSSecretName(name), Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: "an-earlier-pod"}}},
		Data: map[string][]byte{tlsid.KeyFile: []byte("old")}}
	client := fake.NewClientset(stale)
	b := newFakeBackend(t, client, &fakeClock{now: time.Unix(0, 0)})
	if err := b.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 0, TLS: testBundle("w0")}); err != nil {
		t.Fatal(err)
	}
	s, err := client.CoreV1().Secrets("ns").Get(context.Background(), stale.Name, metav1.GetOptions{})
	if err != nil || string(s.Data[tlsid.KeyFile]) != "SECRET-KEY-w0" {
		t.Fatalf("Secret after launch: %v, %v; want the new bundle", s, err)
	}
}

func TestLaunchTLSSecretRefusedDeletesPod(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "x", nil)
	})
	b := newFakeBackend(t, client, &fakeClock{now: time.Unix(0, 0)})
	err := b.Launch(context.Background(), cluster.InstanceSpec{Role: cluster.Worker, ID: 0, TLS: testBundle("w0")})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("Launch = %v, want forbidden", err)
	}
	if _, err := client.CoreV1().Pods("ns").Get(context.Background(), InstancePodName("j", cluster.Worker, 0), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod without its Secret: %v, want deleted", err)
	}
}

func TestCASecretAndMount(t *testing.T) {
	now := time.Now()
	ca, err := tlsid.NewCA("j", now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewCASecret("j", "ns", ca)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != CASecretName("j") || s.Type != corev1.SecretTypeOpaque || s.Labels[LabelJob] != "j" {
		t.Errorf("CA Secret %s type %s labels %v", s.Name, s.Type, s.Labels)
	}
	if _, err := tlsid.ParseCA(s.Data[tlsid.CACertFile], s.Data[tlsid.CAKeyFile], "j"); err != nil {
		t.Errorf("the Secret's CA does not parse back: %v", err)
	}
	pod := NewPod("m", "ns", JobLabels("j", ReplicaMaster), PodSettings{Image: "img"}, []string{"master"}, nil)
	MountCA(&pod.Spec, "j")
	checkSecretMount(t, pod, CASecretName("j"), CAMountPath)
}
