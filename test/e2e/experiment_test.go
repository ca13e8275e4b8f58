package e2e

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"elasticdl/internal/experiment"
)

// The seeds' experiments (docs/experiments.md). Each runs a short version
// in every e2e run (CI), which checks what the experiment shows and
// renders its report into a temp dir; with ELASTICDL_EXPERIMENT naming it
// (or "all": `make experiments`, hack/experiments.sh) it runs the full
// version and rewrites its section, plot and data under docs/.

// experimentOut is where an experiment writes its report: docs/ for the
// full version, a temp dir for the short one.
func experimentOut(t *testing.T, full bool) (doc, dir string) {
	if !full {
		d := t.TempDir()
		return filepath.Join(d, "experiments.md"), filepath.Join(d, "experiments")
	}
	return filepath.Join(repoRoot, "docs", "experiments.md"), filepath.Join(repoRoot, "docs", "experiments")
}

// timeline samples a namespace every 500 ms until ctx ends: the CPUs
// requested by the running pods of each series (which series a pod is of:
// seriesOf, -1 for none) and the running elasticdl workers; and it notes
// when the master Job of each of jobs has ended.
type timeline struct {
	mu       sync.Mutex
	t0       time.Time
	seriesOf func(*corev1.Pod) int
	series   int
	jobs     []string
	samples  []experiment.Sample
	ended    map[string]float64
}

// byJob is a seriesOf: the pods of each of jobs, in order.
func byJob(jobs []string) func(*corev1.Pod) int {
	return func(p *corev1.Pod) int { return slices.Index(jobs, p.Labels["elasticdl.io/job-name"]) }
}

func watchJobs(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, t0 time.Time, jobs []string) *timeline {
	return watchSeries(ctx, t, cs, ns, t0, byJob(jobs), len(jobs), jobs)
}

func watchSeries(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, t0 time.Time, seriesOf func(*corev1.Pod) int, series int, jobs []string) *timeline {
	tl := &timeline{t0: t0, seriesOf: seriesOf, series: series, jobs: jobs, ended: map[string]float64{}}
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			tl.sample(ctx, t, cs, ns)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return tl
}

func (tl *timeline) sample(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	at := time.Since(tl.t0).Seconds()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		if ctx.Err() == nil {
			t.Logf("timeline: list pods: %v", err)
		}
		return
	}
	jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	s := experiment.Sample{T: at, CPU: make([]float64, tl.series), Workers: make([]int, tl.series)}
	for _, p := range pods.Items {
		i := tl.seriesOf(&p)
		if i < 0 || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Spec.Containers {
			s.CPU[i] += c.Resources.Requests.Cpu().AsApproximateFloat64()
		}
		if p.Labels["app.kubernetes.io/name"] == "elasticdl" && p.Labels["elasticdl.io/replica-type"] == "worker" {
			s.Workers[i]++
		}
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, j := range jobs.Items {
		name := strings.TrimSuffix(strings.TrimPrefix(j.Name, "elasticdl-"), "-master")
		if _, seen := tl.ended[name]; seen || !slices.Contains(tl.jobs, name) {
			continue
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				tl.ended[name] = at
			}
		}
	}
	tl.samples = append(tl.samples, s)
}

// result returns the samples and when each job ended; ok once all have.
func (tl *timeline) result() (samples []experiment.Sample, ended map[string]float64, ok bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.samples), maps.Clone(tl.ended), len(tl.ended) == len(tl.jobs)
}

// gangRBAC lets the ServiceAccount elasticdl of ns list the cluster's
// nodes and pods (deploy/rbac-gang.yaml), for --gang.
func gangRBAC(t *testing.T, ns string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "rbac-gang.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := strings.ReplaceAll(string(b), "name: elasticdl-gang-default", "name: elasticdl-gang-"+ns)
	kubectlApply(t, strings.ReplaceAll(m, "namespace: default", "namespace: "+ns))
	t.Cleanup(func() {
		kubectlCmd(context.Background(), "", "delete", "clusterrolebinding", "elasticdl-gang-"+ns, "--ignore-not-found")
	})
}

