package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"elasticdl/internal/autoscale/sim"
	"elasticdl/internal/experiment"
)

// sharingModes are experiment 4's modes: first come, first served gang
// jobs, and elastic jobs sized by the autoscaler's two policies.
var sharingModes = []string{"fifo", "fair", "remaining"}

// changePenalty is the remaining policy's --resize_cost here, seconds:
// about what a new worker pod takes to train on process nodes.
const changePenalty = 2.0

// sharingFairness is the remaining policy's --fairness here. On this
// saturated burst of jobs that speed up concavely, spreading the room
// buys more than ordering by size wins back: the simulator's replay of
// the recorded run gives, at fairness 0.5 (the default, tuned on
// Pollux's workloads) / 0.7 / 0.8 / 0.9, mean JCT 35.2 / 33.4 / 32.9 /
// 32.7 s and share ratio 1.93 / 1.85 / 1.76 / 1.78 (noise seeds 1-6);
// docs/experiments.md.
const sharingFairness = 0.8

// shortSecondsPerRecord caps the short version's modelled compute.
const shortSecondsPerRecord = 200e-6

// TestExperimentSharedCluster is experiment 4 (Paddle EDL's "evenly
// distributes resource among jobs", then issue 33's policies): jobs of
// the trace's sizes and speed-ups arriving one after another on a
// cluster that fits a fraction of what they want, as fixed-size jobs
// served first come, first served (--gang: each starts when all its pods
// fit), and elastic (1..max workers) sized by `elasticdl autoscaler
// --policy=fair`, then `--policy=remaining`. It records each job's
// pending and completion times and what each held over time, and the
// simulator's prediction for the same jobs; it checks that every epoch of
// every job is trained exactly once, that elastic jobs start sooner than
// first come, first served, and that sizing by remaining work is not
// much worse than it on mean completion time (the full version reports
// the ratios the issue asks for; the short one is too small to hold them).
func TestExperimentSharedCluster(t *testing.T) {
	timeTest(t)
	needK8sCLI(t)
	full := experiment.Requested("sharing")
	e := experiment.SharedCluster{Date: time.Now().UTC().Format("2006-01-02"), Machine: experiment.Machine(),
		Command: "make experiments EXPERIMENTS=sharing", Nodes: 2, CPUsPerNode: 6,
		Jobs: 6, Arrival: 2, MaxWorkers: 8, WorkerCPU: 0.5, PSCPU: 0.25, MasterCPU: 0.1, RecordsPerEpoch: 10000,
		Modes: sharingModes, MinibatchSize: modelledMinibatch, ChangePenalty: changePenalty, ResizeCost: 1,
		Fairness: sharingFairness}
	runs, alone := 1, 5.0 // a job alone at its maximum, our seconds, on average
	if full {
		// 3 runs a mode: two differed by more than the 10 % the
		// simulator's prediction is held to (docs/experiments.md).
		runs, alone = 3, 25
		e.Nodes, e.CPUsPerNode, e.Jobs, e.Arrival = 3, 8, 20, 3
	}
	e.SecondsPerRecord, e.Calibration = calibrate(t)
	if !full && e.SecondsPerRecord > shortSecondsPerRecord {
		// An epoch, the least work a job has, must be short: go test's
		// build of the cnn is slower than hack/experiments.sh's.
		e.SecondsPerRecord, e.Calibration = shortSecondsPerRecord, "the short version's, at most the full version's calibration"
	}
	e.Specs = drawSharingJobs(t, e, alone)
	label := startProcNodes(t, "e2e-z", e.Nodes, fmt.Sprint(e.CPUsPerNode), "24Gi")
	var names []string
	for i, j := range e.Specs {
		names = append(names, fmt.Sprintf("job-%02d", i))
		t.Logf("job-%02d: %s, %d epochs, speed-up up to %.2f× (push %.1f ms), %.1f s alone at %d workers", i, j.Trace, j.Epochs, j.Knee,
			j.PushSeconds*1e3, float64(j.Epochs)*float64(e.RecordsPerEpoch)/e.Curve(j).Throughput(e.MaxWorkers), e.MaxWorkers)
	}
	e.Runs = alternate(t, runs, sharingModes, func(t *testing.T, mode string, i int) experiment.Run {
		return runSharing(t, e, names, label, mode, i)
	})
	e.StartCost, e.EndCost = e.MeasuredCosts()
	predicted, err := e.Predict()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range sharingModes {
		t.Logf("%s: mean JCT %.1fs, simulator %.1fs (÷ %.2f; start %.1fs, end %.1fs), longest pending %.1fs", mode, e.MeanJCT(mode), predicted[mode],
			predicted[mode]/e.MeanJCT(mode), e.StartCost, e.EndCost, experiment.LongestPending(e.Runs, mode))
	}
	// What holds robustly: first come, first served makes jobs wait for
	// whole jobs to end, the autoscaler gives each newcomer room at once;
	// and sizing by remaining work does not lose much to it even when the
	// jobs are too few and short for its gain to show.
	fifo := experiment.LongestPending(e.Runs, "fifo")
	for _, mode := range []string{"fair", "remaining"} {
		if p := experiment.LongestPending(e.Runs, mode); p >= fifo {
			t.Errorf("longest pending: %s %.1fs, first come first served %.1fs: want the elastic jobs to start sooner", mode, p, fifo)
		}
	}
	if r, f := e.MeanJCT("remaining"), e.MeanJCT("fifo"); r > 1.3*f {
		t.Errorf("mean JCT by remaining work %.1fs, first come first served %.1fs: more than 1.3×", r, f)
	}
	report(t, full, "shared-cluster", e)
}

