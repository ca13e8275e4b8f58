package e2e

// Issue 4 item 5: a job with 200 worker pods on kwok nodes.
//
// The master runs in the test process on the real Kubernetes backend
// (internal/cluster/k8s, client-go) against the rig's API server; its worker
// and PS pods land on kwok nodes, where they go Running without running
// anything. The workers are the test-only mode "speak the protocol, do not
// compute": for each worker pod that goes Running, the test starts a
// goroutine (scaleWorkerPool.run) with that pod's instance ID (label
// elasticdl.io/instance-id) that does what a worker process does over the
// master's gRPC API — GetTask, ReportTaskResult with the task's record count,
// Heartbeat every 2 s — but trains nothing; it stops when its pod is being
// deleted, as the process would on SIGTERM. The PS runs in the test process
// too (internal/ps at 127.0.0.1:PSPort, where the PS pod's Service address
// points with PSHost), so the job ends as a real one does: model saved,
// summary written, the backend deleting every pod.
//
// What it measures (printed with t.Logf as "scale: ..." lines, recorded in
// bench/RESULTS.md; nothing here asserts a timing):
//   - the creation burst: first worker pod created → all 200 Running (the
//     workers of the pods Running so far start only then, so that their
//     load does not slow the control plane that shares the CPUs here);
//   - GetTask latency over all 200 clients, in two phases: "paced" (each
//     worker takes scaleTaskTime per task, as if it computed) while pods are
//     deleted and relaunched, then "saturated" (no think time);
//   - relaunch latency for scaleSeqRelaunches pods deleted one at a time and
//     scaleBurstRelaunches deleted at once: delete call → the master's
//     backend reports the pod Exited (API server, kwok, informer) → the
//     master calls Launch for the replacement (its decision) → the pod is
//     created → the replacement Running;
//   - Close: the backend deleting all pods at the end of the job.
//
// What it asserts: all 200 worker pods Running on the test's kwok nodes,
// every deleted worker replaced in its slot, every task completed exactly
// once (the summary's task count and per-epoch ledger; no task accepted
// twice from the clients' side), the job succeeded, and no pod or Service
// of the job is left after Run.

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
	"elasticdl/internal/ps"
	"elasticdl/internal/ps/client"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/model"
	"elasticdl/model/zoo"
)

const (
	scaleWorkers = 200
	// 8 records per task, 2 epochs of Fashion-MNIST: 7,500 tasks an epoch.
	scaleMinibatch   = 8
	scaleMinibatches = 1
	scaleEpochs      = 2
	// scaleTaskTime is the think time per task of the paced phase: 200
	// workers × 1 task/s ≈ 200 GetTask + 200 reports + 100 heartbeats per
	// second (a real task of 512 records takes seconds).
	scaleTaskTime  = time.Second
	scaleHeartbeat = 2 * time.Second // a worker's default
	// scalePacedMin is the shortest paced phase (the relaunches take less).
	scalePacedMin        = 15 * time.Second
	scaleSeqRelaunches   = 20
	scaleBurstRelaunches = 20
	scaleKwokNodes       = 4
)

