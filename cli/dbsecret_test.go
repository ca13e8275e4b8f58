package cli

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
	"elasticdl/internal/sqldb"
)

const testPassword = "pw-never-in-a-spec"

// With --db_password_secret the master pod takes the password from the
// Secret, and passes the flag on so its worker and PS pods do too; no
// manifest holds the password itself.
func TestDBPasswordSecretManifests(t *testing.T) {
	t.Setenv(sqldb.EnvPassword, testPassword)
	db := "--training_data=postgres://u@db:5432/d?table=t&label=y"
	code, out, errOut := run(t, k8sTrain("--yaml", db, "--db_password_secret=dbpw")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"name: " + sqldb.EnvPassword, "secretKeyRef:", "key: " + k8s.SecretKeyPassword, "name: dbpw", "- --db_password_secret=dbpw"} {
		if !strings.Contains(out, want) {
			t.Errorf("master manifest lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, testPassword) {
		t.Errorf("master manifest holds the password:\n%s", out)
	}
	cfg, opts, _, err := parseMasterFlags(Env{}, master.ModeTrain, []string{"--model_def=fashion_mnist.mlp", db, "--db_password_secret=dbpw"})
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
		if !strings.Contains(string(pod), "secretKeyRef:") || !strings.Contains(string(pod), "name: dbpw") || strings.Contains(string(pod), testPassword) {
			t.Errorf("worker or PS pod, want the password from Secret dbpw only:\n%s", pod)
		}
	}
}

// A printed manifest cannot get the password into a Secret: --yaml with
// the password set and database data asks for --db_password_secret, and
// --envs never carries it.
func TestDBPasswordRefusedInSpecs(t *testing.T) {
	t.Setenv(sqldb.EnvPassword, testPassword)
	for _, c := range []struct {
		args []string
		want string
	}{
		{k8sTrain("--yaml", "--training_data=postgres://u@db:5432/d?table=t&label=y"), "give --db_password_secret"},
		{k8sTrain("--yaml", "--envs="+sqldb.EnvPassword+"=x"), "--envs: " + sqldb.EnvPassword + " would put the password in the pod spec"},
		{k8sTrain("--yaml", "--training_data=postgres://u:"+testPassword+"@db:5432/d?table=t&label=y"), "give --db_password_secret"},
		{k8sTrain("--yaml", "--db_password_secret=s", "--training_data=postgres://u:a@db:5432/d?table=t&label=y",
			"--validation_data=postgres://u:b@db:5432/d?table=v&label=y"), "--validation_data: another password than the other data's"},
	} {
		code, _, errOut := run(t, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, testPassword) {
			t.Errorf("%q: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
	// Data that is no database needs no password: the manifest is printed.
	if code, _, errOut := run(t, k8sTrain("--yaml")...); code != 0 {
		t.Errorf("--yaml with file data: exit %d: %s", code, errOut)
	}
}

// A password in a data URI is taken out of the master pod's arguments:
// the pods get it from the Secret.
func TestDBPasswordOutOfURI(t *testing.T) {
	code, out, errOut := run(t, k8sTrain("--yaml", "--db_password_secret=dbpw", "--training_data=postgres://u:"+testPassword+"@db:5432/d?table=t&label=y")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, testPassword) || !strings.Contains(out, "- --training_data=postgres://u@db:5432/d?table=t&label=y") || !strings.Contains(out, "name: dbpw") {
		t.Errorf("manifest, want the URI without its password and the password from Secret dbpw:\n%s", out)
	}
}
