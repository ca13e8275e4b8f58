package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// TestK8sSQL runs `elasticdl sql --backend=k8s` on SQLite, and on
// PostgreSQL with a password when hack/db.sh's server is there
// (ELASTICDL_TEST_POSTGRES): TO TRAIN stores the job's model in the
// database, TO EVALUATE of it writes its AUC, TO PREDICT a prediction per
// input row. The password
// reaches the pods through a Secret the job owns, never in a pod spec.
func TestK8sSQL(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-sql", 1, "4", "8Gi")
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) { sqlOnK8s(t, sqldbtest.Open(t, name), ns, label) })
	}
}

func sqlOnK8s(t *testing.T, db *sqldbtest.DB, ns, label string) {
	table := sqlE2ETable(t, db, 400)
	model := fmt.Sprintf("m_%08x", rand.Uint32())
	pred, results := "p_"+model, "r_"+model
	t.Cleanup(func() {
		db.SQL.Exec("DELETE FROM " + sqldb.ModelsTable + " WHERE name = '" + model + "'")
		db.SQL.Exec("DROP TABLE IF EXISTS " + pred)
		db.SQL.Exec("DROP TABLE IF EXISTS " + results)
	})
	j := newJob(t, ns, uniqueName(t, "sql"), label)
	// SQLite needs no password: set, it takes the Secret's path all the same.
	password := sqldb.Password(db.URI)
	if password == "" {
		password = "sqlite-ignores-it"
	}
	seen := watchJobObjects(t, ns, j.name)
	args := []string{"sql", "--datasource=" + sqldb.StripPassword(db.URI), "--shared_dir=" + j.output,
		"--backend=k8s", "--image=elasticdl:e2e", "--namespace=" + ns, "--job_name=" + j.name,
		"--ps_host=127.0.0.1", "--master_host=127.0.0.1", "--node_selector=e2e=" + label,
		fmt.Sprintf("--master_port=%d", j.masterPort), fmt.Sprintf("--ps_port=%d", j.psPort), "--num_workers=1",
		"--master_resource_request=cpu=250m,memory=256Mi", "--ps_resource_request=cpu=250m,memory=256Mi",
		"--worker_resource_request=cpu=500m,memory=256Mi", "-e",
		"SELECT * FROM " + table + " TO TRAIN ctr.wide_and_deep WITH train.epoch = 1, train.minibatch_size = 64 LABEL y INTO " + model + ";\n" +
			"SELECT * FROM " + table + " TO EVALUATE " + model + " WITH validation.metrics = 'AUC' LABEL y INTO " + results + ";\n" +
			"SELECT x1, x2, c FROM " + table + " TO PREDICT " + pred + ".y USING " + model}
	out, code, took := cli(t, []string{sqldb.EnvPassword + "=" + password}, 2*time.Minute, args...)
	if code != 0 {
		t.Fatalf("elasticdl sql --backend=k8s exited %d after %.1fs:\n%s", code, took.Seconds(), out)
	}
	t.Logf("elasticdl sql --backend=k8s: TO TRAIN, TO EVALUATE and TO PREDICT in %.1fs:\n%s", took.Seconds(), out)
	for _, re := range []string{"model " + model + " stored in table elasticdl_models",
		"1 metric of model " + model + " on 400 rows written into " + results, "400 predictions of model " + model + " written into " + pred} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output has no %q", re)
		}
	}
	var models, rows int
	if err := db.SQL.QueryRow("SELECT COUNT(*) FROM " + sqldb.ModelsTable + " WHERE name = '" + model + "'").Scan(&models); err != nil || models != 1 {
		t.Errorf("model rows of %s: %d (%v), want 1", model, models, err)
	}
	if err := db.SQL.QueryRow("SELECT COUNT(*) FROM " + pred + " WHERE y IS NOT NULL").Scan(&rows); err != nil || rows != 400 {
		t.Errorf("predictions in %s: %d (%v), want 400", pred, rows, err)
	}
	// Each statement's job ran on the cluster.
	if n := strings.Count(out, "submitted: Job "+j.masterJob()); n != 3 || strings.Contains(out, "backend=local") {
		t.Errorf("%d jobs submitted to Kubernetes, want 3 (TO TRAIN, TO EVALUATE, TO PREDICT), none local", n)
	}
	if strings.Contains(out, password) {
		t.Error("the CLI's output holds the password")
	}
	seen.check(t, j, password, 3)
}