// TestExperimentGangVsElastic is experiment 1 (the ElasticDL report's two
// overlapping jobs): on 24 CPUs, two jobs that each want 13 workers of one
// CPU (+ a PS), the second submitted shortly after the first, once as gang
// jobs (--gang: all or nothing) and once elastic. Workers are real
// elasticdl worker processes on process nodes with modelled compute
// (calibrated from fashion_mnist.cnn's real step here); everything else is
// real. It checks that a gang job holds nothing until it can have
// everything and that the elastic second job starts at once beside the
// first, grows when the first ends, and finishes both sooner; every
// epoch of every job is trained exactly once.
func TestExperimentGangVsElastic(t *testing.T) {
	g := experiment.GangVsElastic{Command: "make experiments EXPERIMENTS=gang", Nodes: 3, CPUsPerNode: 8, Workers: 13, WorkerCPU: 1, PSCPU: 0.5, MasterCPU: 0.25}
	// Tasks of about a second on one CPU: the last round of tasks, when
	// some workers have none left, costs little.
	runGangExperiment(t, "gang", "gang-vs-elastic", g, func(g *experiment.GangVsElastic) {
		g.MinibatchSize, g.MinibatchesPerTask = modelledMinibatch, taskMinibatches(g.SecondsPerRecord)
		g.SecondAfter = experiment.ElasticDLSeed.SecondAfter / g.Scale
	}, 0.9, 60) // the seed's ratio is 0.73
}

// runGangExperiment runs experiment 1 or 5 (ELASTICDL_EXPERIMENT name,
// section the report's name): g's cluster and jobs, 60,000 records an
// epoch, as many epochs as make the first job alone take fullAlone
// seconds (full version; 12 s short) at the calibrated modelled compute,
// time scaled to the seed's; set fills in the tasks and the second job's
// delay. The short version fails when elastic ÷ gang reaches maxRatio:
// the jobs' work is fixed, so the elastic pair must overlap.
func runGangExperiment(t *testing.T, name, section string, g experiment.GangVsElastic, set func(*experiment.GangVsElastic), maxRatio, fullAlone float64) {
	timeTest(t)
	needK8sCLI(t)
	full := experiment.Requested(name)
	seed := experiment.ElasticDLSeed
	if g.Seed != nil {
		seed = *g.Seed
	}
	g.Date, g.Machine, g.RecordsPerEpoch = time.Now().UTC().Format("2006-01-02"), experiment.Machine(), 60000
	runs, alone := 1, 12.0 // the first job alone, our seconds
	if full {
		runs, alone = 3, fullAlone
	}
	g.SecondsPerRecord, g.Calibration = calibrate(t)
	g.Epochs = max(1, int(math.Round(alone*float64(g.Workers)*g.WorkerCPU/(float64(g.RecordsPerEpoch)*g.SecondsPerRecord))))
	g.Scale = seed.FirstAlone / g.Alone()
	set(&g)
	t.Logf("modelled compute %.1f µs a record: %d epochs, %.1f s for a job alone at %d workers, scale %.2f, second job after %.1f s",
		g.SecondsPerRecord*1e6, g.Epochs, g.Alone(), g.Workers, g.Scale, g.SecondAfter)

	label := startProcNodes(t, "e2e-x", g.Nodes, fmt.Sprint(g.CPUsPerNode), "24Gi")
	cs := scaleClient(t)
	g.Runs = alternate(t, runs, []string{"gang", "elastic"}, func(t *testing.T, mode string, i int) experiment.Run {
		return runGangVsElastic(t, cs, g, label, mode, i)
	})
	ratio, wait := g.Summary()
	t.Logf("elastic ÷ gang makespan %s, second elastic job's wait %s s", ratio.Format("%.3f"), wait.Format("%.1f"))
	if !full && ratio.Max >= maxRatio {
		t.Errorf("elastic ÷ gang makespan %.3f: the elastic jobs did not overlap", ratio.Max)
	}
	report(t, full, section, g)
}

