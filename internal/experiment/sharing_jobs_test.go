package experiment

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"elasticdl/internal/autoscale/sim"
)

func traceWorkload(t *testing.T) sim.Workload {
	t.Helper()
	wls, err := sim.LoadDir(filepath.Join("..", "autoscale", "sim", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	return wls[0]
}

// TestSharedJobs: the modelled curve is linear to its knee and flat
// beyond; drawn jobs keep the trace's speed-ups and their order of size;
// the simulator predicts every mode; the report has the headline.
func TestSharedJobs(t *testing.T) {
	e := SharedCluster{Nodes: 2, CPUsPerNode: 6, Jobs: 6, Arrival: 3, MaxWorkers: 8, WorkerCPU: 0.5, PSCPU: 0.25, MasterCPU: 0.1,
		RecordsPerEpoch: 10000, SecondsPerRecord: 185e-6, MinibatchSize: 256, Modes: []string{"fifo", "fair", "remaining"},
		ChangePenalty: 2, StartCost: 4, ResizeCost: 1}
	tm := e.MinibatchSeconds()
	c := e.Curve(SharedJob{PushSeconds: tm / 3}) // knee at 4 workers
	for w, want := range map[int]float64{1: 1 / (tm + tm/3), 3: 3 / (tm + tm/3), 6: 3 / tm, 8: 3 / tm} {
		if got := c.Throughput(w) / 256; math.Abs(got-want) > 1e-9*want {
			t.Errorf("curve at %d workers: %v minibatches/s, want %v", w, got, want)
		}
	}
	specs, err := e.DrawJobs(traceWorkload(t), 5)
	if err != nil {
		t.Fatal(err)
	}
	e.Specs = specs
	for k, j := range specs {
		t.Logf("job %d: %+v alone %.1fs", k, j, float64(j.Epochs)*1e4/e.Curve(j).Throughput(8))
		if j.Epochs < 1 || j.Knee < minKnee || j.Knee > 8 {
			t.Errorf("job %d: %+v", k, j)
		}
	}
	// cifar10 at 4..32 GPUs: 2.55× at best; ncf slows down.
	if math.Abs(specs[0].Knee-13264.11/5191.95) > 1e-3 || specs[2].Knee != minKnee {
		t.Errorf("knees %v, %v: want the trace's cifar10's and ncf at the floor", specs[0].Knee, specs[2].Knee)
	}
	p, err := e.Predict()
	if err != nil || len(p) != 3 {
		t.Fatalf("Predict = %v, %v", p, err)
	}
	t.Logf("predicted %v", p)
	for i, mode := range e.Modes {
		r := Run{Mode: mode, Series: []string{"a", "b"}, Jobs: []Job{{Submitted: 0, Ended: 10 - float64(i)}, {Submitted: 3, Ended: 20 - 2*float64(i)}}}
		e.Runs = append(e.Runs, r)
	}
	md := e.Markdown("s.png")
	for _, want := range []string{"Mean JCT, remaining ÷ FCFS gang: **0.78**", "elastic, by remaining work (ours)", "simulator's mean completion time", "worst mode: **"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
