package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// startAutoscaler runs `elasticdl autoscaler` the way deploy/autoscaler.yaml
// does — its ServiceAccount, ClusterRole and binding as they are, its
// Deployment with the image under test, --interval=1s and a node selector
// of the test's nodes, and args after its own — and waits for its pod to
// run. Cleanup removes it.
func startAutoscaler(t *testing.T, label string, args ...string) *autoscalerPod {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "autoscaler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := string(raw)
	// Pods on process nodes share the machine's network: a fixed metrics
	// port collides with anything else there (another e2e run's autoscaler
	// held 9090 once), so the port comes from the run's free block.
	// So do the dashboard's: its flag and the containerPort named dashboard
	// (where `elasticdl dashboard --autoscaler` forwards to).
	port, dashboardPort := freePortBlock(1), freePortBlock(1)
	for old, new := range map[string]string{
		"image: registry.example.com/team/elasticdl:v1": "image: elasticdl:e2e",
		`"--interval=5s"`:                          strings.Join(append([]string{`"--interval=1s"`}, quoted(args)...), ", "),
		`"--metrics_port=9090"`:                    fmt.Sprintf(`"--metrics_port=%d"`, port),
		`"--dashboard_port=8043"`:                  fmt.Sprintf(`"--dashboard_port=%d"`, dashboardPort),
		"{name: dashboard, containerPort: 8043}":   fmt.Sprintf("{name: dashboard, containerPort: %d}", dashboardPort),
		"serviceAccountName: elasticdl-autoscaler": "serviceAccountName: elasticdl-autoscaler\n      nodeSelector: {e2e: " + label + "}",
	} {
		if !strings.Contains(manifest, old) {
			t.Fatalf("deploy/autoscaler.yaml no longer has %q: update this test", old)
		}
		manifest = strings.Replace(manifest, old, new, 1)
	}
	kubectlCmd(context.Background(), "", "create", "namespace", "elasticdl-system")
	kubectlApply(t, manifest)
	t.Cleanup(func() {
		if out, err := kubectlCmd(context.Background(), manifest, "delete", "-f", "-", "--ignore-not-found", "--wait", "--timeout=40s"); err != nil {
			t.Logf("cleanup: deleting the autoscaler: %v\n%s", err, out)
		}
	})
	var p pod
	runningPod := func() bool {
		var list struct{ Items []pod }
		getJSON(t, &list, "pods", "-n", "elasticdl-system", "-l", "app.kubernetes.io/name=elasticdl-autoscaler")
		for _, q := range list.Items {
			if q.running() {
				p = q
				return true
			}
		}
		return false
	}
	waitFor(t, 30*time.Second, "the autoscaler's pod to run", func() (bool, string) { return runningPod(), p.String() })
	a := &autoscalerPod{t: t, pod: p, metricsPort: port, dashboardPort: dashboardPort}
	waitFor(t, 30*time.Second, "the autoscaler to watch the cluster", func() (bool, string) {
		l := a.logs()
		return strings.Contains(l, "autoscaler watching the cluster"), tail(l, 3)
	})
	return a
}

// autoscalerPod is the running autoscaler.
type autoscalerPod struct {
	t                          *testing.T
	pod                        pod
	metricsPort, dashboardPort int
}

// checkKept fails the test if the autoscaler's pod is gone or restarted:
// nothing it sizes may preempt it (deploy/autoscaler.yaml's priority).
func (a *autoscalerPod) checkKept() {
	a.t.Helper()
	var p pod
	if !getJSON(a.t, &p, "pod", "-n", "elasticdl-system", a.pod.Metadata.Name) || !p.running() {
		a.t.Errorf("the autoscaler's pod %s is gone or not running (%s): was it preempted?", a.pod.Metadata.Name, p.String())
		return
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.RestartCount > 0 {
			a.t.Errorf("the autoscaler restarted %d times", c.RestartCount)
		}
	}
}

func (a *autoscalerPod) logs() string {
	out, err := kubectlCmd(context.Background(), "", "logs", "-n", "elasticdl-system", a.pod.Metadata.Name)
	if err != nil {
		return fmt.Sprintf("(kubectl logs: %v)", err)
	}
	return out
}

