package e2e

import (
	"bytes"
	"encoding/base64"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The mounts of a job's TLS material (internal/cluster/k8s/tls.go).
const (
	caMountPath  = "/etc/elasticdl/ca"
	tlsMountPath = "/etc/elasticdl/tls"
)

type secretObj struct {
	Metadata objectMeta
	Type     string
	Data     map[string]string
}

type volumePod struct {
	Metadata objectMeta
	Spec     struct {
		Volumes []struct {
			Name   string
			Secret *struct {
				SecretName  string
				DefaultMode *int
			}
		}
		Containers []struct {
			Args         []string
			Env          []envVar
			VolumeMounts []struct {
				Name, MountPath string
				ReadOnly        bool
			}
		}
	}
}

// checkSecretMount checks that pod mounts Secret secret, files 0400,
// read-only at path.
func checkSecretMount(t *testing.T, p volumePod, secret, path string) {
	t.Helper()
	vol := ""
	for _, v := range p.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			vol = v.Name
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400 {
				t.Errorf("pod %s: Secret %s defaultMode %v, want 0400", p.Metadata.Name, secret, v.Secret.DefaultMode)
			}
		}
	}
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if vol != "" && m.Name == vol {
			if m.MountPath != path || !m.ReadOnly {
				t.Errorf("pod %s: Secret %s mounted at %s read-only %v, want read-only at %s", p.Metadata.Name, secret, m.MountPath, m.ReadOnly, path)
			}
			return
		}
	}
	t.Errorf("pod %s mounts no Secret %s (volumes %+v)", p.Metadata.Name, secret, p.Spec.Volumes)
}

// TestK8sTLSObjects submits a job with --tls (the default) and checks what
// it is given on the cluster while it runs: the CA Secret, owned by the
// master Job and mounted into the master pod (--tls_ca_dir); one Secret
// per worker and PS pod, owned by that pod, mounted 0400 at
// $ELASTICDL_TLS_DIR and written by the process node where the pod's
// process reads it; no key in any pod spec; the job's NetworkPolicy, owned
// by the master Job. The job trains to the end over mutual TLS, its pods'
// Secrets go with the pods, and stopping the job removes the rest.
func TestK8sTLSObjects(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-tls", 1, "4", "8Gi")
	j := submit(t, ns, "tls", label, "--tls=true", "--metrics_namespace=monitoring")

	var mj masterJobState
	waitFor(t, 20*time.Second, "the master Job", func() (bool, string) { return getJSON(t, &mj, "job", "-n", ns, j.masterJob()), "" })
	var ca secretObj
	if !getJSON(t, &ca, "secret", "-n", ns, "elasticdl-"+j.name+"-tls-ca") {
		t.Fatalf("no CA Secret elasticdl-%s-tls-ca", j.name)
	}
	checkOwned(t, "CA Secret", ca.Metadata, j.name, "master", mj)
	if ca.Type != "Opaque" || ca.Data["ca.crt"] == "" || ca.Data["ca.key"] == "" {
		t.Errorf("CA Secret: type %s keys %v, want Opaque with ca.crt and ca.key", ca.Type, slices.Sorted(maps.Keys(ca.Data)))
	}
	checkNetworkPolicy(t, j, mj)

	var master volumePod
	waitFor(t, 30*time.Second, "the master pod", func() (bool, string) {
		name := j.masterPod()
		return name != "" && getJSON(t, &master, "pod", "-n", ns, name), ""
	})
	checkSecretMount(t, master, ca.Metadata.Name, caMountPath)
	if !slices.Contains(master.Spec.Containers[0].Args, "--tls_ca_dir="+caMountPath) {
		t.Errorf("master args %q lack --tls_ca_dir=%s", master.Spec.Containers[0].Args, caMountPath)
	}

	checked := map[string]int{}
	waitFor(t, 60*time.Second, "a worker and a PS pod with their own TLS Secret on disk", func() (bool, string) {
		for _, role := range []string{"worker", "ps"} {
			for _, p := range j.pods(role) {
				if checkPodTLS(t, ns, p.Metadata.Name) {
					checked[role]++
				}
			}
		}
		return checked["worker"] > 0 && checked["ps"] > 0, ""
	})
	noKeyInSpecs(t, ns)

	r := waitSucceeded(t, j, 3*time.Minute)
	assertTrained(t, r, 1, minAccuracy)
	if r.Summary.Workers.Relaunched != 0 {
		t.Errorf("summary workers %+v: a worker was relaunched (refused by TLS?)", r.Summary.Workers)
	}
	waitFor(t, 30*time.Second, "the worker and PS pods' Secrets to go with their pods", func() (bool, string) {
		out := kubectl(t, "get", "secrets", "-n", ns, "-l", "elasticdl.io/job-name="+j.name+",elasticdl.io/replica-type!=master", "-o", "name")
		return strings.TrimSpace(out) == "", out
	})

	if out, code, _ := cli(t, nil, 60*time.Second, "stop", j.name, "--namespace", ns); code != 0 {
		t.Fatalf("elasticdl stop exited %d:\n%s", code, out)
	}
	waitFor(t, 60*time.Second, "the job's Secrets and NetworkPolicy to be collected", func() (bool, string) {
		out := kubectl(t, "get", "secrets,networkpolicies", "-n", ns, "-l", "elasticdl.io/job-name="+j.name, "-o", "name")
		return strings.TrimSpace(out) == "", out
	})
}

