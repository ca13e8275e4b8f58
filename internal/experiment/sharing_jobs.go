package experiment

import (
	"fmt"
	"math"

	"elasticdl/internal/autoscale/sim"
)

// SharedJob is one job of experiment 4 when its jobs differ: its size and
// speed-up are drawn from a trace job (the simulator's, package sim).
type SharedJob struct {
	// Trace names the trace job it is drawn from.
	Trace  string `json:"trace"`
	Epochs int    `json:"epochs"`
	// Knee is the trace job's best speed-up at up to MaxWorkers workers
	// over one; PushSeconds (--modelled_ps_seconds_per_push) gives the
	// job that speed-up (see SharedCluster.Curve).
	Knee        float64 `json:"knee"`
	PushSeconds float64 `json:"push_seconds"`
}

// Sublinear speed-up under modelled compute. The least invasive model we
// found: a modelled PS serializes pushes (--modelled_ps_seconds_per_push
// c), so w workers that each wait t a minibatch train min(w/(t+c), 1/c)
// minibatches a second — linear to a knee, then flat, as a PS-bound job.
// It needs no new message (a worker need not know the job's size) and
// its curve is exact, so the simulator replays the same one. The trace's
// curves keep their knee: (t+c)/c is the trace job's best speed-up.

// minKnee keeps a job's one-worker rate within 2× of linear, and an
// epoch (the least work a job has) short: the trace's ncf gets slower
// with more workers, which a knee cannot model.
const minKnee = 2

// GPUsPerWorker is how many of the trace's GPUs one of our workers
// stands for: a node of Pollux's cluster (16 × 4 GPUs), so that our 8
// workers span 4 to 32 GPUs of a trace job's curve, where it bends.
const GPUsPerWorker = 4

// sizeExponent compresses the trace's sizes (five orders of magnitude)
// into a spread a run of minutes can hold, keeping their order.
const sizeExponent = 0.3

// MinibatchSeconds is what a worker waits for a minibatch.
func (e SharedCluster) MinibatchSeconds() float64 {
	return float64(e.MinibatchSize) * e.SecondsPerRecord / e.WorkerCPU
}

// Curve is job j's records/s at 1..MaxWorkers workers.
func (e SharedCluster) Curve(j SharedJob) sim.Curve {
	t, c := e.MinibatchSeconds(), j.PushSeconds
	var out sim.Curve
	for w := 1; w <= e.MaxWorkers; w++ {
		rate := float64(w) / (t + c)
		if c > 0 {
			rate = min(rate, 1/c)
		}
		out.Workers = append(out.Workers, w)
		out.Rate = append(out.Rate, rate*float64(e.MinibatchSize))
	}
	return out
}

// DrawJobs gives e.Jobs jobs the speed-ups and relative sizes of w's
// first jobs (in order, cycled), sized so that alone at MaxWorkers they
// take alone seconds on average (alone/4 at least, 4×alone at most).
func (e SharedCluster) DrawJobs(w sim.Workload, alone float64) ([]SharedJob, error) {
	if len(w.Jobs) == 0 || e.MinibatchSeconds() <= 0 {
		return nil, fmt.Errorf("experiment 4: no trace jobs or no modelled compute")
	}
	jobs := make([]SharedJob, e.Jobs)
	sizes := make([]float64, e.Jobs)
	mean := 0.0
	for k := range jobs {
		tj := w.Jobs[k%len(w.Jobs)]
		best := 0.0
		for n := 1; n <= e.MaxWorkers; n++ {
			best = max(best, tj.Curve.Throughput(n*GPUsPerWorker))
		}
		knee := min(max(best/tj.Curve.Throughput(GPUsPerWorker), minKnee), float64(e.MaxWorkers))
		jobs[k] = SharedJob{Trace: tj.Name, Knee: knee, PushSeconds: e.MinibatchSeconds() / (knee - 1)}
		sizes[k] = math.Pow(tj.Records/best, sizeExponent)
		mean += sizes[k] / float64(e.Jobs)
	}
	for k := range jobs {
		a := min(max(alone*sizes[k]/mean, alone/4), 4*alone)
		c := e.Curve(jobs[k])
		jobs[k].Epochs = max(1, int(math.Round(a*c.Throughput(e.MaxWorkers)/float64(e.RecordsPerEpoch))))
	}
	return jobs, nil
}

// policyOf is the simulator's policy for a mode.
func policyOf(mode string) (sim.Policy, bool) {
	switch mode {
	case "fifo":
		return sim.FCFSGang, true
	case "fair", "elastic":
		return sim.MaxMinFair, true
	case "remaining":
		return sim.Remaining, true
	}
	return 0, false
}

// Predict is the simulator's mean JCT for each of e's modes: e's jobs
// and cluster, replayed with the autoscaler's options and e's measured
// latencies (MeasuredCosts): a job stalls StartCost when it starts, a
// worker added to a running job trains StartCost later while the others
// train on, and a job ends EndCost after its last task; each job arrives
// when it was submitted in the mode's runs (on average; every Arrival
// seconds without runs).
func (e SharedCluster) Predict() (map[string]float64, error) {
	cfg := e.simConfig()
	out := map[string]float64{}
	for _, mode := range e.modes() {
		p, ok := policyOf(mode)
		if !ok {
			continue
		}
		res, err := sim.Run(e.workload(mode), p, cfg)
		if err != nil {
			return nil, fmt.Errorf("experiment 4, %s: %w", mode, err)
		}
		out[mode] = res.MeanJCT + e.EndCost
	}
	return out, nil
}

// workload is e's jobs as the simulator's, arriving as in mode's runs.
func (e SharedCluster) workload(mode string) sim.Workload {
	wl := sim.Workload{Name: "experiment 4 " + mode}
	for k, j := range e.Specs {
		at := jobTimes(e.Runs, mode, func(r Run, i int) float64 {
			if i != k {
				return math.NaN()
			}
			return r.Jobs[i].Submitted
		})
		arrival, n := 0.0, 0
		for _, x := range at {
			if !math.IsNaN(x) {
				arrival, n = arrival+x, n+1
			}
		}
		if n == 0 {
			arrival, n = float64(k)*e.Arrival, 1
		}
		wl.Jobs = append(wl.Jobs, sim.Job{Name: fmt.Sprintf("job-%02d", k), Arrival: arrival / float64(n),
			Records: float64(j.Epochs) * float64(e.RecordsPerEpoch), Curve: e.Curve(j), Gang: e.MaxWorkers})
	}
	return wl
}

// simConfig is e's cluster and the autoscaler's options, for the
// simulator.
func (e SharedCluster) simConfig() sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Nodes, cfg.Period, cfg.ChangePenalty = e.Nodes, 1, e.ChangePenalty
	cfg.StartCost, cfg.ResizeCost = e.StartCost, e.ResizeCost
	if e.Fairness > 0 {
		cfg.Fairness = e.Fairness
	}
	// A worker added to a running job starts as a job's first does
	// (its pod, its process, its first task), beside those training.
	cfg.GrowDelay = e.StartCost
	// --gang masters admit themselves each as it sees room.
	cfg.GangRace = true
	cfg.NodeMilliCPU = int64(math.Round(e.CPUsPerNode * 1000))
	cfg.WorkerMilliCPU = int64(math.Round(e.WorkerCPU * 1000))
	cfg.JobMilliCPU = int64(math.Round((e.PSCPU + e.MasterCPU) * 1000))
	cfg.GangWaitMilliCPU = int64(math.Round(e.MasterCPU * 1000))
	return cfg
}