// metric reads one sample of the autoscaler's metrics (served on its pod's
// metrics port): the line that starts with series, e.g.
// `elasticdl_autoscaler_utilization{resource="cpu"}`.
func (a *autoscalerPod) metric(series string) (float64, bool) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s:%d/metrics", a.pod.Status.PodIP, a.metricsPort))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f, true
			}
		}
	}
	return 0, false
}

// utilization samples the cluster's CPU utilization (as the autoscaler
// reports it) every second until stop is closed, and returns the mean.
func (a *autoscalerPod) utilization(stop <-chan struct{}) (mean float64, samples int) {
	var sum float64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			if samples > 0 {
				mean = sum / float64(samples)
			}
			return mean, samples
		case <-tick.C:
			if u, ok := a.metric(`elasticdl_autoscaler_utilization{resource="cpu"}`); ok {
				sum += u
				samples++
			}
		}
	}
}

// clusterBoard is what the autoscaler's dashboard (its JSON API) showed:
// the services' CPU and the training jobs' (together) in each sample of
// api/cluster/series, and the reasons of api/cluster/decisions.
type clusterBoard struct {
	mu                 sync.Mutex
	services, training []float64
	reasons            map[string]int
	polls              int
	last               string        // the last poll's error, if any
	moved              time.Duration // when all was shown, since the watch began; 0: not yet
}

// watchBoard polls the autoscaler's dashboard every second until the test
// ends (pods on process nodes share the machine's network: its port is on
// 127.0.0.1).
func (a *autoscalerPod) watchBoard() *clusterBoard {
	b := &clusterBoard{reasons: map[string]int{}}
	base := fmt.Sprintf("http://127.0.0.1:%d/api/", a.dashboardPort)
	stop := make(chan struct{})
	done := make(chan struct{})
	a.t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		start := time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			b.poll(base, time.Since(start))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return b
}

func (b *clusterBoard) poll(base string, since time.Duration) {
	var series struct {
		Samples []struct {
			ServicesCPU float64 `json:"services_cpu"`
			Jobs        map[string]struct {
				CPU float64 `json:"cpu"`
			} `json:"jobs"`
		} `json:"samples"`
	}
	var decisions struct {
		Decisions []struct {
			Reason string `json:"reason"`
		} `json:"decisions"`
	}
	err := errors.Join(getAPI(base+"cluster/series", &series), getAPI(base+"cluster/decisions", &decisions))
	b.mu.Lock()
	defer b.mu.Unlock()
	b.polls++
	if b.last = ""; err != nil {
		b.last = err.Error()
		return
	}
	b.services, b.training = b.services[:0], b.training[:0]
	for _, s := range series.Samples {
		training := 0.0
		for _, j := range s.Jobs {
			training += j.CPU
		}
		b.services, b.training = append(b.services, s.ServicesCPU), append(b.training, training)
	}
	clear(b.reasons)
	for _, d := range decisions.Decisions {
		b.reasons[d.Reason]++
	}
	if ok, _ := b.shownLocked(); ok && b.moved == 0 {
		b.moved = since
	}
}

// shown says whether the dashboard showed the services' and the training
// jobs' CPU move both ways (each rose, then fell: more than a job
// starting), and a decision with its reason.
func (b *clusterBoard) shown() (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shownLocked()
}

// summary says when the dashboard first showed it all, and what it showed.
func (b *clusterBoard) summary() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, what := b.shownLocked()
	return fmt.Sprintf("all shown %.0fs after the watch began; %s", b.moved.Seconds(), what)
}

func (b *clusterBoard) shownLocked() (bool, string) {
	reasons := 0
	for r, n := range b.reasons {
		if r != "" {
			reasons += n
		}
	}
	return peaked(b.services) && peaked(b.training) && reasons > 0,
		fmt.Sprintf("%d polls (last error %q), %d samples: services' CPU %v, training's %v, decisions by reason %v",
			b.polls, b.last, len(b.services), distinct(b.services), distinct(b.training), b.reasons)
}

// distinct is xs's values, sorted, each once.
func distinct(xs []float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return slices.Compact(s)
}

