package e2e

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"elasticdl/data"
	"elasticdl/internal/master"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/storage"
	"elasticdl/internal/storage/storagetest"
)

// TestK8sObjectStorage runs a job with no volume: its data (Parquet), its
// checkpoints and its output (model, summary) are on the test S3 server,
// and every pod gets the credentials from a Secret (--s3_secret) and from
// nowhere else (procnode passes none of the test's environment).
func TestK8sObjectStorage(t *testing.T) {
	timeTest(t)
	store, loc := storagetest.Store(t)
	ctx := context.Background()
	src, err := data.Open("synthetic-ctr://?records=12000&seed=3")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for name, r := range map[string][2]int64{"train.parquet": {0, 10000}, "test.parquet": {10000, 12000}} {
		var b bytes.Buffer
		if _, _, err := data.ExportParquet(&b, src, r[0], r[1], 0); err != nil {
			t.Fatal(err)
		}
		if err := storage.WriteAll(ctx, store, "data/"+name, b.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	ns := newNamespace(t)
	secret := []string{"create", "secret", "generic", "objstore", "-n", ns}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"} {
		if v := os.Getenv(k); v != "" {
			secret = append(secret, "--from-literal="+k+"="+v)
		}
	}
	kubectl(t, secret...)
	label := startProcNodes(t, "e2e-s3", 1, "4", "8Gi")
	j := newJob(t, ns, uniqueName(t, "s3"), label)
	submitJob(t, j, "--model_def=ctr.deepfm", "--training_data="+loc+"/data/train.parquet", "--validation_data="+loc+"/data/test.parquet",
		"--output="+loc+"/out", "--checkpoint_dir="+loc+"/ckpt", "--checkpoint_steps=20", "--keep_checkpoint_max=2",
		"--s3_secret=objstore", "--minibatch_size=64")
	r := waitSucceeded(t, j, 3*time.Minute)
	if e := r.Summary.Epochs; len(e) != 1 || e[0].RecordsTrained != 10000 || e[0].RecordsTrainedTwice != 0 || e[0].RecordsMissed != 0 {
		t.Errorf("epochs %+v: want 10000 records trained once", e)
	}
	if r.Summary.Eval == nil || r.Summary.Eval.Records != 2000 {
		t.Errorf("evaluation %+v: want 2000 records", r.Summary.Eval)
	}
	// No volume for data, checkpoints or output: the only one is the
	// job's TLS CA, a Secret.
	for _, kind := range []string{"persistentVolumeClaim", "hostPath", "emptyDir"} {
		if vols := kubectl(t, "get", "job", "-n", ns, j.masterJob(), "-o", "jsonpath={.spec.template.spec.volumes[*]."+kind+"}"); strings.TrimSpace(vols) != "" {
			t.Errorf("the master pod has a %s volume: %s", kind, vols)
		}
	}
	s, err := master.ReadSummary(loc + "/out")
	if err != nil || s.Status != "succeeded" || !strings.HasPrefix(s.ModelPath, loc+"/out/model/") {
		t.Errorf("summary on S3: %+v, %v", s, err)
	}
	set, err := checkpoint.Load(loc+"/ckpt", nil)
	if err != nil {
		t.Fatalf("checkpoints on S3: %v", err)
	}
	if vs, _ := checkpoint.Versions(loc + "/ckpt"); len(vs) > 3 {
		t.Errorf("versions %v left with --keep_checkpoint_max=2", vs)
	}
	t.Logf("newest whole checkpoint on S3: version %d, %d shards; model %s", set.Version, set.NumShards, s.ModelPath)
}