// drawSharingJobs draws e's jobs from the simulator's trace (workload 1).
func drawSharingJobs(t *testing.T, e experiment.SharedCluster, alone float64) []experiment.SharedJob {
	t.Helper()
	wls, err := sim.LoadDir(filepath.Join(repoRoot, "internal", "autoscale", "sim", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := e.DrawJobs(wls[0], alone)
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

// runSharing runs experiment 4's jobs once in mode in a namespace of
// their own.
func runSharing(t *testing.T, e experiment.SharedCluster, names []string, label, mode string, i int) experiment.Run {
	ns := newNamespace(t)
	common := append(modelledJobArgs(e.SecondsPerRecord, e.WorkerCPU, e.PSCPU, e.MasterCPU),
		fmt.Sprintf("--num_workers=%d", e.MaxWorkers), "--training_data="+dataDir+"/t10k-images-idx3-ubyte.gz", "--log_interval=5s",
		// Jobs of seconds publish what they measure every 2 s (30 s is
		// for jobs of hours), or the remaining policy never learns it.
		"--progress_publish_interval=2s")
	if mode == "fifo" {
		gangRBAC(t, ns)
		common = append(common, "--gang")
	} else {
		flags := []string{"--policy=" + mode}
		if mode == "remaining" {
			flags = append(flags, fmt.Sprintf("--resize_cost=%gs", e.ChangePenalty), fmt.Sprintf("--fairness=%g", e.Fairness))
		}
		as := startAutoscaler(t, label, flags...)
		defer as.checkKept()
		common = append(common, "--min_workers=1")
	}
	args := func(k int) []string {
		j := e.Specs[k]
		return append(common, fmt.Sprintf("--num_epochs=%d", j.Epochs), fmt.Sprintf("--modelled_ps_seconds_per_push=%g", j.PushSeconds))
	}
	work := 0.0
	for _, j := range e.Specs {
		work += float64(j.Epochs) * float64(e.RecordsPerEpoch) / e.Curve(j).Throughput(1)
	}
	r := runJobs(t, scaleClient(t), ns, label, names, args, func(k int) int { return e.Specs[k].Epochs }, e.RecordsPerEpoch,
		func(k int) time.Duration { return time.Duration(float64(k) * e.Arrival * float64(time.Second)) }, 0,
		time.Duration((work*e.WorkerCPU/e.Capacity()*4+300)*float64(time.Second)))
	r.Mode, r.Index, r.Series = mode, i, names
	median, within, _ := experiment.Fairness(r)
	var completion float64
	for _, j := range r.Jobs {
		completion += j.Completion()
	}
	t.Logf("%s run %d: makespan %.1fs, mean completion %.1fs, utilization %.1f%%, share max÷min median %.2f (≤1.5 %.0f%% of the time)",
		mode, i, r.Makespan(), completion/float64(len(r.Jobs)), 100*r.Utilization(e.Capacity()), median, 100*within)
	if mode != "fifo" {
		for k, j := range r.Jobs {
			if r.FirstRunning(k) < 0 || r.Pending(k) > 30 {
				t.Errorf("%s: job %s waited %.1fs for a worker (first running at %.1fs)", mode, j.Name, r.Pending(k), r.FirstRunning(k))
			}
		}
	}
	return r
}
