package k8s

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"elasticdl/internal/cluster"
)

func TestWorkerPriorities(t *testing.T) {
	cases := []struct {
		spec string
		n    int
		want []string
		err  string
	}{
		{"", 3, []string{"", "", ""}, ""},
		{"batch", 2, []string{"batch", "batch"}, ""},
		{"0.5", 4, []string{"hi", "hi", "lo", "lo"}, ""},
		{"0.5", 3, []string{"hi", "hi", "lo"}, ""}, // ceil
		{"0", 2, []string{"lo", "lo"}, ""},
		{"1", 2, []string{"hi", "hi"}, ""},
		{"1.5", 2, nil, "in [0,1]"},
		{"-0.1", 2, nil, "in [0,1]"},
		{"Not_A_Name", 2, nil, "neither a fraction"},
	}
	for _, c := range cases {
		got, err := WorkerPriorities(c.spec, c.n, "hi", "lo")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("WorkerPriorities(%q) error %v, want %q", c.spec, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("WorkerPriorities(%q, %d) = %v, %v; want %v", c.spec, c.n, got, err, c.want)
		}
	}
}

func TestParseResources(t *testing.T) {
	got, err := ParseResources("cpu=500m, memory=1Gi,gpu=1")
	if err != nil {
		t.Fatal(err)
	}
	if q := got[corev1.ResourceCPU]; q.MilliValue() != 500 {
		t.Errorf("cpu %v", q.String())
	}
	if q := got[corev1.ResourceMemory]; q.Value() != 1<<30 {
		t.Errorf("memory %v", q.String())
	}
	if q := got["nvidia.com/gpu"]; q.Value() != 1 {
		t.Errorf("gpu %v", q.String())
	}
	for _, bad := range []string{"cpu", "cpu=", "cpu=lots", "=1", "memory=-1Gi"} {
		if _, err := ParseResources(bad); err == nil {
			t.Errorf("ParseResources(%q) accepted", bad)
		}
	}
	if r, err := ParseResources(""); err != nil || r != nil {
		t.Errorf("empty: %v %v", r, err)
	}
}

// A GPU request alone becomes the limit too (Kubernetes refuses an
// extended resource without one); cpu and memory stay as given.
func TestRequirements(t *testing.T) {
	for _, c := range []struct {
		req, lim, wantLim, err string
	}{
		{"cpu=1,gpu=1", "", "nvidia.com/gpu=1", ""},
		{"cpu=1,memory=1Gi", "", "", ""},
		{"cpu=1,gpu=2", "cpu=2,gpu=2", "cpu=2,nvidia.com/gpu=2", ""},
		{"gpu=1", "memory=2Gi", "memory=2Gi,nvidia.com/gpu=1", ""},
		{"gpu=1", "gpu=2", "", "nvidia.com/gpu: request 1 and limit 2 must be equal"},
		{"", "gpu=1", "nvidia.com/gpu=1", ""},
	} {
		req, _ := ParseResources(c.req)
		lim, _ := ParseResources(c.lim)
		got, err := Requirements(req, lim)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q/%q: err %v, want %q", c.req, c.lim, err, c.err)
			}
			continue
		}
		want, _ := ParseResources(c.wantLim)
		if err != nil || len(got.Limits) != len(want) {
			t.Errorf("%q/%q: limits %v (%v), want %v", c.req, c.lim, got.Limits, err, want)
			continue
		}
		for k, q := range want {
			if l := got.Limits[k]; l.Cmp(q) != 0 {
				t.Errorf("%q/%q: limit %s = %s, want %s", c.req, c.lim, k, l.String(), q.String())
			}
		}
		if len(got.Requests) != len(req) {
			t.Errorf("%q/%q: requests %v, want %v", c.req, c.lim, got.Requests, req)
		}
	}
}