// peaked: some value of xs is above one before it and one after it.
func peaked(xs []float64) bool {
	for j := range xs {
		if slices.ContainsFunc(xs[:j], func(x float64) bool { return x < xs[j] }) &&
			slices.ContainsFunc(xs[j+1:], func(x float64) bool { return x < xs[j] }) {
			return true
		}
	}
	return false
}

func getAPI(url string, into any) error {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// podWaits records, for every pod of a namespace with a label selector, how
// long it waited from when it was first seen (created) to when it ran,
// watching the API server (so to the watch's latency, not to the second of
// the pods' timestamps).
type podWaits struct {
	mu      sync.Mutex
	created map[string]time.Time
	waited  map[string]time.Duration
}

func watchPodWaits(t *testing.T, ns, selector string) *podWaits {
	t.Helper()
	w := &podWaits{created: map[string]time.Time{}, waited: map[string]time.Duration{}}
	f := informers.NewSharedInformerFactoryWithOptions(scaleClient(t), 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	observe := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, seen := w.created[p.Name]; !seen {
			w.created[p.Name] = now
		}
		if _, ran := w.waited[p.Name]; !ran && p.Status.Phase == corev1.PodRunning {
			w.waited[p.Name] = now.Sub(w.created[p.Name])
		}
	}
	// A pod deleted before it ran (the Deployment scaled down while it
	// waited: the ReplicaSet removes pending pods first) waited until then;
	// it must not count as waiting for ever.
	gone := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if at, seen := w.created[p.Name]; seen {
			if _, ran := w.waited[p.Name]; !ran {
				w.waited[p.Name] = time.Since(at)
			}
		}
	}
	inf := f.Core().V1().Pods().Informer()
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, obj any) { observe(obj) }, DeleteFunc: gone})
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("pod informer not synced")
	}
	return w
}

// waits returns how long the pods that ran waited (a pod deleted before it
// ran: until then), and how many pods wait still.
func (w *podWaits) waits() (ran []time.Duration, waiting int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.created {
		if d, ok := w.waited[name]; ok {
			ran = append(ran, d)
		} else {
			waiting++
		}
	}
	slices.Sort(ran)
	return ran, waiting
}

// serviceManifest is the online service: a Deployment of the websvc web
// server at elasticdl-high, 300m a pod, on the test's nodes.
func serviceManifest(ns, label string, replicas int) string {
	return webDeployment(ns, label, replicas, "300m")
}