// blasNote names the BLAS backend the calibration ran with.
func blasNote() string {
	if os.Getenv("OPENBLAS_NUM_THREADS") == "1" {
		return "hack/experiments.sh builds it as the workers are, OPENBLAS_NUM_THREADS=1"
	}
	return "as go test built it"
}

// runGangVsElastic runs the two jobs of experiment 1 in mode gang or
// elastic in a namespace of their own and returns what happened.
func runGangVsElastic(t *testing.T, cs kubernetes.Interface, g experiment.GangVsElastic, label, mode string, index int) experiment.Run {
	ns := newNamespace(t)
	args := append(modelledJobArgs(g.SecondsPerRecord, g.WorkerCPU, g.PSCPU, g.MasterCPU),
		fmt.Sprintf("--num_workers=%d", g.Workers), fmt.Sprintf("--num_epochs=%d", g.Epochs))
	if g.Strategy != "" {
		// Later flags win: no PS, and the experiment's minibatches.
		args = append(args, "--distribution_strategy="+g.Strategy, "--num_ps_pods=0",
			fmt.Sprintf("--minibatch_size=%d", g.MinibatchSize), fmt.Sprintf("--num_minibatches_per_task=%d", g.MinibatchesPerTask))
	}
	if mode == "gang" {
		gangRBAC(t, ns)
		args = append(args, "--gang")
	}
	names := []string{"first", "second"}
	r := runJobs(t, cs, ns, label, names, func(int) []string { return args }, func(int) int { return g.Epochs }, g.RecordsPerEpoch, func(i int) time.Duration {
		return time.Duration(float64(i) * g.SecondAfter * float64(time.Second))
	}, g.Workers, time.Duration(4*g.Alone()+180)*time.Second)
	r.Mode, r.Index, r.Series = mode, index, []string{"first job", "second job"}
	first, second := r.Jobs[0], r.Jobs[1]
	_, firstMost := r.WorkerRange(0)
	_, secondMost := r.WorkerRange(1)
	t.Logf("%s run %d: makespan %.1fs, first %.1f→%.1f→%.1f, second %.1f→%.1f→%.1f (admission %.1fs, ≤%d workers), utilization %.1f%%",
		mode, index, r.Makespan(), first.Submitted, first.Started, first.Ended, second.Submitted, second.Started, second.Ended,
		second.AdmissionWait, secondMost, 100*r.Utilization(g.Capacity()))
	// Samples with workers of both jobs running; in gang mode only those
	// before the first job's last task counts: once it is done its workers
	// exit one by one, and the pods that have already exited make room.
	overlap, overlapTraining := 0, 0
	for _, s := range r.Timeline {
		if s.Workers[0] > 0 && s.Workers[1] > 0 {
			overlap++
			if s.T < first.Trained {
				overlapTraining++
			}
		}
	}
	switch mode {
	case "gang":
		if first.Trained == 0 {
			t.Errorf("gang: the first job's summary has no last_task_trained_at")
		}
		if overlapTraining > 0 {
			t.Errorf("gang: the second job had workers running beside the first's training in %d samples (before %.1fs)", overlapTraining, first.Trained)
		}
		if second.AdmissionWait <= 0 || second.Started < first.Trained {
			t.Errorf("gang: the second job was admitted after %.1fs and trained from %.1fs, before the first's last task at %.1fs",
				second.AdmissionWait, second.Started, first.Trained)
		}
		if firstMost != g.Workers || secondMost != g.Workers {
			t.Errorf("gang: workers at most %d and %d, want all %d", firstMost, secondMost, g.Workers)
		}
	case "elastic":
		if overlap == 0 {
			t.Errorf("elastic: the second job never trained beside the first")
		}
		if second.Started >= first.Ended {
			t.Errorf("elastic: the second job's first task (%.1fs) came after the first job ended (%.1fs)", second.Started, first.Ended)
		}
		if secondMost != g.Workers {
			t.Errorf("elastic: the second job grew to %d workers, want %d once the first ended", secondMost, g.Workers)
		}
	}
	return r
}

