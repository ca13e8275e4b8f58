package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestExpand(t *testing.T) {
	vals := map[string]string{"A": "a", "B": "b$"}
	m := func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	for in, want := range map[string]string{
		"":                "",
		"plain":           "plain",
		"$(A)":            "a",
		"x$(A)y$(B)z":     "xayb$z",
		"$(C)":            "$(C)",
		"$$(A)":           "$(A)",
		"$$":              "$",
		"$x":              "$x",
		"end$":            "end$",
		"$(A":             "$(A",
		"--pod=$(A).$(B)": "--pod=a.b$",
	} {
		if got := expand(in, m); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestImageMap(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "elasticdl")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "edl-bin")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := parseImageMap([]string{"elasticdl:latest=" + bin, "reg:5000/team/tool=" + other})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		image         string
		command, args []string
		want          []string
		err           bool
	}{
		{"elasticdl:latest", nil, []string{"worker", "--x"}, []string{bin, "worker", "--x"}, false},
		{"elasticdl", []string{"/elasticdl"}, []string{"master"}, []string{bin, "master"}, false},
		{"registry.example.com/x/elasticdl:latest", []string{"elasticdl", "ps"}, nil, []string{bin, "ps"}, false},
		{"elasticdl:latest", []string{"sh", "-c", "echo hi"}, nil, []string{"sh", "-c", "echo hi"}, false},
		{"elasticdl:v2", []string{"/usr/local/bin/elasticdl", "worker"}, nil, []string{bin, "worker"}, false}, // by command name
		{"elasticdl:v2", nil, []string{"worker"}, nil, true},                                                  // tag differs, no command
		{"reg:5000/team/tool:v9", nil, []string{"a"}, []string{other, "a"}, false},
		{"busybox", []string{"tool", "x"}, nil, []string{other, "x"}, false}, // image's last component
		{"busybox", []string{"sh", "-c", "true"}, nil, []string{"sh", "-c", "true"}, false},
	}
	for _, c := range cases {
		got, err := m.resolveArgv(&corev1.Container{Image: c.image}, c.command, c.args)
		if (err != nil) != c.err || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %q %q: got %q, %v; want %q (err %v)", c.image, c.command, c.args, got, err, c.want, c.err)
		}
	}
	if _, err := parseImageMap([]string{"x=" + dir}); err == nil {
		t.Error("a directory was accepted as binary")
	}
}

func TestEnv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: "ns", UID: "u1", Labels: map[string]string{"job": "j", "a": "b"}},
		Spec:       corev1.PodSpec{NodeName: "procnode-0", ServiceAccountName: "sa"},
	}
	fr := func(p string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: p}}
	}
	c := &corev1.Container{
		Name: "main",
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: fr("metadata.name")},
			{Name: "POD_NAMESPACE", ValueFrom: fr("metadata.namespace")},
			{Name: "POD_IP", ValueFrom: fr("status.podIP")},
			{Name: "NODE", ValueFrom: fr("spec.nodeName")},
			{Name: "JOB", ValueFrom: fr("metadata.labels['job']")},
			{Name: "LABELS", ValueFrom: fr("metadata.labels")},
			{Name: "ADDR", Value: "$(POD_IP):5000/$(POD_NAME)/$(NOPE)"},
			{Name: "API", Value: "https://$(KUBERNETES_SERVICE_HOST)"},
			{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu"}}},
			{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.memory", Divisor: resource.MustParse("1Mi")}}},
			{Name: "CPU_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		},
	}
	r := &envResolver{pod: pod, nodeName: "procnode-0", allocCPU: resource.MustParse("8")}
	env, _, err := r.containerEnv(c, map[string]string{"KUBERNETES_SERVICE_HOST": "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"POD_NAME=w-0", "POD_NAMESPACE=ns", "POD_IP=127.0.0.1", "NODE=procnode-0", "JOB=j",
		"LABELS=a=\"b\"\njob=\"j\"", "ADDR=127.0.0.1:5000/w-0/$(NOPE)", "API=https://127.0.0.1", "CPU=2", "MEM_MI=1024", "CPU_LIMIT=8",
	}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("env:\n got %q\nwant %q", env, want)
	}
}

func TestPhase(t *testing.T) {
	term := func(code int32) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}
	}
	run := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	wait := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	cases := []struct {
		policy   corev1.RestartPolicy
		states   []corev1.ContainerState
		terminal bool
		want     corev1.PodPhase
	}{
		{corev1.RestartPolicyNever, []corev1.ContainerState{wait}, false, corev1.PodPending},
		{corev1.RestartPolicyNever, []corev1.ContainerState{run}, false, corev1.PodRunning},
		{corev1.RestartPolicyNever, []corev1.ContainerState{term(0)}, false, corev1.PodSucceeded},
		{corev1.RestartPolicyNever, []corev1.ContainerState{term(3)}, false, corev1.PodFailed},
		{corev1.RestartPolicyNever, []corev1.ContainerState{term(0), run}, false, corev1.PodRunning},
		{corev1.RestartPolicyAlways, []corev1.ContainerState{term(0)}, false, corev1.PodRunning},
		{corev1.RestartPolicyOnFailure, []corev1.ContainerState{term(0)}, false, corev1.PodSucceeded},
		{corev1.RestartPolicyOnFailure, []corev1.ContainerState{term(1)}, false, corev1.PodRunning},
		{corev1.RestartPolicyAlways, []corev1.ContainerState{term(143)}, true, corev1.PodFailed},
		{corev1.RestartPolicyAlways, []corev1.ContainerState{term(0)}, true, corev1.PodSucceeded},
		{corev1.RestartPolicyNever, []corev1.ContainerState{wait}, true, corev1.PodFailed},
	}
	for i, c := range cases {
		r := &podRec{pod: &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: c.policy}}, initsDone: true}
		for _, s := range c.states {
			r.ctrs = append(r.ctrs, &container{state: s})
		}
		if got := r.phase(c.terminal); got != c.want {
			t.Errorf("case %d: phase %s, want %s", i, got, c.want)
		}
	}
}

