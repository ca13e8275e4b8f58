package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
	"elasticdl/internal/tlsid"
)

// yamlDocs splits --yaml's output into its documents by kind.
func yamlDocs(t *testing.T, out string) map[string]string {
	t.Helper()
	docs := map[string]string{}
	for _, d := range strings.Split(out, "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(d), &meta); err != nil {
			t.Fatalf("document %q: %v", d, err)
		}
		docs[meta.Kind] = d
	}
	return docs
}

// With --tls (the default) --yaml prints the CA Secret, the NetworkPolicy
// and the Job, whose master pod mounts the Secret and reads it with
// --tls_ca_dir.
func TestYAMLWithTLS(t *testing.T) {
	code, out, errOut := run(t, k8sTrain("--yaml", "--metrics_port=9100", "--metrics_namespace=monitoring", "--num_ps_pods=2")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	docs := yamlDocs(t, out)
	var s corev1.Secret
	if err := yaml.Unmarshal([]byte(docs["Secret"]), &s); err != nil {
		t.Fatal(err)
	}
	if s.Name != k8s.CASecretName("t1") || s.Labels[k8s.LabelJob] != "t1" || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("CA Secret: %s %v %s", s.Name, s.Labels, s.Type)
	}
	if _, err := tlsid.ParseCA(s.Data[tlsid.CACertFile], s.Data[tlsid.CAKeyFile], "t1"); err != nil {
		t.Errorf("the Secret holds no CA of job t1: %v", err)
	}
	var mj batchv1.Job
	if err := yaml.Unmarshal([]byte(docs["Job"]), &mj); err != nil {
		t.Fatal(err)
	}
	c := mj.Spec.Template.Spec.Containers[0]
	if !strings.Contains(strings.Join(c.Args, " "), "--tls_ca_dir="+k8s.CAMountPath) {
		t.Errorf("master args %q lack --tls_ca_dir", c.Args)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != k8s.CAMountPath || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("master mounts %+v", c.VolumeMounts)
	}
	if v := mj.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].Secret == nil || v[0].Secret.SecretName != s.Name || *v[0].Secret.DefaultMode != 0o400 {
		t.Errorf("master volumes %+v", v)
	}
	for _, not := range []string{"--metrics_namespace", "--network_policy", "PRIVATE KEY"} {
		if strings.Contains(docs["Job"], not) {
			t.Errorf("the Job holds %q", not)
		}
	}
	var np networkingv1.NetworkPolicy
	if err := yaml.Unmarshal([]byte(docs["NetworkPolicy"]), &np); err != nil {
		t.Fatal(err)
	}
	if np.Name != k8s.NetworkPolicyName("t1") || len(np.Spec.Ingress) != 2 || *np.Spec.Ingress[1].Ports[0].EndPort != 9100+1+2 {
		t.Errorf("NetworkPolicy %+v", np)
	}
}

func TestYAMLWithoutTLS(t *testing.T) {
	code, out, errOut := run(t, k8sTrain("--yaml", "--tls=false", "--network_policy=false")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	docs := yamlDocs(t, out)
	if len(docs) != 1 || docs["Job"] == "" {
		t.Fatalf("documents %v, want the Job alone", len(docs))
	}
	if strings.Contains(out, "tls_ca_dir") || strings.Contains(out, "secretName") {
		t.Errorf("a job without TLS mounts a CA:\n%s", out)
	}
	if !strings.Contains(out, "- --tls=false") {
		t.Errorf("the master is not told --tls=false:\n%s", out)
	}
}

// newFakeK8s is a fake cluster with namespace ns's ServiceAccount
// elasticdl, where every access review says yes.
func newFakeK8s(t *testing.T) (*fake.Clientset, *k8s.Client) {
	t.Helper()
	cs := fake.NewClientset(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "elasticdl", Namespace: "default"}})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		r.Status.Allowed = true
		return true, r, nil
	})
	return cs, k8s.NewClient(cs, 5*time.Second)
}

// buildJob parses a k8s train command line into what createJob takes.
func buildJob(t *testing.T, extra ...string) (*batchv1.Job, master.Config, jobOptions, jobObjects) {
	t.Helper()
	cfg, opts, _, err := parseMasterFlags(Env{}, master.ModeTrain, append([]string{"--model_def=fashion_mnist.mlp", "--job_name=t1",
		"--training_data=/data/train", "--image=img"}, extra...))
	if err != nil {
		t.Fatal(err)
	}
	fs := newFlagSet(Env{}, "train")
	mj, err := masterJob(fs, cfg, opts.k8s, 0)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := newJobObjects(mj, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return mj, cfg, opts, objs
}

// The CA Secret is made before the Job and then owned by it, as is the
// NetworkPolicy made after it.
func TestCreateJobOwnsTLSObjects(t *testing.T) {
	cs, client := newFakeK8s(t)
	mj, cfg, opts, objs := buildJob(t)
	ctx := context.Background()
	if err := createJob(ctx, client, mj, cfg, opts.k8s, "", objs); err != nil {
		t.Fatal(err)
	}
	s, err := cs.CoreV1().Secrets("default").Get(ctx, k8s.CASecretName("t1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np, err := cs.NetworkingV1().NetworkPolicies("default").Get(ctx, k8s.NetworkPolicyName("t1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for what, owners := range map[string][]metav1.OwnerReference{"CA Secret": s.OwnerReferences, "NetworkPolicy": np.OwnerReferences} {
		if len(owners) != 1 || owners[0].Kind != "Job" || owners[0].Name != k8s.MasterName("t1") {
			t.Errorf("%s owners %+v, want the master's Job", what, owners)
		}
	}
}

// A submission that fails after the CA Secret was made deletes it.
func TestCreateJobFailedDeletesCASecret(t *testing.T) {
	cs, client := newFakeK8s(t)
	cs.PrependReactor("create", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "x", nil)
	})
	mj, cfg, opts, objs := buildJob(t)
	ctx := context.Background()
	if err := createJob(ctx, client, mj, cfg, opts.k8s, "", objs); !apierrors.IsForbidden(err) {
		t.Fatalf("createJob = %v, want forbidden", err)
	}
	if _, err := cs.CoreV1().Secrets("default").Get(ctx, k8s.CASecretName("t1"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("CA Secret after a failed submission: %v, want deleted", err)
	}
}