// TestExperimentAllReduceGang is experiment 5 (ElasticDL's AllReduce
// report): two 4-worker AllReduce jobs on a cluster with room for 6
// workers, the second submitted just after the first, as gang jobs (the
// second waits for all 4) and elastic (it starts with the 2 free and grows
// to 4 when the first ends). Modelled compute: each member waits for its
// share of a step's global batch and the ring sums a real gradient buffer
// of zeros every step, so the collective's cost and the ring's re-forming
// are real. Checks as experiment 1's.
func TestExperimentAllReduceGang(t *testing.T) {
	seed := experiment.AllReduceSeed
	// Two nodes of 3.5 CPUs: 3 workers of 1 CPU and the masters fit on
	// each, a seventh worker nowhere.
	g := experiment.GangVsElastic{Seed: &seed, Strategy: "AllreduceStrategy", Command: "make experiments EXPERIMENTS=allreduce",
		Nodes: 2, CPUsPerNode: 3.5, Workers: 4, WorkerCPU: 1, MasterCPU: 0.25}
	runGangExperiment(t, "allreduce", "allreduce-gang-vs-elastic", g, func(g *experiment.GangVsElastic) {
		// A step's global batch is 4 × 1024 records whatever the ring's
		// size: a member computes for ~0.2 s (4 members) or ~0.4 s (2)
		// between collectives of the cnn's 0.8 MB of gradients. Tasks of
		// one step at full size.
		g.MinibatchSize, g.MinibatchesPerTask = 1024, 4
		// The report gives no delay; a second, so that the first job is
		// the first served.
		g.SecondAfter = 1
	}, 0.95, 40) // the seed's ratio is 0.84
}

