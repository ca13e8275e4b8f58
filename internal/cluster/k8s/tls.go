package k8s

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"elasticdl/internal/cluster"
	"elasticdl/internal/tlsid"
)

// Where a job's TLS material is mounted: the CA (certificate and key) in
// the master pod only, each worker's and PS's own bundle in its pod.
const (
	CAMountPath  = "/etc/elasticdl/ca"
	TLSMountPath = "/etc/elasticdl/tls"
	caVolume     = "tls-ca"
	tlsVolume    = "tls"
	// secretMode: only the owner reads a key. The kubelet makes a secret
	// volume's files root's, adding group read for the pod's fsGroup; the
	// image runs as a non-root user, so the pod gets SecretFSGroup.
	secretMode = int32(0o400)
	// SecretFSGroup is the fsGroup of a pod that mounts a Secret: the
	// group of deploy/Dockerfile's user (distroless nonroot, 65532); the
	// kubelet adds it to the container's groups whatever its user.
	SecretFSGroup = int64(65532)
)

// CASecretName names the Secret that holds a job's CA (ca.crt, ca.key).
func CASecretName(job string) string { return "elasticdl-" + job + "-tls-ca" }

// InstanceTLSSecretName names the Secret that holds one pod's bundle.
func InstanceTLSSecretName(pod string) string { return pod + "-tls" }

// NewCASecret builds the Secret of job's CA. It has no owner yet: the Job
// that will own it does not exist (OwnSecret gives it one).
func NewCASecret(job, namespace string, ca *tlsid.CA) (*corev1.Secret, error) {
	cert, key, err := ca.PEM()
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: CASecretName(job), Namespace: namespace, Labels: JobLabels(job, ReplicaMaster)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{tlsid.CACertFile: cert, tlsid.CAKeyFile: key},
	}, nil
}

// newBundleSecret builds the Secret of one pod's bundle, owned by the pod.
func newBundleSecret(pod *corev1.Pod, b *tlsid.Bundle) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      InstanceTLSSecretName(pod.Name),
			Namespace: pod.Namespace,
			Labels:    pod.Labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{tlsid.CACertFile: b.CA, tlsid.CertFile: b.Cert, tlsid.KeyFile: b.Key},
	}
}

// MountSecret adds Secret secret to a pod spec as volume name, read-only
// at mountPath in its first container, its files 0400 (0440 for the
// pod's fsGroup, SecretFSGroup unless set).
func MountSecret(spec *corev1.PodSpec, name, secret, mountPath string) {
	mode := secretMode
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: &mode},
	}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: mountPath, ReadOnly: true})
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.SecurityContext.FSGroup == nil {
		g := SecretFSGroup
		spec.SecurityContext.FSGroup = &g
	}
}

// MountCA mounts job's CA Secret into the master pod at CAMountPath.
func MountCA(spec *corev1.PodSpec, job string) {
	MountSecret(spec, caVolume, CASecretName(job), CAMountPath)
}

// mountBundle mounts the pod's own bundle Secret at TLSMountPath and names
// it in cluster.EnvTLSDir. The pod spec holds no key: the Secret does.
func mountBundle(pod *corev1.Pod) {
	MountSecret(&pod.Spec, tlsVolume, InstanceTLSSecretName(pod.Name), TLSMountPath)
	c := &pod.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: cluster.EnvTLSDir, Value: TLSMountPath})
}

// createBundleSecret creates the Secret of pod's bundle, owned by the pod
// (created just before: its UID is known), so that it goes with the pod;
// the kubelet waits for a secret volume until it exists. A Secret of that
// name (left by an earlier pod and not yet collected, or by a retried
// create that got through) is replaced: the master need not read Secrets,
// so its Role does not let it (deploy/rbac.yaml).
func (b *Backend) createBundleSecret(ctx context.Context, pod *corev1.Pod, bundle *tlsid.Bundle) error {
	s := newBundleSecret(pod, bundle)
	secrets := b.cfg.Client.CoreV1().Secrets(b.cfg.Namespace)
	return b.retry(ctx, func(ctx context.Context) error {
		_, err := secrets.Create(ctx, s, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		if derr := secrets.Delete(ctx, s.Name, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
			return derr
		}
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		return err
	})
}
