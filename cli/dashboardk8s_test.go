package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/model"
)

func TestResolveDue(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		name    string
		checked time.Time
		want    bool
	}{
		{"never found, or failed", time.Time{}, true},
		{"found just now", now, false},
		{"found within the recheck", now.Add(-dashRecheck + time.Millisecond), false},
		{"found a recheck ago", now.Add(-dashRecheck), true},
		{"a clock gone back", now.Add(time.Minute), true},
	} {
		if got := resolveDue(c.checked, now); got != c.want {
			t.Errorf("%s: resolveDue = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestReuseTunnel(t *testing.T) {
	a := k8s.DashboardTarget{Namespace: "ns", Pod: "m-1", Port: 8042}
	b := k8s.DashboardTarget{Namespace: "ns", Pod: "m-2", Port: 8042}
	for _, c := range []struct {
		name       string
		have, want k8s.DashboardTarget
		open, ok   bool
	}{
		{"the same pod, open", a, a, true, true},
		{"the same pod, broken", a, a, false, false},
		{"the next master pod", a, b, true, false},
		{"another port", a, k8s.DashboardTarget{Namespace: "ns", Pod: "m-1", Port: 9000}, true, false},
	} {
		if got := reuseTunnel(c.have, c.open, c.want); got != c.ok {
			t.Errorf("%s: reuseTunnel = %v, want %v", c.name, got, c.ok)
		}
	}
}

func TestWaitable(t *testing.T) {
	if !waitable(fmt.Errorf("job j: %w", k8s.ErrNotRunning)) {
		t.Error("a pod not running yet is worth waiting for")
	}
	for _, err := range []error{k8s.ErrNoDashboard, k8s.ErrJobEnded, k8s.ErrNoJob, errors.New("list pods: boom")} {
		if waitable(err) {
			t.Errorf("%v: waited for", err)
		}
	}
}

func TestExplainForwardError(t *testing.T) {
	target := k8s.DashboardTarget{Namespace: "ns", Pod: "m-1", Port: 8042}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods/portforward"}, "m-1", errors.New("no"))
	if err := explainForwardError(target, forbidden); !strings.HasPrefix(err.Error(), "port-forward to pod ns/m-1 is forbidden (RBAC: create pods/portforward in namespace ns); try --via=proxy") ||
		!apierrors.IsForbidden(err) {
		t.Errorf("forbidden: %v", err)
	}
	other := errors.New("port-forward to ns/m-1:8042: connection refused")
	if err := explainForwardError(target, other); err != other {
		t.Errorf("another error: %v", err)
	}
}

func TestExplainProxyStatus(t *testing.T) {
	target := k8s.DashboardTarget{Namespace: "ns", Pod: "m-1", Port: 8042}
	status := func(code int, msg string) []byte {
		b, _ := json.Marshal(metav1.Status{Status: "Failure", Message: msg, Code: int32(code)})
		return b
	}
	for _, c := range []struct {
		code int
		body []byte
		want string // "": no error
	}{
		{200, []byte("<html>"), ""},
		{403, status(403, `pods "m-1" is forbidden`), `the API server's proxy to pod ns/m-1 is forbidden (RBAC: get pods/proxy in namespace ns); try --via=port-forward: pods "m-1" is forbidden`},
		{400, status(400, "address not allowed"), "the API server does not proxy to pod ns/m-1: its IP is a loopback or link-local address (as on the test rig's process nodes); use --via=port-forward"},
		{503, status(503, "error trying to reach service: dial tcp: connection refused"), "proxy to ns/m-1:8042: HTTP 503: error trying to reach service: dial tcp: connection refused"},
		{404, []byte(" not json \n"), "proxy to ns/m-1:8042: HTTP 404: not json"},
	} {
		err := explainProxyStatus(target, c.code, c.body)
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("HTTP %d: %v, want %q", c.code, err, c.want)
		}
	}
}

func TestProxyFailed(t *testing.T) {
	for code, want := range map[int]bool{200: false, 404: false, 500: false, 502: true, 503: true} {
		if proxyFailed(code) != want {
			t.Errorf("proxyFailed(%d) = %v", code, !want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a command's output read meanwhile.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeAPI is an API server with job j's master pods in namespace ns, each
// pod's dashboard proxied (pods/NAME:PORT/proxy/) to dash, which gets the
// pod's name.
type fakeAPI struct {
	mu     sync.Mutex
	pods   []corev1.Pod
	noJob  bool
	dash   func(w http.ResponseWriter, r *http.Request, pod string)
	denied bool // pods/proxy forbidden
}

func (f *fakeAPI) setPods(pods ...corev1.Pod) {
	f.mu.Lock()
	f.pods = pods
	f.mu.Unlock()
}

var proxyPathRE = regexp.MustCompile(`^/api/v1/namespaces/ns/pods/([^/:]+):8042/proxy(/.*)$`)

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	pods, noJob, denied := f.pods, f.noJob, f.denied
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch m := proxyPathRE.FindStringSubmatch(r.URL.Path); {
	case m != nil && denied:
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(metav1.Status{Status: "Failure", Message: "forbidden", Code: 403})
	case m != nil:
		r.URL.Path = m[2]
		f.dash(w, r, m[1])
	case r.URL.Path == "/api/v1/namespaces/ns/pods":
		json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: pods})
	case r.URL.Path == "/apis/batch/v1/namespaces/ns/jobs/elasticdl-j-master" && !noJob:
		fmt.Fprint(w, `{"kind":"Job","apiVersion":"batch/v1","metadata":{"name":"elasticdl-j-master","namespace":"ns"}}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(metav1.Status{Status: "Failure", Reason: metav1.StatusReasonNotFound, Code: 404})
	}
}

// startFakeAPI serves api and returns a kubeconfig for it.
func startFakeAPI(t *testing.T, api *fakeAPI) string {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {}}]\n"+
		"contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", srv.URL)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// masterPodFor is a running master pod of job j, created at second s,
// with its dashboard on 8042.
func masterPodFor(name string, s int) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.Time{Time: time.Unix(int64(s), 0)},
		Labels: k8s.JobLabels("j", k8s.ReplicaMaster), Annotations: map[string]string{k8s.AnnotationDashboardPort: "8042"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// startDashboardCmd runs `elasticdl dashboard` until the test ends and
// returns its URL once printed, and its stderr.
func startDashboardCmd(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, Env{Stdout: &out, Stderr: &errOut, Registry: model.NewRegistry()}, append([]string{"dashboard"}, args...))
	}()
	t.Cleanup(func() { cancel(); <-done })
	urlRE := regexp.MustCompile(`^dashboard url=(http://127\.0\.0\.1:[0-9]+/)\n$`)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if m := urlRE.FindStringSubmatch(out.String()); m != nil {
			return m[1], &errOut
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("elasticdl dashboard exited %d: %s%s", code, out.String(), errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no URL printed: %q %q", out.String(), errOut.String())
		}
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	return string(b)
}

// --via=proxy: the page and the API through the API server's proxy of the
// newest master pod, Server-Sent Events as they come, and the next master
// pod once the first is gone.
func TestDashboardViaProxy(t *testing.T) {
	release := make(chan struct{})
	api := &fakeAPI{dash: func(w http.ResponseWriter, r *http.Request, pod string) {
		switch r.URL.Path {
		case "/":
			fmt.Fprint(w, "<html>")
		case "/api/job":
			fmt.Fprintf(w, `{"boot":%q}`, pod)
		case "/api/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			<-release
			fmt.Fprint(w, "data: second\n\n")
		default:
			http.NotFound(w, r)
		}
	}}
	api.setPods(masterPodFor("m-1", 1))
	kc := startFakeAPI(t, api)
	url, _ := startDashboardCmd(t, "j", "--namespace=ns", "--kubeconfig="+kc, "--via=proxy")
	if got := get(t, url+"api/job"); got != `{"boot":"m-1"}` {
		t.Errorf("api/job: %s", got)
	}
	resp, err := http.Get(url + "api/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	close(release) // only now: the first event came through alone
	if err != nil || line != "data: first\n" {
		t.Fatalf("the stream's first line: %q, %v", line, err)
	}
	// The first master pod replaced: the same URL answers from the next.
	api.setPods(masterPodFor("m-2", 2))
	waitUntil(t, "the next master's api/job", func() bool { return get(t, url+"api/job") == `{"boot":"m-2"}` })
}

// The command's errors, each one line before it listens: an unknown job,
// a master without a dashboard, a job that ended, a forbidden proxy, and
// usage errors; with no master pod yet it waits and says so.
func TestDashboardErrors(t *testing.T) {
	noDash := masterPodFor("m-1", 1)
	noDash.Annotations = nil
	ended := masterPodFor("m-1", 1)
	ended.Status.Phase = corev1.PodSucceeded
	ended.Labels[k8s.LabelStatus] = k8s.StatusFinished
	cases := []struct {
		name string
		api  *fakeAPI
		args []string
		code int
		want string
	}{
		{"no job", &fakeAPI{noJob: true}, nil, exitError, "no job j in namespace ns (no Job elasticdl-j-master)"},
		{"dashboard off", &fakeAPI{pods: []corev1.Pod{noDash}}, nil, exitError, "master pod m-1 has no annotation elasticdl.io/dashboard-port (the job was started with --dashboard_port=-1)"},
		{"ended", &fakeAPI{pods: []corev1.Pod{ended}}, nil, exitError, "job j: the job has ended (master pod m-1: Finished), its master is gone"},
		{"proxy forbidden", &fakeAPI{pods: []corev1.Pod{masterPodFor("m-1", 1)}, denied: true}, []string{"--via=proxy"}, exitError, "the API server's proxy to pod ns/m-1 is forbidden (RBAC: get pods/proxy in namespace ns); try --via=port-forward"},
		{"bad --via", &fakeAPI{}, []string{"--via=ssh"}, exitUsage, "--via=ssh: want port-forward or proxy"},
		{"bad --port", &fakeAPI{}, []string{"--port=70000"}, exitUsage, "--port=70000: want 0 (a free port) or a port up to 65535"},
		{"a JOB with --autoscaler", &fakeAPI{}, []string{"--autoscaler"}, exitUsage, `--autoscaler shows the cluster's dashboard: no JOB (got "j")`},
	}
	for _, c := range cases {
		kc := startFakeAPI(t, c.api)
		var out, errOut syncBuffer
		code := Run(context.Background(), Env{Stdout: &out, Stderr: &errOut, Registry: model.NewRegistry()},
			append([]string{"dashboard", "j", "--namespace=ns", "--kubeconfig=" + kc}, c.args...))
		if code != c.code || !strings.Contains(errOut.String(), c.want) || out.String() != "" || strings.Count(errOut.String(), "elasticdl dashboard: ") != 1 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", c.name, code, out.String(), errOut.String(), c.code, c.want)
		}
	}
	var out, errOut syncBuffer
	if code := Run(context.Background(), Env{Stdout: &out, Stderr: &errOut, Registry: model.NewRegistry()}, []string{"dashboard"}); code != exitUsage ||
		!strings.Contains(errOut.String(), "usage: elasticdl dashboard JOB") {
		t.Errorf("no JOB: exit %d, %q", code, errOut.String())
	}
}

// With no master pod running yet, the command waits for one, says so,
// and serves it once it runs.
func TestDashboardWaitsForMaster(t *testing.T) {
	api := &fakeAPI{dash: func(w http.ResponseWriter, r *http.Request, pod string) { fmt.Fprintf(w, `{"boot":%q}`, pod) }}
	pending := masterPodFor("m-1", 1)
	pending.Status.Phase = corev1.PodPending
	api.setPods(pending)
	kc := startFakeAPI(t, api)
	var out, errOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, Env{Stdout: &out, Stderr: &errOut, Registry: model.NewRegistry()}, []string{"dashboard", "j", "--namespace=ns", "--kubeconfig=" + kc, "--via=proxy"})
	}()
	defer func() { cancel(); <-done }()
	waitUntil(t, "the waiting line", func() bool { return strings.Contains(errOut.String(), "waiting for the dashboard's pod") })
	if out.String() != "" {
		t.Errorf("a URL before the master runs: %q", out.String())
	}
	api.setPods(masterPodFor("m-1", 1))
	waitUntil(t, "the URL", func() bool { return strings.Contains(out.String(), "dashboard url=") })
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A connection whose forward cannot open (here: no API server to tunnel
// through) is closed, and the next one asks for the pod again.
func TestTunnelForwardFails(t *testing.T) {
	target := k8s.DashboardTarget{Namespace: "ns", Pod: "m-1", Port: 8042}
	finds := 0
	res := &dashResolver{find: func(context.Context) (k8s.DashboardTarget, error) { finds++; return target, nil },
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f := &tunnelForwarder{client: k8s.NewClient(fake.NewClientset(), time.Second), res: res, log: res.log}
	for i := 1; i <= 2; i++ {
		local, remote := net.Pipe()
		err := f.forward(context.Background(), remote)
		if err == nil || !strings.Contains(err.Error(), "needs a real API server") {
			t.Errorf("forward: %v", err)
		}
		if _, rerr := local.Read(make([]byte, 1)); rerr != io.EOF {
			t.Errorf("the local connection is not closed: %v", rerr)
		}
		if finds != i {
			t.Errorf("after %d failed connections, %d look-ups: want one each", i, finds)
		}
	}
}

// A resolver waiting for a pod gives up when its context ends, saying
// what it waited for.
func TestResolverGivesUp(t *testing.T) {
	res := &dashResolver{find: func(context.Context) (k8s.DashboardTarget, error) {
		return k8s.DashboardTarget{}, fmt.Errorf("job j has no running master pod: %w", k8s.ErrNotRunning)
	}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := res.target(ctx)
	if err == nil || err.Error() != "job j has no running master pod: not running yet (gave up waiting: context canceled)" {
		t.Errorf("target: %v", err)
	}
}
