package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
	"elasticdl/internal/tlsid"
)

// jobObjects are what the client creates for a k8s job besides its master
// Job: the Secret of its CA (with --tls) and its NetworkPolicy
// (--network_policy); nil when not wanted.
type jobObjects struct {
	ca     *corev1.Secret
	policy *networkingv1.NetworkPolicy
}

// newJobObjects makes the job's CA, valid now..now+--tls_validity, into a
// Secret that mj's master pod mounts at k8s.CAMountPath and reads with
// --tls_ca_dir; a master pod that replaces it mounts the same Secret, so
// the job keeps its CA. It also builds the NetworkPolicy.
func newJobObjects(mj *batchv1.Job, cfg master.Config, o jobOptions) (jobObjects, error) {
	var objs jobObjects
	ns := o.k8s.namespace
	if o.tls {
		now := time.Now()
		ca, err := tlsid.NewCA(cfg.JobName, now, now.Add(o.tlsValidity))
		if err != nil {
			return objs, err
		}
		if objs.ca, err = k8s.NewCASecret(cfg.JobName, ns, ca); err != nil {
			return objs, err
		}
		spec := &mj.Spec.Template.Spec
		k8s.MountCA(spec, cfg.JobName)
		spec.Containers[0].Args = append(spec.Containers[0].Args, "--tls_ca_dir="+k8s.CAMountPath)
	}
	if o.k8s.networkPolicy {
		objs.policy = k8s.NewNetworkPolicy(cfg.JobName, ns, o.k8s.metricsNamespace, cfg.MetricsPort, cfg.NumPS)
	}
	return objs, nil
}

// printManifests is --yaml: the CA Secret first (a master pod waits for
// it), then the NetworkPolicy and the master's Job, as YAML documents.
// Neither has an owner (the Job's UID is not known yet): `elasticdl stop`
// deletes them by name.
func printManifests(env Env, mj *batchv1.Job, objs jobObjects) error {
	var docs []any
	if objs.ca != nil {
		docs = append(docs, objs.ca)
	}
	if objs.policy != nil {
		docs = append(docs, objs.policy)
	}
	docs = append(docs, mj)
	for i, d := range docs {
		out, err := yaml.Marshal(d)
		if err != nil {
			return fmt.Errorf("manifest: %w", err)
		}
		if i > 0 {
			out = append([]byte("---\n"), out...)
		}
		if _, err := env.Stdout.Write(out); err != nil {
			return err
		}
	}
	return nil
}

// createSecrets creates, before the Job, the Secrets its pods read: the
// job's CA and the database password (password non-empty); undo deletes
// those it made.
func createSecrets(ctx context.Context, client *k8s.Client, cfg master.Config, o k8sOptions, password string, objs jobObjects) (undo func() error, err error) {
	var made []string
	undo = func() error {
		var errs []error
		for _, name := range made {
			if err := client.DeleteSecret(context.WithoutCancel(ctx), o.namespace, name); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	if objs.ca != nil {
		if err := client.CreateSecret(ctx, objs.ca); err != nil {
			return undo, err
		}
		made = append(made, objs.ca.Name)
	}
	if password != "" {
		name, err := client.CreatePasswordSecret(ctx, o.namespace, cfg.JobName, password)
		if err != nil {
			return undo, err
		}
		made = append(made, name)
	}
	return undo, nil
}

// ownObjects makes the master Job, now created, the owner of the job's
// Secrets and NetworkPolicy.
func ownObjects(ctx context.Context, client *k8s.Client, cfg master.Config, o k8sOptions, password string, objs jobObjects) error {
	if objs.ca != nil {
		if err := client.OwnSecret(ctx, o.namespace, cfg.JobName, objs.ca.Name); err != nil {
			return err
		}
	}
	if password != "" {
		if err := client.OwnSecret(ctx, o.namespace, cfg.JobName, o.dbPasswordSecret); err != nil {
			return err
		}
	}
	if objs.policy != nil {
		return client.CreateNetworkPolicy(ctx, cfg.JobName, objs.policy)
	}
	return nil
}