// calibrate measures the modelled compute's cost of a record (see
// experiment.CNNSecondsPerRecord) and says where it comes from.
func calibrate(t *testing.T) (secondsPerRecord float64, note string) {
	t.Helper()
	s, err := experiment.CNNSecondsPerRecord(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s, fmt.Sprintf("fashion_mnist.cnn's batch-64 forward and backward measured here, one goroutine, BLAS backend of the test binary (%s)", blasNote())
}

// TestExperimentBesideServices is experiment 2 (Paddle EDL's nginx
// experiment, ElasticDL's "auto react"): an online service at
// elasticdl-high — real web servers — whose replicas follow a day of load
// set by a load driver, beside two training jobs at elasticdl-low, once as
// fixed-size jobs sized for the service's peak and once elastic, sized by
// `elasticdl autoscaler` (deploy/autoscaler.yaml). It measures the
// cluster's utilization over the day, the records trained, and how long
// each service pod waited to run; it checks that elastic training fills
// more of the cluster and trains more, and that no service pod waits
// long for training to make room.
func TestExperimentBesideServices(t *testing.T) {
	timeTest(t)
	needK8sCLI(t)
	full := experiment.Requested("services")
	e := experiment.BesideServices{Date: time.Now().UTC().Format("2006-01-02"), Machine: experiment.Machine(),
		Command: "make experiments EXPERIMENTS=services", Nodes: 3, CPUsPerNode: 8,
		ServiceCPU: 0.5, ServiceMin: 4, ServiceMax: 32, Day: 24,
		Jobs: 2, MaxWorkers: 32, WorkerCPU: 0.5, PSCPU: 0.25, MasterCPU: 0.25}
	runs := 1
	if full {
		runs, e.Day = 3, 100
	}
	// Fixed-size jobs get what fits beside the service's peak, the
	// autoscaler's 100m left aside.
	peakLeft := e.Capacity() - float64(e.ServiceMax)*e.ServiceCPU - float64(e.Jobs)*(e.PSCPU+e.MasterCPU) - 0.1
	e.FixedWorkers = int(peakLeft / float64(e.Jobs) / e.WorkerCPU)
	e.SecondsPerRecord, e.Calibration = calibrate(t)
	label := startProcNodes(t, "e2e-y", e.Nodes, fmt.Sprint(e.CPUsPerNode), "24Gi")
	cs := scaleClient(t)
	e.Runs = alternate(t, runs, []string{"fixed", "elastic"}, func(t *testing.T, mode string, i int) experiment.Run {
		return runBesideServices(t, cs, e, label, mode, i)
	})
	util := func(r experiment.Run) float64 { return r.Utilization(e.Capacity()) }
	fixed, elastic := experiment.SpreadOf(experiment.Of(e.Runs, "fixed", util)), experiment.SpreadOf(experiment.Of(e.Runs, "elastic", util))
	t.Logf("utilization over the day: fixed-size %s, elastic %s", fixed.Format("%.3f"), elastic.Format("%.3f"))
	if elastic.Min <= fixed.Max {
		t.Errorf("elastic training filled no more of the cluster (%.3f) than fixed-size jobs (%.3f)", elastic.Min, fixed.Max)
	}
	report(t, full, "beside-services", e)
}

// secondly is the timeline, one sample a second, for the log: where the
// CPUs went when a run falls short.
func secondly(samples []experiment.Sample) string {
	var b strings.Builder
	next := 0.0
	for _, s := range samples {
		if s.T < next || len(s.CPU) < 2 {
			continue
		}
		fmt.Fprintf(&b, " %.0fs:%.1f+%.1f(%d)", s.T, s.CPU[0], s.CPU[1], s.Workers[1])
		next = math.Floor(s.T) + 1
	}
	return b.String()
}

// serviceReplicas is the load curve: ServiceMin at the day's start and
// end, ServiceMax at noon (a raised cosine).
func serviceReplicas(e experiment.BesideServices, at float64) int {
	f := (1 - math.Cos(2*math.Pi*min(max(at/e.Day, 0), 1))) / 2
	return e.ServiceMin + int(math.Round(f*float64(e.ServiceMax-e.ServiceMin)))
}

// runBesideServices runs one day of experiment 2 in mode fixed or elastic.
func runBesideServices(t *testing.T, cs kubernetes.Interface, e experiment.BesideServices, label, mode string, index int) experiment.Run {
	ns := newNamespace(t)
	waits := watchPodWaits(t, ns, "app=web")
	var as *autoscalerPod
	args := append(modelledJobArgs(e.SecondsPerRecord, e.WorkerCPU, e.PSCPU, e.MasterCPU), "--num_epochs=100000", "--log_interval=1s",
		"--worker_pod_priority=elasticdl-low", "--master_pod_priority=elasticdl-high", "--ps_pod_priority=elasticdl-high")
	if mode == "elastic" {
		as = startAutoscaler(t, label)
		args = append(args, fmt.Sprintf("--num_workers=%d", e.MaxWorkers), "--min_workers=1")
	} else {
		args = append(args, fmt.Sprintf("--num_workers=%d", e.FixedWorkers))
	}
	replicas := e.ServiceMin
	kubectlApply(t, webDeployment(ns, label, replicas, fmt.Sprintf("%gm", e.ServiceCPU*1000)))
	waitFor(t, 30*time.Second, "the service's pods running", func() (bool, string) {
		n := servicePods(t, ns, false)
		return n == replicas, fmt.Sprint(n)
	})
	var jobs []*job
	for k := range e.Jobs {
		jobs = append(jobs, submit(t, ns, fmt.Sprintf("train-%d", k), label, args...))
	}
	for _, j := range jobs {
		j.waitTraining(60 * time.Second)
	}
	size := e.FixedWorkers
	if mode == "elastic" {
		size = 0 // the autoscaler's targets
	}
	waitSized(t, jobs, size, 90*time.Second)
	recordsDone := func() (n int64) {
		for _, j := range jobs {
			n += j.recordsDone()
		}
		return n
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	t0 := time.Now()
	before := recordsDone()
	tl := watchSeries(ctx, t, cs, ns, t0, func(p *corev1.Pod) int {
		switch {
		case p.Labels["app"] == "web":
			return 0
		case p.Labels["app.kubernetes.io/name"] == "elasticdl":
			return 1
		}
		return -1
	}, 2, nil)
	for at := time.Duration(0); at < time.Duration(e.Day*float64(time.Second)); at += time.Second {
		time.Sleep(time.Until(t0.Add(at)))
		if n := serviceReplicas(e, at.Seconds()); n != replicas {
			replicas = n
			kubectl(t, "scale", "deployment", "web", "-n", ns, fmt.Sprintf("--replicas=%d", n))
		}
	}
	time.Sleep(time.Until(t0.Add(time.Duration(e.Day * float64(time.Second)))))
	after := recordsDone()
	stop()
	samples, _, _ := tl.result()
	t.Logf("%s run %d, CPUs requested each second (service + training, workers): %s", mode, index, secondly(samples))
	servicePods(t, ns, true) // each answers HTTP
	waitFor(t, 30*time.Second, "every service pod to have run", func() (bool, string) {
		_, waiting := waits.waits()
		return waiting == 0, fmt.Sprintf("%d waiting", waiting)
	})
	ran, _ := waits.waits()
	r := experiment.Run{Mode: mode, Index: index, Series: []string{"online service", "training"}, Timeline: samples, End: e.Day, Records: after - before}
	for _, d := range ran {
		r.Waits = append(r.Waits, d.Seconds())
	}
	for _, j := range jobs {
		if l := j.podLog(j.masterPod()); strings.Contains(l, "job failed") {
			t.Errorf("job %s failed:\n%s", j.name, tail(l, 20))
		}
	}
	lo, hi := r.WorkerRange(1)
	t.Logf("%s run %d: utilization %.1f%%, %d records trained over the day, workers %d–%d, service pods %d (worst wait %s)",
		mode, index, 100*r.Utilization(e.Capacity()), r.Records, lo, hi, len(ran), ran[len(ran)-1].Round(time.Millisecond))
	if r.Records <= 0 {
		t.Errorf("%s: no training progress over the day", mode)
	}
	if mode == "elastic" {
		as.checkKept()
		if worst := ran[len(ran)-1]; worst > 10*time.Second {
			t.Errorf("a service pod waited %s to run beside elastic training: training did not make room in time", worst)
		}
		if hi <= e.FixedWorkers*e.Jobs {
			t.Errorf("elastic training never grew past the fixed size (%d workers at most)", hi)
		}
	}
	return r
}

// runJobs submits the jobs names in ns, job i with args(i) at submitAt(i)
// after the first (ordered > 0: also not before job i-1 has created
// ordered workers), waits for all to end (at most timeout), and returns the run:
// the timeline of what each held, and each job's times, workers and
// ledger (each epoch must hold recordsPerEpoch records, trained exactly
// once, for epochs(i) epochs).
func runJobs(t *testing.T, cs kubernetes.Interface, ns, label string, names []string, args func(int) []string, epochs func(int) int, recordsPerEpoch int64,
	submitAt func(int) time.Duration, ordered int, timeout time.Duration) experiment.Run {
	t.Helper()
	var jobs []*job
	for _, name := range names {
		jobs = append(jobs, newJob(t, ns, name, label))
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	t0 := time.Now()
	tl := watchJobs(ctx, t, cs, ns, t0, names)
	for i, j := range jobs {
		time.Sleep(time.Until(t0.Add(submitAt(i))))
		if ordered > 0 && i > 0 {
			waitWorkersCreated(t, cs, ns, names[i-1], ordered)
		}
		submitJob(t, j, args(i)...)
	}
	waitFor(t, timeout, "every job to end", func() (bool, string) {
		s, ended, ok := tl.result()
		if len(s) == 0 {
			return false, "no sample"
		}
		return ok, fmt.Sprintf("ended %v, last sample %+v", ended, s[len(s)-1])
	})
	stop()
	samples, ended, _ := tl.result()
	r := experiment.Run{Timeline: samples}
	for i, j := range jobs {
		res := waitSucceeded(t, j, 30*time.Second)
		ej := experiment.Job{Name: names[i], Submitted: j.submitted.Sub(t0).Seconds(), Ended: ended[names[i]],
			AdmissionWait: res.Summary.AdmissionWaitSeconds, ExactlyOnce: len(res.Summary.Epochs) == epochs(i)}
		if !res.FirstTaskTrainedAt.IsZero() {
			ej.Started = res.FirstTaskTrainedAt.Sub(t0).Seconds()
		}
		if at := res.Summary.LastTaskTrainedAt; at != nil {
			ej.Trained = at.Sub(t0).Seconds()
		}
		for _, e := range res.Summary.Epochs {
			ej.Records += e.RecordsTrained
			if e.Records != recordsPerEpoch || e.RecordsTrained != e.Records || e.RecordsTrainedTwice != 0 || e.RecordsMissed != 0 {
				ej.ExactlyOnce = false
			}
		}
		if !ej.ExactlyOnce {
			t.Errorf("job %s: not every epoch exactly once: %s", names[i], summaryLine(res.Summary))
		}
		r.Jobs = append(r.Jobs, ej)
	}
	return r
}

// waitWorkersCreated waits for job name's master to have created want
// worker pods. The gang experiments submit the second job after that: two
// masters starting close together on a loaded machine may otherwise admit
// the second job's gang first, or both at once (a master's start varies by
// more than the second job's delay, and each admits on what it lists).
func waitWorkersCreated(t *testing.T, cs kubernetes.Interface, ns, name string, want int) {
	t.Helper()
	sel := "elasticdl.io/replica-type=worker,elasticdl.io/job-name=" + name
	waitFor(t, 2*time.Minute, "job "+name+" to create its workers", func() (bool, string) {
		pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) >= want, fmt.Sprintf("%d of %d worker pods", len(pods.Items), want)
	})
}

// modelledMinibatch is the minibatch of the experiments' modelled jobs.
const modelledMinibatch = 256

// taskMinibatches makes tasks of about a second on one CPU, so that the
// last round of a job's tasks, when some workers have none left, costs
// little.
func taskMinibatches(secondsPerRecord float64) int {
	return max(1, int(math.Round(1/(modelledMinibatch*secondsPerRecord))))
}

// modelledJobArgs are the flags the experiments' jobs share:
// fashion_mnist.cnn with modelled compute, one PS, no evaluation, tasks
// of about a second, and what each pod requests (CPUs).
func modelledJobArgs(secondsPerRecord, workerCPU, psCPU, masterCPU float64) []string {
	return []string{"--model_def=fashion_mnist.cnn", "--validation_data=", "--num_ps_pods=1",
		fmt.Sprintf("--minibatch_size=%d", modelledMinibatch), fmt.Sprintf("--num_minibatches_per_task=%d", taskMinibatches(secondsPerRecord)),
		fmt.Sprintf("--modelled_seconds_per_record=%g", secondsPerRecord),
		fmt.Sprintf("--worker_resource_request=cpu=%gm,memory=256Mi", workerCPU*1000),
		fmt.Sprintf("--ps_resource_request=cpu=%gm,memory=256Mi", psCPU*1000),
		fmt.Sprintf("--master_resource_request=cpu=%gm,memory=256Mi", masterCPU*1000)}
}

// alternate runs each of modes runs times as subtests MODE-i, their
// order reversed from run to run so that drift on a shared machine falls
// on all alike (over an even number of runs each mode holds every
// position as often), and returns the runs; it stops at the first
// failure.
func alternate(t *testing.T, runs int, modes []string, run func(t *testing.T, mode string, i int) experiment.Run) []experiment.Run {
	var out []experiment.Run
	for i := range runs {
		order := slices.Clone(modes)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, mode := range order {
			t.Run(fmt.Sprintf("%s-%d", mode, i), func(t *testing.T) {
				out = append(out, run(t, mode, i))
			})
			if t.Failed() {
				t.FailNow()
			}
		}
	}
	return out
}

// report writes the experiment's data, plot and section (see
// experiment.Write) into docs/ (full) or a temp dir (short).
func report(t *testing.T, full bool, name string, r experiment.Report) {
	t.Helper()
	doc, dir := experimentOut(t, full)
	section, err := experiment.Write(doc, dir, name, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report of experiment %s in %s (data and plot in %s):\n%s", name, doc, dir, section)
}