// sqlE2ETable makes a table of n rows ctr.wide_and_deep learns.
func sqlE2ETable(t *testing.T, db *sqldbtest.DB, n int) string {
	table := db.NewTable(t, "x1 DOUBLE PRECISION", "x2 DOUBLE PRECISION", "c TEXT", "y INTEGER")
	rng := rand.New(rand.NewPCG(1, 1))
	var rows [][]any
	for range n {
		x1, x2, c := rng.NormFloat64(), rng.NormFloat64(), []string{"a", "b"}[rng.IntN(2)]
		y := 0
		if x1+0.5*x2 > 0 {
			y = 1
		}
		rows = append(rows, []any{x1, x2, c, y})
	}
	db.Insert(t, table, "x1, x2, c, y", rows...)
	return table
}

// jobObjects are the pods and Secrets of a job, as a watch saw them.
type jobObjects struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	secrets map[string]*corev1.Secret
}

// watchJobObjects watches job's pods and Secrets from before it starts
// until the test ends.
func watchJobObjects(t *testing.T, ns, job string) *jobObjects {
	t.Helper()
	o := &jobObjects{pods: map[string]*corev1.Pod{}, secrets: map[string]*corev1.Secret{}}
	f := informers.NewSharedInformerFactoryWithOptions(scaleClient(t), 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = k8s.JobSelector(job) }))
	add := func(obj any) {
		o.mu.Lock()
		defer o.mu.Unlock()
		switch v := obj.(type) {
		case *corev1.Pod:
			o.pods[string(v.UID)] = v // a worker's name comes back in the next job
		case *corev1.Secret:
			o.secrets[v.Name] = v
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }}
	pods, secrets := f.Core().V1().Pods().Informer(), f.Core().V1().Secrets().Informer()
	pods.AddEventHandler(h)
	secrets.AddEventHandler(h)
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), pods.HasSynced, secrets.HasSynced) {
		t.Fatal("watch the job's pods and Secrets: not synced in 30s")
	}
	return o
}

// check: each of jobs jobs had a master and a worker pod, each pod taking the
// password from the job's Secret, which its master Job owned; no pod spec
// held the password itself.
func (o *jobObjects) check(t *testing.T, j *job, password string, jobs int) {
	t.Helper()
	secret := k8s.DBPasswordSecretName(j.name)
	o.mu.Lock()
	defer o.mu.Unlock()
	roles := map[string]int{}
	for _, p := range o.pods {
		roles[p.Labels[k8s.LabelReplicaType]]++
		var from string
		for _, e := range p.Spec.Containers[0].Env {
			if strings.Contains(e.Value, password) {
				t.Errorf("pod %s: env %s holds the password", p.Name, e.Name)
			}
			if e.Name == sqldb.EnvPassword && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				from = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			}
		}
		if want := secret + "/" + k8s.SecretKeyPassword; from != want {
			t.Errorf("pod %s: %s from %q, want from Secret key %s", p.Name, sqldb.EnvPassword, from, want)
		}
		if strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), password) {
			t.Errorf("pod %s: its arguments hold the password", p.Name)
		}
	}
	if roles[k8s.ReplicaMaster] != jobs || roles["worker"] < jobs {
		t.Errorf("pods seen by role: %v, want %d master pods and as many worker pods at least", roles, jobs)
	}
	s := o.secrets[secret]
	if s == nil {
		t.Fatalf("no Secret %s seen (Secrets: %d)", secret, len(o.secrets))
	}
	owned := false
	for _, r := range s.OwnerReferences {
		owned = owned || (r.Kind == "Job" && r.Name == j.masterJob())
	}
	if !owned {
		t.Errorf("Secret %s: owners %+v, want the job's master Job", secret, s.OwnerReferences)
	}
}