func TestCheckJobName(t *testing.T) {
	for _, ok := range []string{"j1", "1job", "mnist-elastic", strings.Repeat("a", 40)} {
		if err := CheckJobName(ok); err != nil {
			t.Errorf("CheckJobName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Upper", "-abc", "under_score", "dot.ted", strings.Repeat("a", 60)} {
		if err := CheckJobName(bad); err == nil {
			t.Errorf("CheckJobName(%q) accepted", bad)
		}
	}
}

func TestInstancePod(t *testing.T) {
	owner := JobOwner(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elasticdl-j-master", UID: "u1"}})
	b := &Backend{cfg: Config{
		Namespace: "ns", JobName: "j", Owner: owner, MasterAddr: "10.0.0.1:50001", PSPort: 2222,
		Worker:         PodSettings{Image: "img", ServiceAccount: "", PriorityClass: "default-class"},
		WorkerPriority: []string{"hi", ""},
	}}
	p := b.podFor(cluster.InstanceSpec{Role: cluster.Worker, ID: 7, Index: 0, Args: []string{"--x=1"}, Env: []string{"A=b=c"}})
	if p.Name != "elasticdl-j-worker-7" || p.Namespace != "ns" {
		t.Errorf("name %s/%s", p.Namespace, p.Name)
	}
	wantLabels := map[string]string{LabelApp: AppName, LabelJob: "j", LabelReplicaType: "worker", LabelReplicaIndex: "0", LabelInstanceID: "7"}
	if !reflect.DeepEqual(p.Labels, wantLabels) {
		t.Errorf("labels %v", p.Labels)
	}
	if p.Spec.PriorityClassName != "hi" || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("priority %q restart %q", p.Spec.PriorityClassName, p.Spec.RestartPolicy)
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != "u1" || !*p.OwnerReferences[0].BlockOwnerDeletion {
		t.Errorf("owner %+v", p.OwnerReferences)
	}
	c := p.Spec.Containers[0]
	if !reflect.DeepEqual(c.Command, []string{"elasticdl"}) || !reflect.DeepEqual(c.Args, []string{"worker", "--x=1"}) {
		t.Errorf("command %v args %v", c.Command, c.Args)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["MASTER_ADDR"].Value != "10.0.0.1:50001" || env["WORKER_ID"].Value != "7" || env["A"].Value != "b=c" {
		t.Errorf("env %v", c.Env)
	}
	if f := env["POD_IP"].ValueFrom; f == nil || f.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("POD_IP %+v", env["POD_IP"])
	}
	// Slot 1 has no override: the settings' class.
	if p := b.podFor(cluster.InstanceSpec{Role: cluster.Worker, ID: 8, Index: 1}); p.Spec.PriorityClassName != "default-class" {
		t.Errorf("slot 1 priority %q", p.Spec.PriorityClassName)
	}
}

// A worker whose slot was slow on some nodes must be placed on none of
// them: a required node affinity on the node's name, in every term.
func TestAvoidNodes(t *testing.T) {
	b := &Backend{cfg: Config{Namespace: "ns", JobName: "j", Worker: PodSettings{Image: "img"}}}
	if p := b.podFor(cluster.InstanceSpec{Role: cluster.Worker, ID: 1}); p.Spec.Affinity != nil {
		t.Fatalf("no nodes to avoid, affinity %+v", p.Spec.Affinity)
	}
	p := b.podFor(cluster.InstanceSpec{Role: cluster.Worker, ID: 2, AvoidNodes: []string{"n1", "n2"}})
	want := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n1", "n2"}}}}}}
	if p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity == nil || !reflect.DeepEqual(p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution, want) {
		t.Fatalf("affinity %+v, want required %+v", p.Spec.Affinity, want)
	}
	// Terms are ORed: each gets the requirement.
	two := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
		}}}}}}
	AvoidNodes(two, []string{"n1"})
	for i, term := range two.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchExpressions) != 1 || len(term.MatchFields) != 1 || term.MatchFields[0].Values[0] != "n1" {
			t.Fatalf("term %d: %+v, want its zone and the avoidance", i, term)
		}
	}
}

// A worker told to listen on PodIPRef gets the pod's IP: every $(VAR) in
// the args names a variable of the container, which the kubelet expands.
func TestWorkerArgsExpandPodIP(t *testing.T) {
	b := &Backend{cfg: Config{Namespace: "ns", JobName: "j", PSPort: 2222, Worker: PodSettings{Image: "img"}}}
	arg := "--collective_addr=" + PodIPRef + ":0"
	p := b.podFor(cluster.InstanceSpec{Role: cluster.Worker, ID: 3, Args: []string{"--worker_id=3", arg}})
	c := p.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	refs := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	n := 0
	for _, a := range c.Args {
		for _, m := range refs.FindAllStringSubmatch(a, -1) {
			n++
			if _, ok := env[m[1]]; !ok {
				t.Errorf("arg %q refers to $(%s), which the container does not define: the kubelet would leave it as written", a, m[1])
			}
		}
	}
	if n != 1 || !slices.Contains(c.Args, arg) {
		t.Errorf("args %q: want %q as given", c.Args, arg)
	}
	if f := env["POD_IP"].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("POD_IP %+v, want the downward API's status.podIP", env["POD_IP"])
	}
}

func TestPSAddress(t *testing.T) {
	b := &Backend{cfg: Config{Namespace: "ns", JobName: "j", PSPort: 2222}}
	ep, err := b.PSAddress(1)
	if err != nil || ep.Listen != ":2223" || ep.Dial != "elasticdl-j-ps-1.ns.svc:2223" {
		t.Errorf("PSAddress(1) = %+v, %v", ep, err)
	}
	b.cfg.PSHost = "127.0.0.1"
	if ep, _ := b.PSAddress(0); ep.Dial != "127.0.0.1:2222" {
		t.Errorf("with PSHost: %+v", ep)
	}
	svc := newPSService("j", "ns", 1, 2223, nil)
	if svc.Spec.Selector[LabelReplicaIndex] != "1" || svc.Spec.Selector[LabelReplicaType] != "ps" || svc.Spec.Ports[0].Port != 2223 {
		t.Errorf("service %+v", svc.Spec)
	}
	if _, err := b.PSAddress(-1); err == nil {
		t.Error("negative index accepted")
	}
}

