package cli

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
)

// With --s3_secret every pod gets the Secret's keys as its environment
// (envFrom): the master pod from the client, its worker and PS pods from
// the flag the master is passed; no manifest holds a credential.
func TestS3SecretManifests(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-never-in-a-spec")
	args := []string{"--training_data=s3://b/train.parquet", "--checkpoint_dir=s3://b/ckpt", "--output=s3://b/out", "--s3_secret=objstore"}
	code, out, errOut := run(t, k8sTrain(append([]string{"--yaml"}, args...)...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"envFrom:", "secretRef:", "name: objstore", "- --s3_secret=objstore", "- --output=s3://b/out"} {
		if !strings.Contains(out, want) {
			t.Errorf("master manifest lacks %q:\n%s", want, out)
		}
	}
	cfg, opts, _, err := parseMasterFlags(Env{}, master.ModeTrain, append([]string{"--model_def=fashion_mnist.mlp"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	worker, ps, _, err := jobPodSettings(opts.k8s, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []k8s.PodSettings{worker, ps} {
		pod, err := yaml.Marshal(k8s.NewPod("p", "ns", nil, s, []string{"worker"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(pod), "secretRef:") || !strings.Contains(string(pod), "name: objstore") {
			t.Errorf("worker or PS pod, want envFrom Secret objstore:\n%s", pod)
		}
	}
	if strings.Contains(out, "secret-never-in-a-spec") {
		t.Errorf("a manifest holds the secret key:\n%s", out)
	}
}