// scaleClient is a client-go clientset on the rig, with the rate limits the
// master gets in its pod (k8s.Connect).
func scaleClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = k8s.ClientQPS, k8s.ClientBurst
	rc.Timeout = 30 * time.Second
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// scaleKwok starts n kwok nodes PREFIX-0..n-1 (hack/k8s-rig/kwok-nodes.sh)
// labelled elasticdl-scale=PREFIX besides type=kwok, and deletes them at the
// end. It returns the node selector of exactly these nodes.
func scaleKwok(t *testing.T, prefix string, n int, cpu, mem string) map[string]string {
	t.Helper()
	start := time.Now()
	if _, err := script([]string{"K8S_RIG_KWOK_PREFIX=" + prefix}, "hack/k8s-rig/kwok-nodes.sh", fmt.Sprint(n), cpu, mem); err != nil {
		t.Fatalf("kwok-nodes.sh %d %s %s (prefix %s): %v", n, cpu, mem, prefix, err)
	}
	var nodes []string
	for i := 0; i < n; i++ {
		nodes = append(nodes, fmt.Sprintf("%s-%d", prefix, i))
	}
	t.Cleanup(func() {
		if _, err := kubectlCmd(context.Background(), "", append([]string{"delete", "node", "--ignore-not-found", "--wait=false"}, nodes...)...); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	kubectl(t, append(append([]string{"label", "node", "--overwrite"}, nodes...), "elasticdl-scale="+prefix)...)
	t.Logf("%d kwok nodes %s-0..%d (cpu=%s memory=%s) Ready in %.1fs", n, prefix, n-1, cpu, mem, time.Since(start).Seconds())
	return map[string]string{"type": "kwok", "elasticdl-scale": prefix}
}

// ---- the test ---------------------------------------------------------------------------------------

// scaleRelaunch is the timeline of one deleted worker pod.
type scaleRelaunch struct {
	id, index, newID               int
	call, exited, launch, launched time.Time
	created, running               time.Time
}

func TestScaleKwok200Workers(t *testing.T) {
	timeTest(t)
	testStart := time.Now()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	prefix := uniqueName(t, "kwok")
	if len(prefix) > 40 {
		prefix = prefix[len(prefix)-40:]
	}
	prefix = strings.TrimLeft(prefix, "-")
	selector := scaleKwok(t, prefix, scaleKwokNodes, "32", "256Gi")
	ns := newBareNamespace(t)
	job := uniqueName(t, "s")
	ports := freePortBlock(2)
	masterAddr := fmt.Sprintf("127.0.0.1:%d", ports)
	psPort := ports + 1

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The model and an in-process PS holding its initial parameters (the
	// first worker would push them).
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	spec, err := reg.Lookup("fashion_mnist.mlp")
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optimizer.Parse(spec.Optimizer)
	if err != nil {
		t.Fatal(err)
	}
	// The workers record their minibatches on it directly (a worker's push
	// of a minibatch without gradients), so that the master's check of
	// what the PS hold finds every one.
	psSrv, err := ps.NewServer(ps.Config{Index: 0, NumPS: 1, Optimizer: opt})
	if err != nil {
		t.Fatal(err)
	}
	defer psSrv.Close()
	psLis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", psPort))
	if err != nil {
		t.Fatal(err)
	}
	psGRPC := grpc.NewServer()
	psSrv.Register(psGRPC)
	go psGRPC.Serve(psLis)
	defer psGRPC.Stop()
	{
		pc, err := client.Dial(ctx, []string{fmt.Sprintf("127.0.0.1:%d", psPort)})
		if err != nil {
			t.Fatal(err)
		}
		if err := pc.PushModel(ctx, spec.Build(rand.New(rand.NewSource(1))).Params()); err != nil {
			t.Fatalf("push the initial model to the in-process PS: %v", err)
		}
		pc.Close()
	}

	// The test's own view of the job's worker pods: its own clientset (so
	// that its calls do not use the master's rate limit) and informer.
	tc := scaleClient(t)
	pool := &scaleWorkerPool{
		addr: masterAddr, ps: psSrv, saturated: make(chan struct{}),
		pacedBudget: scaleEpochs * 60000 / (scaleMinibatch * scaleMinibatches) / 2,
		cancels:     map[int]context.CancelFunc{}, reported: map[int64]int{}, errs: map[string]int{},
	}
	poolCtx, poolStop := context.WithCancel(ctx)
	defer poolStop()
	pool.ctx = poolCtx
	pods := &scalePods{pods: map[int]*scalePod{}, onRunning: pool.start, onDeleting: pool.stop}
	factory := informers.NewSharedInformerFactoryWithOptions(tc, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = k8s.JobSelector(job) }))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { pods.observe(obj, false) },
		UpdateFunc: func(_, obj any) { pods.observe(obj, false) },
		DeleteFunc: func(obj any) { pods.observe(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	infStop := make(chan struct{})
	defer close(infStop)
	factory.Start(infStop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("test informer did not sync")
	}

	// The master, in process, on the k8s backend.
	// In the rig's state dir: kept when a test fails.
	logFile, err := os.Create(filepath.Join(rigState, "scale-master-"+job+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logger := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("master log %s (last 40 lines):\n%s", logFile.Name(), tail(string(b), 40))
		}
	})
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	settings := k8s.PodSettings{Image: "elasticdl:e2e", NodeSelector: selector,
		Resources: corev1.ResourceRequirements{Requests: small}}
	be, err := k8s.New(ctx, k8s.Config{
		Client: scaleClient(t), Namespace: ns, JobName: job,
		Worker: settings, PS: settings,
		MasterAddr: masterAddr, PSPort: psPort, PSHost: "127.0.0.1",
		Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	sb := newScaleBackend(be)
	cfg := master.DefaultConfig()
	cfg.JobName = job
	cfg.ModelDef = "fashion_mnist.mlp"
	cfg.TrainingData = filepath.Join(dataDir, "train-images-idx3-ubyte.gz")
	cfg.MinibatchSize, cfg.NumMinibatchesPerTask = scaleMinibatch, scaleMinibatches
	cfg.NumEpochs = scaleEpochs
	cfg.NumWorkers, cfg.NumPS = scaleWorkers, 1
	cfg.Output = t.TempDir()
	cfg.ListenAddr = masterAddr
	cfg.ProgressInterval = 0
	deps := master.Deps{Backend: sb, Registry: reg, Logger: logger}
	if os.Getenv("ELASTICDL_SCALE_STORE") != "" {
		// What master failover costs: every step persisted, in group
		// commits, to the job's state ConfigMap before it is answered.
		deps.Store, cfg.RunID = scaleStateStore(ctx, t, ns, job), "scale"
		t.Log("persisting the master's state to its ConfigMap (ELASTICDL_SCALE_STORE)")
	}
	m, err := master.New(cfg, deps)
	if err != nil {
		be.Close(ctx)
		t.Fatal(err)
	}
	type result struct {
		s   *master.Summary
		err error
	}
	runDone := make(chan result, 1)
	runStart := time.Now()
	go func() {
		s, err := m.Run(ctx)
		runDone <- result{s, err}
	}()
	var res *result
	waitOrRun := func(what string, timeout time.Duration, cond func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		last := ""
		for {
			ok, desc := cond()
			if ok {
				return
			}
			last = desc
			select {
			case r := <-runDone:
				res = &r
				t.Fatalf("the job ended (err %v) while waiting for %s; last seen: %s", r.err, what, last)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
			}
		}
	}
	defer func() {
		if res == nil {
			cancel()
			<-runDone
		}
	}()

	// 1. The creation burst.
	waitOrRun("200 worker pods Running", 90*time.Second, func() (bool, string) {
		n := len(pods.live())
		return n == scaleWorkers, fmt.Sprintf("%d Running", n)
	})
	allRunning := time.Now()
	live := pods.live()
	nodes := map[string]int{}
	slots := map[int]bool{}
	var firstAdded time.Time
	for _, p := range live {
		nodes[p.node]++
		slots[p.index] = true
		if !strings.HasPrefix(p.node, prefix+"-") {
			t.Errorf("worker pod %s runs on node %q, not one of the test's kwok nodes %s-*", p.name, p.node, prefix)
		}
		if firstAdded.IsZero() || p.added.Before(firstAdded) {
			firstAdded = p.added
		}
	}
	if len(slots) != scaleWorkers {
		t.Errorf("%d distinct worker slots Running, want %d", len(slots), scaleWorkers)
	}
	sb.mu.Lock()
	firstLaunch, lastLaunch := sb.launches[0].start, sb.launches[0].end
	var creates []time.Duration
	for _, l := range sb.launches {
		if l.end.After(lastLaunch) {
			lastLaunch = l.end
		}
		if l.start.Before(firstLaunch) {
			firstLaunch = l.start // launches in parallel end in any order
		}
		creates = append(creates, l.end.Sub(l.start))
	}
	sb.mu.Unlock()
	t.Logf("scale: creation burst: %d worker pods on %d kwok nodes %v: Run→first worker Launch %.2fs, %d Launch calls (pod creates, up to %d at once) took %.2fs (each: %s), first pod seen→all %d Running %.2fs (Run→all Running %.2fs)",
		len(live), len(nodes), nodes, firstLaunch.Sub(runStart).Seconds(), len(creates), k8s.ClientBurst, lastLaunch.Sub(firstLaunch).Seconds(), scaleDist(creates), scaleWorkers,
		allRunning.Sub(firstAdded).Seconds(), allRunning.Sub(runStart).Seconds())
	pool.release()
	pacedStart := time.Now()
	progressDone, progressExited := make(chan struct{}), make(chan struct{})
	defer func() { close(progressDone); <-progressExited }()
	go func() {
		defer close(progressExited)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-tick.C:
			}
			pool.mu.Lock()
			n, calls := len(pool.reported), len(pool.lat[0])+len(pool.lat[1])
			pool.mu.Unlock()
			t.Logf("scale: progress %.0fs: %d tasks reported, %d get-task calls, %d worker pods live", time.Since(runStart).Seconds(), n, calls, len(pods.live()))
		}
	}()

	// 2. Relaunches, while the workers take tasks (paced).
	relaunch := func(victims []scalePod) []scaleRelaunch {
		out := make([]scaleRelaunch, len(victims))
		var wg sync.WaitGroup
		for i, v := range victims {
			out[i] = scaleRelaunch{id: v.id, index: v.index}
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i].call = time.Now()
				if err := tc.CoreV1().Pods(ns).Delete(ctx, v.name, metav1.DeleteOptions{}); err != nil {
					t.Errorf("delete pod %s: %v", v.name, err)
				}
			}()
		}
		wg.Wait()
		waitOrRun(fmt.Sprintf("%d deleted worker(s) replaced and Running", len(victims)), 60*time.Second, func() (bool, string) {
			var missing []string
			for _, v := range victims {
				if s, ok := pods.successor(v.index, v.id); !ok || s.running.IsZero() {
					missing = append(missing, v.name)
				}
			}
			return len(missing) == 0, fmt.Sprintf("not yet replaced: %v", missing)
		})
		for i := range out {
			r := &out[i]
			s, _ := pods.successor(r.index, r.id)
			r.newID, r.created, r.running = s.id, s.added, s.running
			sb.mu.Lock()
			r.exited = sb.exits[r.id]
			sb.mu.Unlock()
			if l, ok := sb.replacement(r.index, r.exited); ok && l.id == s.id {
				r.launch, r.launched = l.start, l.end
			} else {
				t.Errorf("worker %d (slot %d): no Launch of its replacement %d recorded after its exit", r.id, r.index, s.id)
			}
		}
		return out
	}
	relaunchStart := time.Now()
	var seq []scaleRelaunch
	used := map[int]bool{}
	for i := 0; i < scaleSeqRelaunches; i++ {
		cand := pods.live()
		rng.Shuffle(len(cand), func(a, b int) { cand[a], cand[b] = cand[b], cand[a] })
		for _, c := range cand {
			if !used[c.index] {
				used[c.index] = true
				seq = append(seq, relaunch([]scalePod{c})...)
				break
			}
		}
	}
	cand := pods.live()
	rng.Shuffle(len(cand), func(a, b int) { cand[a], cand[b] = cand[b], cand[a] })
	var victims []scalePod
	for _, c := range cand {
		if !used[c.index] && len(victims) < scaleBurstRelaunches {
			used[c.index] = true
			victims = append(victims, c)
		}
	}
	burst := relaunch(victims)
	relaunchEnd := time.Now()
	waitOrRun("the end of the paced phase", scalePacedMin+time.Minute, func() (bool, string) {
		return time.Since(pacedStart) >= scalePacedMin || pool.fetched.Load() >= pool.pacedBudget, ""
	})
	fetchedPaced := pool.fetched.Load()

	// 3. The rest of the job without think time.
	pool.phase.Store(1)
	close(pool.saturated)
	saturatedStart := time.Now()
	var r result
	select {
	case r = <-runDone:
		res = &r
	case <-ctx.Done():
		t.Fatalf("the job did not end: %v", ctx.Err())
	}
	runEnd := time.Now()
	poolStop()
	pool.wg.Wait()

	// What is left of the job.
	lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer lcancel()
	left, err := tc.CoreV1().Pods(ns).List(lctx, metav1.ListOptions{LabelSelector: k8s.JobSelector(job)})
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := tc.CoreV1().Services(ns).List(lctx, metav1.ListOptions{LabelSelector: k8s.JobSelector(job)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range left.Items {
		t.Errorf("pod %s of the job left after Run (phase %s)", p.Name, p.Status.Phase)
	}
	for _, s := range svcs.Items {
		t.Errorf("service %s of the job left after Run", s.Name)
	}

	// The job: succeeded, every task exactly once.
	if r.err != nil || r.s == nil {
		t.Fatalf("job failed: %v", r.err)
	}
	s := r.s
	tasksPerEpoch := (60000 + scaleMinibatch*scaleMinibatches - 1) / (scaleMinibatch * scaleMinibatches)
	wantTasks := scaleEpochs * tasksPerEpoch
	if s.Status != "succeeded" || len(s.Epochs) != scaleEpochs {
		t.Errorf("summary: status %q, %d epochs: %s", s.Status, len(s.Epochs), summaryLine(*s))
	}
	for _, e := range s.Epochs {
		if e.Records != 60000 || e.RecordsTrained != e.Records || e.RecordsTrainedTwice != 0 || e.RecordsMissed != 0 {
			t.Errorf("epoch %d is not exactly-once: records %d, trained %d, twice %d, missed %d",
				e.Epoch, e.Records, e.RecordsTrained, e.RecordsTrainedTwice, e.RecordsMissed)
		}
	}
	pool.mu.Lock()
	// A task's extra reports: its backup copy's, when the master gave
	// one out (a report of the copy that lost is answered, and dropped).
	twice, extra := 0, int64(0)
	for _, n := range pool.reported {
		if n != 1 {
			twice++
			extra += int64(n - 1)
		}
	}
	nReported, errs := len(pool.reported), pool.errs
	latPaced, latSat := pool.lat[0], pool.lat[1]
	waits, lastReport := pool.waits, pool.lastReport
	pool.mu.Unlock()
	// A worker stopped while its report is in flight may not learn that the
	// master took it: the master's count is the one that must be exact.
	nRelaunch := len(seq) + len(burst)
	if s.Tasks.Completed != int64(wantTasks) || extra > s.Tasks.Superseded || nReported > wantTasks || nReported < wantTasks-nRelaunch {
		t.Errorf("tasks: summary completed %d, want %d; clients saw %d distinct tasks accepted (%d more than once, %d extra reports, %d superseded copies at the master), want %d minus at most one per deleted worker",
			s.Tasks.Completed, wantTasks, nReported, twice, extra, s.Tasks.Superseded, wantTasks)
	}
	if s.Tasks.Backups > 0 {
		t.Logf("backup tasks: %d handed out, %d won, %d superseded", s.Tasks.Backups, s.Tasks.BackupsWon, s.Tasks.Superseded)
	}
	if s.Workers.Launched != scaleWorkers+nRelaunch || s.Workers.Relaunched != nRelaunch {
		t.Errorf("workers launched %d relaunched %d, want %d and %d", s.Workers.Launched, s.Workers.Relaunched, scaleWorkers+nRelaunch, nRelaunch)
	}
	if len(errs) > 0 {
		t.Logf("client errors (transient; retried): %v", errs)
	}

	// The figures.
	both := append(slices.Clone(latPaced), latSat...)
	pacedDur := saturatedStart.Sub(pacedStart)
	t.Logf("scale: get-task latency, %d workers, paced (%v per task, relaunches during it, %.1fs, %.0f tasks/s): %s, %d WAIT",
		scaleWorkers, scaleTaskTime, pacedDur.Seconds(), float64(fetchedPaced)/pacedDur.Seconds(), scaleDist(latPaced), waits[0])
	satDur := lastReport.Sub(saturatedStart)
	t.Logf("scale: get-task latency, %d workers, saturated (no think time, %.1fs to the last report, %.0f tasks/s): %s, %d WAIT",
		scaleWorkers, satDur.Seconds(), float64(wantTasks-int(fetchedPaced))/satDur.Seconds(), scaleDist(latSat), waits[1])
	t.Logf("scale: get-task latency, all %d calls: %s", len(both), scaleDist(both))
	for _, set := range []struct {
		name string
		rs   []scaleRelaunch
	}{{"one at a time", seq}, {fmt.Sprintf("%d at once", len(burst)), burst}} {
		var toExit, decide, create, toRunning, total []time.Duration
		for _, r := range set.rs {
			if r.exited.IsZero() || r.launch.IsZero() {
				continue
			}
			toExit = append(toExit, r.exited.Sub(r.call))
			decide = append(decide, r.launch.Sub(r.exited))
			create = append(create, r.launched.Sub(r.launch))
			toRunning = append(toRunning, r.running.Sub(r.launched))
			total = append(total, r.running.Sub(r.call))
		}
		t.Logf("scale: relaunch %s: delete call→Exited event at the master: %s", set.name, scaleDist(toExit))
		t.Logf("scale: relaunch %s: Exited event→relaunch decision (Launch called): %s", set.name, scaleDist(decide))
		t.Logf("scale: relaunch %s: Launch (pod create): %s; created→Running seen: %s", set.name, scaleDist(create), scaleDist(toRunning))
		t.Logf("scale: relaunch %s: delete call→replacement Running: %s", set.name, scaleDist(total))
	}
	sb.mu.Lock()
	closeTook := sb.closeEnd.Sub(sb.closeStart)
	sb.mu.Unlock()
	t.Logf("scale: job: %s; relaunches took %.1fs of the paced phase (%d tasks taken in it, cap %d); last report→Run returned %.1fs, of which backend Close (one collection delete of %d pods + 1 Service delete, wait until gone) %.2fs; Run %.1fs; test %.1fs",
		summaryLine(*s), relaunchEnd.Sub(relaunchStart).Seconds(), fetchedPaced, pool.pacedBudget, runEnd.Sub(lastReport).Seconds(),
		scaleWorkers+1, closeTook.Seconds(), runEnd.Sub(runStart).Seconds(), time.Since(testStart).Seconds())
}

// scaleStateStore opens job's state ConfigMap, owned by a stand-in pod
// (the master runs in the test process).
func scaleStateStore(ctx context.Context, t *testing.T, ns, job string) *k8s.StateStore {
	t.Helper()
	store, err := standInMasterPod(ctx, t, ns, "store-owner").OpenStateStore(ctx, job, "scale-test")
	if err != nil {
		t.Fatal(err)
	}
	return store
}