func TestParseVolumes(t *testing.T) {
	got, err := ParseVolumes("claim_name=data,mount_path=/data,read_only=true; host_path=/mnt/out,mount_path=/out")
	if err != nil {
		t.Fatal(err)
	}
	want := []Volume{{ClaimName: "data", MountPath: "/data", ReadOnly: true}, {HostPath: "/mnt/out", MountPath: "/out"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		"mount_path=/data",                          // no source
		"claim_name=c,host_path=/h,mount_path=/d",   // two sources
		"claim_name=c,mount_path=data",              // relative
		"claim_name=c,mount_path=/d,read_only=nope", // not a bool
		"claim_name=c,mount_path=/d,size=1Gi",       // unknown key
	} {
		if _, err := ParseVolumes(bad); err == nil {
			t.Errorf("ParseVolumes(%q) accepted", bad)
		}
	}
}

func TestPodIsRestrictedAndMountsVolumes(t *testing.T) {
	p := NewPod("p", "ns", nil, PodSettings{Image: "img", Volumes: []Volume{{ClaimName: "c", MountPath: "/data", ReadOnly: true}}}, nil, nil)
	if sc := p.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", sc)
	}
	c := p.Spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("container security context %+v", sc)
	}
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "c" ||
		len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/data" || !c.VolumeMounts[0].ReadOnly ||
		c.VolumeMounts[0].Name != p.Spec.Volumes[0].Name {
		t.Errorf("volumes %+v mounts %+v", p.Spec.Volumes, c.VolumeMounts)
	}
}

// TestMasterJob: the master's Job replaces a lost master pod only after it
// has terminated, never one that ended the job or had a bad command line,
// and does not count evictions and preemptions against its limit.
func TestMasterJob(t *testing.T) {
	pod := NewPod("", "ns", JobLabels("j", ReplicaMaster), PodSettings{Image: "img", ServiceAccount: "elasticdl"}, []string{"master"}, nil)
	mj := NewMasterJob("j", "ns", pod)
	if mj.Name != "elasticdl-j-master" || mj.Namespace != "ns" || !reflect.DeepEqual(mj.Labels, JobLabels("j", ReplicaMaster)) ||
		!reflect.DeepEqual(mj.Spec.Template.Labels, JobLabels("j", ReplicaMaster)) {
		t.Errorf("Job %s/%s labels %v, template labels %v", mj.Namespace, mj.Name, mj.Labels, mj.Spec.Template.Labels)
	}
	sp := mj.Spec
	if *sp.Parallelism != 1 || *sp.Completions != 1 || *sp.BackoffLimit != MasterPodReplacements ||
		sp.PodReplacementPolicy == nil || *sp.PodReplacementPolicy != batchv1.Failed {
		t.Errorf("spec %+v: want one pod at a time, replaced once terminated", sp)
	}
	if sp.Template.Spec.RestartPolicy != corev1.RestartPolicyNever { // a pod failure policy needs it
		t.Errorf("restartPolicy %q", sp.Template.Spec.RestartPolicy)
	}
	// What the Job controller does with a failed master pod, by the
	// first rule that matches (none: counted against the limit).
	action := func(exit int32, condition corev1.PodConditionType) batchv1.PodFailurePolicyAction {
		for _, r := range sp.PodFailurePolicy.Rules {
			if r.OnExitCodes != nil && *r.OnExitCodes.ContainerName == ContainerName && r.OnExitCodes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn &&
				slices.Contains(r.OnExitCodes.Values, exit) {
				return r.Action
			}
			for _, c := range r.OnPodConditions {
				if c.Type == condition && c.Status == corev1.ConditionTrue {
					return r.Action
				}
			}
		}
		return batchv1.PodFailurePolicyActionCount
	}
	for _, c := range []struct {
		exit      int32
		condition corev1.PodConditionType
		want      batchv1.PodFailurePolicyAction
	}{
		{ExitJobFailed, "", batchv1.PodFailurePolicyActionFailJob},
		{ExitUsage, "", batchv1.PodFailurePolicyActionFailJob},
		{ExitHandedOver, "", batchv1.PodFailurePolicyActionCount},
		{137, "", batchv1.PodFailurePolicyActionCount}, // OOM-killed
		{ExitHandedOver, corev1.DisruptionTarget, batchv1.PodFailurePolicyActionIgnore},
		{143, corev1.DisruptionTarget, batchv1.PodFailurePolicyActionIgnore},
	} {
		if got := action(c.exit, c.condition); got != c.want {
			t.Errorf("master pod failed with exit %d, condition %q: %s, want %s", c.exit, c.condition, got, c.want)
		}
	}
}
