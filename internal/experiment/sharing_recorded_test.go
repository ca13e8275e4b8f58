package experiment

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// recorded is the last full control-plane run of experiment 4.
func recorded(t *testing.T) SharedCluster {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "experiments", "shared-cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e SharedCluster
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("shared-cluster.json: %v", err)
	}
	if len(e.Specs) == 0 || len(e.Runs) == 0 {
		t.Fatal("shared-cluster.json: no jobs or runs")
	}
	return e
}

// TestPredictRecorded replays the recorded control-plane run through the
// simulator (-v prints predicted ÷ measured per mode and per run). The
// costs in the data must be what MeasuredCosts measures in its runs; the
// bound is what the model reaches (issue 33's goal is 10 %), a guard
// against regressions.
func TestPredictRecorded(t *testing.T) {
	e := recorded(t)
	start, end := e.MeasuredCosts()
	if math.Abs(start-e.StartCost) > 1e-6 || math.Abs(end-e.EndCost) > 1e-6 {
		t.Errorf("the data's costs %v, %v; its runs measure %v, %v", e.StartCost, e.EndCost, start, end)
	}
	p, err := e.Predict()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range e.modes() {
		var perRun []float64
		for _, r := range e.Runs {
			if r.Mode == m {
				perRun = append(perRun, p[m]/SpreadOf(jobTimes([]Run{r}, m, completion)).Mean)
			}
		}
		ratio := p[m] / e.MeanJCT(m)
		t.Logf("%s: predicted %.1f s, measured %.1f s: %.2f (÷ each run: %.2f)", m, p[m], e.MeanJCT(m), ratio, perRun)
		if ratio < 0.85 || ratio > 1.15 {
			t.Errorf("%s: predicted ÷ measured %.2f, beyond 0.85–1.15", m, ratio)
		}
	}
	// Two runs a mode: the report gives each run's ratio beside the mean's.
	if md := e.Markdown("s.png"); !regexp.MustCompile(`\(\d\.\d\d; \d\.\d\d–\d\.\d\d\)`).MatchString(md) {
		t.Errorf("report lacks the ratios by run:\n%s", md)
	}
}

// TestTrainingFairnessRecorded: the share metric among the jobs training,
// on the recorded run (-v prints it per run). What the metric must give
// whatever the policies did: every run has samples with two jobs
// training and no ratio is below 1. First come, first served's gangs are
// 1 only while no two masters were admitted at once: those race for the
// room (sim.Config.GangRace), and a gang whose pods did not all fit
// trains with those that run (the run of 2026-12-02: 2 of 8 beside full
// gangs, median 2.35 in one of three runs). How each policy fares
// against the goal (≤ 2) is the report's, not a test's.
func TestTrainingFairnessRecorded(t *testing.T) {
	e := recorded(t)
	for _, r := range e.Runs {
		m, w, n := TrainingFairness(r)
		old, _, _ := Fairness(r)
		t.Logf("%s %d: max ÷ min share among the jobs training, median %.2f (≤ 1.5 %.0f%% of %d samples); among all in the cluster %.2f",
			r.Mode, r.Index, m, 100*w, n, old)
		if n == 0 || m < 1 {
			t.Errorf("%s run %d: median %.2f over %d samples, want ≥ 1 over some", r.Mode, r.Index, m, n)
		}
	}
}

// TestStartCost: a job whose first worker runs 1 s after its submission
// and whose last task comes 2 s after its records at the rates of the
// workers it held costs 3 s.
func TestStartCost(t *testing.T) {
	e := SharedCluster{MaxWorkers: 4, WorkerCPU: 0.5, RecordsPerEpoch: 1000, SecondsPerRecord: 1e-3, MinibatchSize: 10,
		Specs: []SharedJob{{Epochs: 1}}}
	v1, v2 := e.Curve(e.Specs[0]).Throughput(1), e.Curve(e.Specs[0]).Throughput(2) // linear: no PS cost
	// 1 worker from 1 to 3, then 2: the records are done at 3 + (1000-2·v1)/v2.
	done := 3 + (1000-2*v1)/v2
	r := Run{Jobs: []Job{{Submitted: 0, Trained: done + 2, Ended: done + 6}}, Timeline: []Sample{
		{T: 0, Workers: []int{0}}, {T: 1, Workers: []int{1}}, {T: 3, Workers: []int{2}}, {T: done + 10, Workers: []int{0}}}}
	e.Runs = []Run{r}
	start, end := e.MeasuredCosts()
	if math.Abs(start-3) > 1e-9 || math.Abs(end-4) > 1e-9 {
		t.Errorf("MeasuredCosts = %v, %v; want 3, 4", start, end)
	}
	e.Runs[0].Jobs[0].Trained = 0
	if start, _ := e.MeasuredCosts(); start != 0 {
		t.Errorf("a job never trained: start cost %v, want 0 (unknown)", start)
	}
}

// TestTrainingFairness: only the jobs between their first task and their
// last count; a job waiting for room or winding down does not.
func TestTrainingFairness(t *testing.T) {
	r := Run{Jobs: []Job{
		{Submitted: 0, Started: 2, Trained: 20, Ended: 25},
		{Submitted: 1, Started: 8, Trained: 30, Ended: 32},
		{Submitted: 3}}, // never trained
		Timeline: []Sample{
			{T: 5, CPU: []float64{4, 0.35, 0.1}},  // b starting, c waiting: one training, not counted
			{T: 10, CPU: []float64{3, 1.5, 0.1}},  // 2.0
			{T: 15, CPU: []float64{2, 2, 0.1}},    // 1.0
			{T: 22, CPU: []float64{0.35, 4, 0.1}}, // a winding down: not counted
		}}
	if m, w, n := TrainingFairness(r); n != 2 || m != 2 || w != 0.5 {
		t.Errorf("TrainingFairness = %v, %v, %v; want median 2, 1/2 within, 2 samples", m, w, n)
	}
	if _, _, n := Fairness(r); n != 4 {
		t.Errorf("Fairness counted %d samples, want all 4", n)
	}
}