func TestMergedStatusKeepsForeignConditions(t *testing.T) {
	ts := metav1.NewTime(time.Unix(1000, 0))
	r := &podRec{pod: &corev1.Pod{}, initsDone: true, sandboxUp: true, done: make(chan struct{})}
	r.ctrs = []*container{{spec: corev1.Container{Name: "c"}, state: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	base := &corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: ts},
		{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler", LastTransitionTime: ts},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ts},
	}}
	st := r.mergedStatus(base)
	got := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range st.Conditions {
		got[c.Type] = c
	}
	if c := got[corev1.DisruptionTarget]; c.Reason != "PreemptionByScheduler" {
		t.Errorf("DisruptionTarget lost: %+v", st.Conditions)
	}
	if c := got[corev1.PodReady]; c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&ts) {
		t.Errorf("Ready: %+v", c)
	}
	if st.Phase != corev1.PodRunning || st.PodIP != "127.0.0.1" || len(st.ContainerStatuses) != 1 {
		t.Errorf("status: %+v", st)
	}
	if len(st.Conditions) != 6 {
		t.Errorf("conditions: %d, want 6: %+v", len(st.Conditions), st.Conditions)
	}
}

func TestSeekTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := 0; i < 10000; i++ {
		b.WriteString("line ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\n")
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := seekTail(f, 3); err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, 100)
	n, _ := f.Read(rest)
	lines := strings.Split(strings.TrimSuffix(string(rest[:n]), "\n"), "\n")
	if len(lines) != 3 || lines[2] != "line "+strings.Repeat("x", 9999%7) {
		t.Errorf("tail 3: %q", lines)
	}
}