// webDeployment is serviceManifest with cpu a pod.
func webDeployment(ns, label string, replicas int, cpu string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %s}
spec:
  replicas: %d
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      priorityClassName: elasticdl-high
      nodeSelector: {e2e: %s}
      terminationGracePeriodSeconds: 2
      containers:
      - name: web
        image: websvc:e2e
        env:
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        resources: {requests: {cpu: %s, memory: 64Mi}}
`, ns, replicas, label, cpu)
}

// servicePods returns the service's pods that run, after checking that
// each answers HTTP with its own name (a real web server, not a sleeping
// process).
func servicePods(t *testing.T, ns string, check bool) (running int) {
	t.Helper()
	var list struct{ Items []pod }
	getJSON(t, &list, "pods", "-n", ns, "-l", "app=web")
	client := &http.Client{Timeout: 2 * time.Second}
	for _, p := range list.Items {
		if !p.running() {
			continue
		}
		running++
		if !check {
			continue
		}
		resp, err := client.Get("http://" + p.Status.PodIP + ":8080/")
		if err != nil {
			t.Errorf("service pod %s at %s: %v", p.Metadata.Name, p.Status.PodIP, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.TrimSpace(string(body)) != p.Metadata.Name {
			t.Errorf("service pod %s answered %q", p.Metadata.Name, body)
		}
	}
	return running
}

// TestK8sAutoscalerBesideService is the seeds' online-service experiment on
// the control plane: a web service at elasticdl-high grows 2 → 20 replicas
// and shrinks back to 2 beside a training job at elasticdl-low (workers
// 1..8) sized by `elasticdl autoscaler` (deploy/autoscaler.yaml). Training
// gives the room up as the service grows and takes it back as it shrinks;
// no service pod waits more than a few seconds; the cluster stays busy;
// the job finishes with every record trained exactly once.
//
// Two nodes of 5 CPUs; master and PS 250m, autoscaler 100m, workers 1 CPU,
// service pods 300m: with 2 service pods the job runs its 8 workers (9.2
// of 10 CPUs requested), with 20 (6 CPUs) 3 (9.6).
func TestK8sAutoscalerBesideService(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-as", 2, "5", "16Gi")
	as := startAutoscaler(t, label)
	board := as.watchBoard()
	page := openClusterPage(t, ns+"/beside") // nil without a browser
	waits := watchPodWaits(t, ns, "app=web")
	kubectlApply(t, serviceManifest(ns, label, 2))
	waitFor(t, 30*time.Second, "2 service pods running", func() (bool, string) {
		n := servicePods(t, ns, false)
		return n == 2, fmt.Sprint(n)
	})

	// 8 epochs: the job must outlast the service's rise and fall (3 took
	// 27 s once workers asked for tasks early, and ended before the fall).
	j := submit(t, ns, "beside", label, "--num_workers=8", "--min_workers=1", "--num_epochs=8",
		"--worker_resource_request=cpu=1,memory=256Mi",
		"--worker_pod_priority=elasticdl-low", "--master_pod_priority=elasticdl-high", "--ps_pod_priority=elasticdl-high")
	j.waitWorkers(60*time.Second, 8, 0)
	j.waitTraining(30 * time.Second)
	workersRunning := func() int {
		n, _ := countRunning(j.pods("worker"))
		return n
	}
	utilization := func(d time.Duration) (float64, int) {
		stop := make(chan struct{})
		time.AfterFunc(d, func() { close(stop) })
		return as.utilization(stop)
	}
	u, n := utilization(5 * time.Second)
	t.Logf("service at 2, training at 8 workers: CPU utilization %.1f%% (%d samples)", 100*u, n)
	low := u

	scaleService := func(n int) {
		t.Helper()
		kubectl(t, "scale", "deployment", "web", "-n", ns, fmt.Sprintf("--replicas=%d", n))
	}
	// The load rises: 2 → 20 in steps of 6 every 3 s.
	grown := time.Now()
	for _, n := range []int{8, 14, 20} {
		scaleService(n)
		time.Sleep(3 * time.Second)
	}
	waitFor(t, 60*time.Second, "20 service pods running", func() (bool, string) {
		n := servicePods(t, ns, false)
		return n == 20, fmt.Sprint(n)
	})
	t.Logf("20 service pods running %.1fs after the service began to grow", time.Since(grown).Seconds())
	servicePods(t, ns, true)
	waitFor(t, 30*time.Second, "training down to 1..3 workers", func() (bool, string) {
		n := workersRunning()
		return n >= 1 && n <= 3, fmt.Sprint(j.pods("worker"))
	})
	before := j.recordsDone()
	u, n = utilization(6 * time.Second)
	t.Logf("service at 20, training at %d workers: CPU utilization %.1f%% (%d samples)", workersRunning(), 100*u, n)
	high := u
	var mj masterJobState
	getJSON(t, &mj, "job", "-n", ns, j.masterJob())
	if mj.ended() != "" {
		t.Fatal("the job ended while the service was at 20: make it longer")
	}
	if after := j.recordsDone(); after <= before {
		t.Errorf("no training progress beside 20 service pods: %d records, %d 6 s later", before, after)
	}

	// The load falls: 20 → 2.
	shrunk := time.Now()
	for _, n := range []int{14, 8, 2} {
		scaleService(n)
		time.Sleep(2 * time.Second)
	}
	waitFor(t, 60*time.Second, "training back at 8 workers", func() (bool, string) {
		return workersRunning() == 8, fmt.Sprint(j.pods("worker"))
	})
	t.Logf("training back at 8 workers %.1fs after the service began to shrink", time.Since(shrunk).Seconds())
	// The cluster's dashboard showed it: polled all along, it holds by now.
	waitFor(t, 10*time.Second, "the cluster dashboard to show the services and training rise and fall, and a decision's reason", board.shown)
	t.Logf("cluster dashboard: %s", board.summary())
	if page != nil {
		waitFor(t, 10*time.Second, "the cluster's page to show the same, through elasticdl dashboard --autoscaler", page.shown)
		_, what := page.shown()
		t.Logf("cluster page: %s", what)
		page.screenshot()
	}
	for what, u := range map[string]float64{"2": low, "20": high} {
		if u < 0.8 {
			t.Errorf("CPU utilization %.1f%% with the service at %s: training did not fill the room", 100*u, what)
		}
	}

	ran, waiting := waits.waits()
	if waiting != 0 || len(ran) < 20 {
		t.Errorf("service pods: %d ran, %d still waiting; want all of at least 20 run", len(ran), waiting)
	}
	if len(ran) > 0 {
		t.Logf("service pods, created → running (%d): median %s, p90 %s, max %s", len(ran),
			ran[len(ran)/2].Round(time.Millisecond), ran[len(ran)*9/10].Round(time.Millisecond), ran[len(ran)-1].Round(time.Millisecond))
		if worst := ran[len(ran)-1]; worst > 10*time.Second {
			t.Errorf("a service pod waited %s to run: training did not make room in time", worst)
		}
	}

	r := waitSucceeded(t, j, 8*time.Minute)
	assertTrained(t, r, 8, minAccuracy)
	w := r.Summary.Workers
	t.Logf("workers: %+v; resizes: %+v", w, r.Summary.Resizes)
	if w.ScaledDown+w.Preempted < 4 || w.ScaledUp+w.Relaunched < 4 {
		t.Errorf("summary workers %+v: want at least 4 given up (scaled down or preempted) and 4 taken back", w)
	}
	as.checkKept()
	if l := as.logs(); !strings.Contains(l, "job target") {
		t.Errorf("the autoscaler never set a target:\n%s", tail(l, 20))
	}
}

// TestK8sAutoscalerFairShare: three jobs (workers 1..8 of 1 CPU) arrive one
// after another on two nodes of 5 CPUs sized by `elasticdl autoscaler`;
// each time, the jobs that run end up within one worker of their fair
// share (the CPUs that masters, PS and the autoscaler leave, split evenly),
// the first ones giving workers up for the newcomers.
func TestK8sAutoscalerFairShare(t *testing.T) {
	timeTest(t)
	ns := newNamespace(t)
	label := startProcNodes(t, "e2e-fs", 2, "5", "16Gi")
	as := startAutoscaler(t, label)
	defer as.checkKept()
	const nodeCPU, overhead, jobCPU = 10.0, 0.1, 0.5 // the autoscaler; master + PS per job
	var jobs []*job
	for i, name := range []string{"fair-a", "fair-b", "fair-c"} {
		j := submit(t, ns, name, label, "--num_workers=8", "--min_workers=1", "--num_epochs=50",
			"--worker_resource_request=cpu=1,memory=256Mi",
			"--worker_pod_priority=elasticdl-low", "--master_pod_priority=elasticdl-high", "--ps_pod_priority=elasticdl-high")
		t.Cleanup(j.delete)
		jobs = append(jobs, j)
		share := min(8, int((nodeCPU-overhead-jobCPU*float64(i+1))/float64(i+1)))
		var counts []int
		took := waitFor(t, 90*time.Second, fmt.Sprintf("%d job(s) within one worker of a fair share of %d", i+1, share), func() (bool, string) {
			counts = counts[:0]
			ok := true
			for _, j := range jobs {
				n, _ := countRunning(j.pods("worker"))
				counts = append(counts, n)
				ok = ok && n >= share-1 && n <= share+1
			}
			return ok, fmt.Sprint(counts)
		})
		t.Logf("%d job(s): workers %v (fair share %d) %.1fs after %s was submitted", i+1, counts, share, took.Seconds(), name)
	}
	for _, j := range jobs {
		if l := j.podLog(j.masterPod()); !strings.Contains(l, "records=") {
			t.Errorf("job %s never trained:\n%s", j.name, tail(l, 10))
		}
	}
}

// quoted are args as a YAML flow sequence's items.
func quoted(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strconv.Quote(a)
	}
	return out
}