// checkPodTLS checks a worker's or PS's TLS Secret, its mount and the
// files the process node wrote; false when the pod or its files are not
// there (yet or any more).
func checkPodTLS(t *testing.T, ns, name string) bool {
	t.Helper()
	var p volumePod
	var s secretObj
	if !getJSON(t, &p, "pod", "-n", ns, name) || !getJSON(t, &s, "secret", "-n", ns, name+"-tls") {
		return false
	}
	if o := s.Metadata.OwnerReferences; len(o) != 1 || o[0].Kind != "Pod" || o[0].Name != name || o[0].UID != p.Metadata.UID {
		t.Errorf("Secret %s: owners %+v, want pod %s uid %s", s.Metadata.Name, o, name, p.Metadata.UID)
	}
	checkSecretMount(t, p, s.Metadata.Name, tlsMountPath)
	dir := ""
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == "ELASTICDL_TLS_DIR" {
			dir = e.Value
		}
	}
	if dir != tlsMountPath {
		t.Errorf("pod %s: ELASTICDL_TLS_DIR=%q, want %s", name, dir, tlsMountPath)
	}
	// The process node rewrites the mount path to these files.
	files, _ := filepath.Glob(filepath.Join(rigState, "procnodes", "*", "pods", ns+"_"+name+"_"+p.Metadata.UID, "volumes", "tls", "tls.key"))
	if len(files) != 1 {
		return false
	}
	st, err := os.Stat(files[0])
	got, rerr := os.ReadFile(files[0])
	want, _ := base64.StdEncoding.DecodeString(s.Data["tls.key"])
	if err != nil || rerr != nil || st.Mode().Perm() != 0o400 || !bytes.Equal(got, want) || len(want) == 0 {
		t.Errorf("pod %s's key on its node: mode %v, %v %v, same as the Secret's: %v", name, st.Mode(), err, rerr, bytes.Equal(got, want))
	}
	return true
}

// checkNetworkPolicy checks the job's NetworkPolicy: owned by the master
// Job; selects the job's pods; lets in the job's pods and the metrics
// namespace (no --metrics_port here: no rule for it).
func checkNetworkPolicy(t *testing.T, j *job, mj masterJobState) {
	t.Helper()
	var np struct {
		Metadata objectMeta
		Spec     struct {
			PodSelector struct{ MatchLabels map[string]string }
			PolicyTypes []string
			Ingress     []struct {
				From []struct {
					PodSelector       *struct{ MatchLabels map[string]string }
					NamespaceSelector *struct{ MatchLabels map[string]string }
				}
			}
		}
	}
	if !getJSON(t, &np, "networkpolicy", "-n", j.ns, "elasticdl-"+j.name) {
		t.Fatalf("no NetworkPolicy elasticdl-%s", j.name)
	}
	checkOwned(t, "NetworkPolicy", np.Metadata, j.name, "master", mj)
	sel := map[string]string{"app.kubernetes.io/name": "elasticdl", "elasticdl.io/job-name": j.name}
	if !maps.Equal(np.Spec.PodSelector.MatchLabels, sel) || !slices.Equal(np.Spec.PolicyTypes, []string{"Ingress"}) {
		t.Errorf("NetworkPolicy selects %v, types %v; want %v, [Ingress]", np.Spec.PodSelector.MatchLabels, np.Spec.PolicyTypes, sel)
	}
	in := np.Spec.Ingress
	if len(in) != 1 || len(in[0].From) != 1 || in[0].From[0].PodSelector == nil || !maps.Equal(in[0].From[0].PodSelector.MatchLabels, sel) || in[0].From[0].NamespaceSelector != nil {
		t.Errorf("NetworkPolicy ingress %+v, want from the job's pods only", in)
	}
}

// noKeyInSpecs checks that no pod or Job of the namespace holds a PEM
// block, plain or base64: keys travel in Secrets only.
func noKeyInSpecs(t *testing.T, ns string) {
	t.Helper()
	out := kubectl(t, "get", "pods,jobs", "-n", ns, "-o", "json")
	for _, bad := range []string{"PRIVATE KEY", "-----BEGIN", "LS0tLS1CRUdJTi"} {
		if strings.Contains(out, bad) {
			t.Errorf("a pod or Job spec of namespace %s holds %q", ns, bad)
		}
	}
}
