package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func secretLister(t *testing.T, secrets ...*corev1.Secret) corev1listers.SecretLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, s := range secrets {
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	return corev1listers.NewSecretLister(idx)
}

func TestSecretVolumes(t *testing.T) {
	mode := int32(0o400)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: &mode}}},
			{Name: "one", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s",
				Items: []corev1.KeyToPath{{Key: "a", Path: "sub/x"}}}}},
		}},
	}
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/x/tls"}, {Name: "one", MountPath: "/etc/x/tls/one"}}}
	dir := t.TempDir()
	if _, err := secretVolumes(pod, c, dir, secretLister(t)); !errors.As(err, new(configError)) {
		t.Fatalf("missing Secret: got %v, want a configError (retried)", err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Data: map[string][]byte{"a": []byte("A"), "b": []byte("B")}}
	m, err := secretVolumes(pod, c, dir, secretLister(t, s))
	if err != nil {
		t.Fatal(err)
	}
	tlsDir := filepath.Join(dir, "volumes", "tls")
	for _, k := range []string{"a", "b"} {
		st, err := os.Stat(filepath.Join(tlsDir, k))
		if err != nil || st.Mode().Perm() != 0o400 {
			t.Fatalf("%s: %v, mode %v; want 0400", k, err, st)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "volumes", "one", "sub", "x")); err != nil || string(b) != "A" {
		t.Fatalf("item sub/x: %q, %v", b, err)
	}
	argv := []string{"elasticdl", "--ca=/etc/x/tls", "/etc/x/tls/one/sub/x", "/etc/x/tlsother"}
	env := []string{"D=/etc/x/tls/a", "E=x"}
	m.rewriteAll(argv, env)
	want := []string{"elasticdl", "--ca=" + tlsDir, filepath.Join(dir, "volumes", "one", "sub", "x"), "/etc/x/tlsother"}
	for i := range want {
		if argv[i] != want[i] {
			t.Errorf("argv[%d] = %q, want %q", i, argv[i], want[i])
		}
	}
	if env[0] != "D="+filepath.Join(tlsDir, "a") || env[1] != "E=x" {
		t.Errorf("env = %q", env)
	}
}
