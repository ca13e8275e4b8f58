package k8s

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SecretKeyPassword is the key of a database password in its Secret
// (--db_password_secret).
const SecretKeyPassword = "password"

// DBPasswordSecretName names the Secret the client creates for a job's
// database password.
func DBPasswordSecretName(job string) string { return "elasticdl-" + job + "-db-password" }

// SecretEnv is an environment variable taken from key of Secret secret:
// the pod spec names the Secret, never the value.
func SecretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key},
	}}
}

// CreatePasswordSecret creates the Secret DBPasswordSecretName(job) that
// holds password under SecretKeyPassword. It has no owner yet: the Job
// that will own it does not exist (OwnSecret gives it one).
func (c *Client) CreatePasswordSecret(ctx context.Context, namespace, job, password string) (string, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: DBPasswordSecretName(job), Namespace: namespace, Labels: JobLabels(job, ReplicaMaster)},
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{SecretKeyPassword: password},
	}
	if _, err := c.cs.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create Secret %s for the database password: %w", s.Name, err)
	}
	return s.Name, nil
}

// CreateSecret creates s (a job's CA: NewCASecret). A Secret of that name
// already there is most likely a job of the same name.
func (c *Client) CreateSecret(ctx context.Context, s *corev1.Secret) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	_, err := c.cs.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("Secret %s exists in namespace %s: is job %s there? (`elasticdl stop %s --namespace=%s`, or choose another --job_name): %w",
			s.Name, s.Namespace, s.Labels[LabelJob], s.Labels[LabelJob], s.Namespace, err)
	}
	if err != nil {
		return fmt.Errorf("create Secret %s: %w", s.Name, err)
	}
	return nil
}

// OwnSecret makes job's master Job the owner of Secret name, so that
// deleting the job deletes it, as it does the job's ConfigMaps.
func (c *Client) OwnSecret(ctx context.Context, namespace, job, name string) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	mj, err := c.cs.BatchV1().Jobs(namespace).Get(ctx, MasterName(job), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Job %s to own Secret %s: %w", MasterName(job), name, err)
	}
	patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"batch/v1","kind":"Job","name":%q,"uid":%q,"blockOwnerDeletion":true}]}}`, mj.Name, mj.UID)
	if _, err := c.cs.CoreV1().Secrets(namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("make Job %s the owner of Secret %s: %w", mj.Name, name, err)
	}
	return nil
}

// DeleteSecret deletes Secret name; one already gone is no error.
func (c *Client) DeleteSecret(ctx context.Context, namespace, name string) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	err := c.cs.CoreV1().Secrets(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Secret %s: %w", name, err)
	}
	return nil
}

// WaitJob waits until job has ended, asking every interval, and returns
// its status then. An unknown job (stopped meanwhile) is an error
// wrapping ErrNoJob.
func (c *Client) WaitJob(ctx context.Context, namespace, job string, interval time.Duration) (*JobStatus, error) {
	for {
		st, err := c.JobStatus(ctx, namespace, job)
		if err != nil {
			return nil, err
		}
		if st.Result != "" {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// WaitJobGone waits, bounded by the Client's timeout, until job's master
// Job is gone: StopJob's foreground deletion removes it last, after the
// objects it owns (its Secret among them), so that then a job of the same
// name can be made.
func (c *Client) WaitJobGone(ctx context.Context, namespace, job string) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	jobs := c.cs.BatchV1().Jobs(namespace)
	for {
		_, err := jobs.Get(ctx, MasterName(job), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s: Job %s still there after %s", job, MasterName(job), c.timeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