func TestPodIPs(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/24", "127.0.0.0/7", "127.64.0.0/31", "::1/128", "fd00::/64", "nope"} {
		if _, err := newPodIPs(bad); err == nil {
			t.Errorf("newPodIPs(%q) accepted", bad)
		}
	}
	a, err := newPodIPs("127.64.3.0/30") // 127.64.3.1 and .2
	if err != nil {
		t.Fatal(err)
	}
	ip1, err1 := a.acquire("u1")
	ip2, err2 := a.acquire("u2")
	if err1 != nil || err2 != nil || ip1 != "127.64.3.1" || ip2 != "127.64.3.2" {
		t.Fatalf("acquire: %s %v, %s %v", ip1, err1, ip2, err2)
	}
	if ip, err := a.acquire("u3"); !errors.Is(err, errNoPodIP) {
		t.Fatalf("third address of a /30: %s %v", ip, err)
	}
	a.release(ip1, "u2") // not its holder: kept
	if _, err := a.acquire("u3"); err == nil {
		t.Fatal("an address released by a pod that does not hold it was reused")
	}
	a.release(ip1, "u1")
	if ip, err := a.acquire("u3"); err != nil || ip != ip1 {
		t.Fatalf("after release: %s %v, want %s", ip, err, ip1)
	}

	// Round-robin: a freed address is the last to be reused.
	b, _ := newPodIPs("127.64.4.0/29") // .1-.6
	var got []string
	for i := 0; i < 3; i++ {
		ip, _ := b.acquire(types.UID(fmt.Sprint(i)))
		got = append(got, ip)
	}
	b.release(got[0], "0")
	if ip, _ := b.acquire("x"); ip != "127.64.4.4" {
		t.Errorf("after releasing .1: got %s, want the next unused .4", ip)
	}

	// The node's own 127.0.0.1 is never a pod's.
	c, _ := newPodIPs("127.0.0.0/30") // .1 (the node's) and .2
	if ip, err := c.acquire("u"); err != nil || ip != "127.0.0.2" {
		t.Errorf("127.0.0.0/30: %s %v", ip, err)
	}
	if ip, err := c.acquire("v"); err == nil {
		t.Errorf("127.0.0.0/30 handed out %s", ip)
	}
}

func TestPodIPInStatusAndEnv(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", UID: "u1"}}
	r := &podRec{pod: pod, ip: "127.64.0.7", initsDone: true, sandboxUp: true, done: make(chan struct{})}
	if st := r.mergedStatus(&corev1.PodStatus{}); st.PodIP != "127.64.0.7" || len(st.PodIPs) != 1 || st.PodIPs[0].IP != "127.64.0.7" || st.HostIP != localIP {
		t.Errorf("status pod IP %q %v host IP %q", st.PodIP, st.PodIPs, st.HostIP)
	}
	res := &envResolver{pod: pod, podIP: r.podIP()}
	c := &corev1.Container{Env: []corev1.EnvVar{
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
		{Name: "ADDR", Value: "$(POD_IP):0"},
	}}
	env, _, err := res.containerEnv(c, nil)
	if want := []string{"POD_IP=127.64.0.7", "HOST_IP=127.0.0.1", "ADDR=127.64.0.7:0"}; err != nil || !reflect.DeepEqual(env, want) {
		t.Errorf("env %q, %v; want %q", env, err, want)
	}
}

// TestTerminationMessage: with FallbackToLogsOnError a failed container's
// message is its log's tail, bounded as the kubelet bounds it; otherwise
// none.
func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	short := write("short.log", "starting\nelasticdl worker: cannot reach the master\n")
	var many strings.Builder
	for i := range 100 {
		fmt.Fprintf(&many, "line %d\n", i)
	}
	long := write("long.log", many.String())
	wide := write("wide.log", strings.Repeat("x", 3000)+"\nlast\n")
	fallback := corev1.TerminationMessageFallbackToLogsOnError
	for _, c := range []struct {
		name   string
		policy corev1.TerminationMessagePolicy
		code   int
		path   string
		want   func(string) bool
	}{
		{"failed: the log", fallback, 1, short, func(m string) bool { return m == "starting\nelasticdl worker: cannot reach the master\n" }},
		{"succeeded: none", fallback, 0, short, func(m string) bool { return m == "" }},
		{"the default policy: none", corev1.TerminationMessageReadFile, 1, short, func(m string) bool { return m == "" }},
		{"no log: none", fallback, 1, filepath.Join(dir, "missing.log"), func(m string) bool { return m == "" }},
		{"the last 80 lines", fallback, 1, long, func(m string) bool {
			return strings.Count(m, "\n") == 80 && strings.HasPrefix(m, "line 20\n") && strings.HasSuffix(m, "line 99\n")
		}},
		{"the last 2048 bytes", fallback, 1, wide, func(m string) bool { return len(m) == 2048 && strings.HasSuffix(m, "\nlast\n") }},
	} {
		if got := terminationMessage(c.policy, c.code, c.path); !c.want(got) {
			t.Errorf("%s: %q", c.name, got)
		}
	}
}
