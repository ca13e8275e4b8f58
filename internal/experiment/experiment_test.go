package experiment

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// twoJobs: job a holds 10 CPUs over [0, 10), job b 10 over [5, 20) (our
// seconds) on 20 CPUs.
func twoJobs(mode string, index int, scale float64) Run {
	return Run{Mode: mode, Index: index,
		Jobs: []Job{{Name: "a", Submitted: 0, Started: 1, Ended: 10 * scale, ExactlyOnce: true},
			{Name: "b", Submitted: 2, Started: 6, Ended: 20 * scale, ExactlyOnce: true}},
		Series: []string{"a", "b"},
		Timeline: []Sample{{T: 0, CPU: []float64{10, 0}, Workers: []int{9, 0}}, {T: 5 * scale, CPU: []float64{10, 10}, Workers: []int{9, 9}},
			{T: 10 * scale, CPU: []float64{0, 10}, Workers: []int{0, 9}}},
	}
}

func TestRunMeasures(t *testing.T) {
	r := twoJobs("elastic", 0, 1)
	if m := r.Makespan(); m != 20 {
		t.Errorf("Makespan = %v, want 20", m)
	}
	// (10·5 + 20·5 + 10·10) / (20·20) = 250/400.
	if u := r.Utilization(20); math.Abs(u-0.625) > 1e-12 {
		t.Errorf("Utilization = %v, want 0.625", u)
	}
	if u := (Run{}).Utilization(20); u != 0 {
		t.Errorf("Utilization of an empty run = %v, want 0", u)
	}
	if w := r.Jobs[1].Wait(); w != 4 {
		t.Errorf("Wait = %v, want 4", w)
	}
}

func TestSpreadsAndRatios(t *testing.T) {
	runs := []Run{twoJobs("gang", 0, 2), twoJobs("elastic", 0, 1), twoJobs("gang", 1, 1), twoJobs("elastic", 1, 1), twoJobs("elastic", 2, 1)}
	r := Ratios(runs, "elastic", "gang", Run.Makespan)
	if len(r) != 2 || r[0] != 0.5 || r[1] != 1 {
		t.Errorf("Ratios = %v, want [0.5 1] (run 2 has no gang pair)", r)
	}
	s := SpreadOf(r)
	if s.Mean != 0.75 || s.Min != 0.5 || s.Max != 1 || s.N != 2 {
		t.Errorf("SpreadOf = %+v", s)
	}
	if got := s.Format("%.2f"); got != "0.75 (0.50–1.00)" {
		t.Errorf("Format = %q", got)
	}
	if got := SpreadOf([]float64{3}).Format("%.1f"); got != "3.0" {
		t.Errorf("Format of one = %q", got)
	}
	if got := SpreadOf(nil).Format("%.1f"); got != "—" {
		t.Errorf("Format of none = %q", got)
	}
	if got := Of(runs, "gang", Run.Makespan); len(got) != 2 || got[0] != 40 || got[1] != 20 {
		t.Errorf("Of = %v", got)
	}
}

func TestUpdateSection(t *testing.T) {
	doc, err := UpdateSection([]byte("# Experiments\n\nintro\n"), "one", "first body")
	if err != nil {
		t.Fatal(err)
	}
	doc, err = UpdateSection(doc, "two", "second body\n")
	if err != nil {
		t.Fatal(err)
	}
	doc = append(doc, "\nhand-written tail\n"...)
	doc, err = UpdateSection(doc, "one", "new body")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	for _, want := range []string{"# Experiments\n\nintro\n\n<!-- experiment one", "new body\n<!-- end of experiment one -->", "second body\n<!-- end of experiment two -->", "hand-written tail"} {
		if !strings.Contains(s, want) {
			t.Errorf("document lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "first body") || strings.Count(s, "<!-- experiment one") != 1 {
		t.Errorf("section one not replaced once:\n%s", s)
	}
	begin, _ := markers("three")
	if _, err := UpdateSection([]byte(begin+"\nno end"), "three", "x"); err == nil || !strings.Contains(err.Error(), "end marker") {
		t.Errorf("a section without its end marker: err %v, want one naming the end marker", err)
	}
}

func TestGangVsElasticReport(t *testing.T) {
	g := GangVsElastic{Date: "2026-11-25", Machine: "a test", Nodes: 2, CPUsPerNode: 10, Workers: 13, WorkerCPU: 1, PSCPU: 0.5, MasterCPU: 0.25,
		SecondsPerRecord: 180e-6, Calibration: "made up", Epochs: 3, RecordsPerEpoch: 60000, Scale: 10, SecondAfter: 3,
		Runs: []Run{twoJobs("gang", 0, 1.4), twoJobs("elastic", 0, 1)}}
	ratio, wait := g.Summary()
	if math.Abs(ratio.Mean-1/1.4) > 1e-9 || wait.Mean != 4 {
		t.Errorf("Summary = %+v, %+v; want ratio 1/1.4 and wait 4", ratio, wait)
	}
	md := g.Markdown("experiments/x.png")
	for _, want := range []string{"| both jobs done (makespan), seed's seconds | 780–795 / 570–580 | 280 | 200 | 0.714 |",
		"**0.714**", "**4.0 s**", "exactly once: **true**", "![", "experiments/x.png", "180 µs"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	path := filepath.Join(t.TempDir(), "x.png")
	if err := PlotHeld(path, []Panel{{"gang", g.Runs[0]}, {"elastic", g.Runs[1]}}, g.Capacity(), g.Scale); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("plot is not a PNG (%d bytes, err %v)", len(b), err)
	}
	if err := PlotHeld(path, nil, 1, 1); err == nil {
		t.Errorf("a plot of no panels: want an error")
	}
}

func TestCNNSecondsPerRecord(t *testing.T) {
	s, err := CNNSecondsPerRecord(50 * time.Millisecond)
	// A record of the cnn costs tens to hundreds of µs on any CPU of today.
	if err != nil || s < 1e-6 || s > 0.1 {
		t.Errorf("CNNSecondsPerRecord = %v, %v", s, err)
	}
}

func TestBesideServicesReport(t *testing.T) {
	run := func(mode string, training float64, waits ...float64) Run {
		return Run{Mode: mode, Series: []string{"service", "training"}, End: 10, Records: int64(training * 1000), Waits: waits,
			Timeline: []Sample{{T: 0, CPU: []float64{4, training}, Workers: []int{0, int(training)}}, {T: 5, CPU: []float64{8, training / 2}, Workers: []int{0, int(training / 2)}}}}
	}
	e := BesideServices{Nodes: 1, CPUsPerNode: 10, ServiceCPU: 0.5, ServiceMin: 8, ServiceMax: 16, Day: 10, Jobs: 1, MaxWorkers: 6, FixedWorkers: 2,
		Runs: []Run{run("fixed", 2, 0.5, 0.7, 6), run("elastic", 6, 0.4, 0.6, 0.9)}}
	// fixed: (6·5 + 9·5)/100 = 75 %; elastic: (10·5 + 11·5)/100 = 105 % (the
	// sampled requests, not capped).
	md := e.Markdown("p.png")
	for _, want := range []string{"| 75.0 | 105.0 | 1.40 |", "| 2000 | 6000 | 3.00 |", "| 1–2 | 3–6 |", "0.70 / 6.00 (3 pods)", "0.60 / 0.90 (3 pods)",
		"waited over 5 s | — | 1 | 0 |", "worst service pod wait with elastic training **0.90 s**", "p.png"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestFairnessAndSharingReport(t *testing.T) {
	r := Run{Mode: "elastic", Series: []string{"a", "b", "c"}, Jobs: []Job{
		{Name: "a", Submitted: 0, Ended: 30}, {Name: "b", Submitted: 5, Ended: 40}, {Name: "c", Submitted: 10, Ended: 12}},
		// Workers first run at 1 (a) and 6 (b); c never runs one.
		Timeline: []Sample{
			{T: 0, CPU: []float64{0, 0, 0}, Workers: []int{0, 0, 0}},       // nothing held: not counted
			{T: 1, CPU: []float64{2, 0, 0}, Workers: []int{4, 0, 0}},       // one job: not counted
			{T: 6, CPU: []float64{2, 1, 0}, Workers: []int{4, 2, 0}},       // 2.0
			{T: 10, CPU: []float64{1.5, 1, 0.25}, Workers: []int{3, 2, 0}}, // c waits, holding its master: 6.0
			{T: 12, CPU: []float64{1.5, 1, 0.25}, Workers: []int{3, 2, 0}}, // c has ended (a leftover pod): 1.5
			{T: 20, CPU: []float64{1, 1, 0}, Workers: []int{2, 2, 0}},      // 1.0
		}}
	if m, w, n := Fairness(r); n != 4 || m != 2 || math.Abs(w-0.5) > 1e-12 {
		t.Errorf("Fairness = %v, %v, %v; want median 2, 1/2 within, 4 samples", m, w, n)
	}
	fifo := r
	fifo.Mode = "fifo"
	fifo.Jobs = []Job{{Submitted: 0, Ended: 60}, {Submitted: 5, Ended: 80}, {Submitted: 10, Ended: 90}}
	// Workers first run at 1, 31 and 61.
	fifo.Timeline = []Sample{{T: 0, CPU: []float64{0, 0, 0}, Workers: []int{0, 0, 0}}, {T: 1, CPU: []float64{2, 0, 0}, Workers: []int{4, 0, 0}},
		{T: 31, CPU: []float64{2, 2, 0}, Workers: []int{4, 4, 0}}, {T: 61, CPU: []float64{0, 2, 2}, Workers: []int{0, 4, 4}}}
	e := SharedCluster{Nodes: 1, CPUsPerNode: 4, Jobs: 3, Arrival: 5, MaxWorkers: 4, WorkerCPU: 0.5, PSCPU: 0.25, MasterCPU: 0.25, Epochs: 2, RecordsPerEpoch: 10,
		Runs: []Run{fifo, r}}
	md := e.Markdown("s.png")
	// Completion: fifo (60+75+80)/3 = 71.7, elastic (30+35+2)/3 = 22.3;
	// pending: fifo (1+26+51)/3 = 26.0; elastic (1+1+2)/3 = 1.3, c never
	// ran a worker: its whole life.
	for _, want := range []string{"| 71.7 (60.0–80.0) | 22.3 (2.0–35.0) |", "| 26.0 (1.0–51.0) | 1.3 (1.0–2.0) |", "| longest pending, s | 51.0 | 2.0 |",
		"elastic ÷ fixed-size: **0.31**", "s.png", "2.50 CPUs: 1.9× the cluster"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// TestWriteAndRegenerate: Write leaves data, plot and section; Regenerate
// rebuilds the plot and section from the data alone, the same section.
func TestWriteAndRegenerate(t *testing.T) {
	dir := t.TempDir()
	doc, out := filepath.Join(dir, "experiments.md"), filepath.Join(dir, "experiments")
	if err := os.WriteFile(doc, []byte("# Experiments\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := GangVsElastic{Nodes: 2, CPUsPerNode: 10, Workers: 13, Scale: 2, Runs: []Run{twoJobs("gang", 0, 1.4), twoJobs("elastic", 0, 1)}}
	section, err := Write(doc, out, "gang-vs-elastic", g)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(section, "](experiments/gang-vs-elastic.png)") {
		t.Errorf("section does not show the plot by its path from the document:\n%s", section)
	}
	first, _ := os.ReadFile(doc)
	os.Remove(filepath.Join(out, "gang-vs-elastic.png"))
	names, err := Regenerate(doc, out)
	if err != nil || len(names) != 1 || names[0] != "gang-vs-elastic" {
		t.Fatalf("Regenerate = %v, %v", names, err)
	}
	again, _ := os.ReadFile(doc)
	if string(again) != string(first) {
		t.Errorf("the regenerated document differs:\n%s\n---\n%s", first, again)
	}
	if _, err := os.Stat(filepath.Join(out, "gang-vs-elastic.png")); err != nil {
		t.Errorf("plot not regenerated: %v", err)
	}
	os.WriteFile(filepath.Join(out, "shared-cluster.json"), []byte("{not json"), 0o644)
	if _, err := Regenerate(doc, out); err == nil || !strings.Contains(err.Error(), "shared-cluster.json") {
		t.Errorf("Regenerate of corrupt data: %v, want an error naming the file", err)
	}
}

// TestRegenerateDocs rewrites docs/experiments.md's generated sections and
// plots from docs/experiments/*.json (after a change to how reports look):
//
//	ELASTICDL_EXPERIMENT_REPORT=1 go test ./internal/experiment -run RegenerateDocs
func TestRegenerateDocs(t *testing.T) {
	if os.Getenv("ELASTICDL_EXPERIMENT_REPORT") != "1" {
		t.Skip("set ELASTICDL_EXPERIMENT_REPORT=1 to rewrite docs/experiments.md from docs/experiments/*.json")
	}
	names, err := Regenerate("../../docs/experiments.md", "../../docs/experiments")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("regenerated %v", names)
}

func convRun(c, s string, seed int64, metrics ...float64) ConvergenceRun {
	r := ConvergenceRun{Case: c, Schedule: s, Seed: seed, LedgerExact: true}
	for i, m := range metrics {
		r.Points = append(r.Points, ConvergencePoint{Records: int64(i+1) * 1000, Version: int64(i + 1), Metric: m, Loss: 1 - m, Final: i == len(metrics)-1})
	}
	return r
}

func TestConvergenceReport(t *testing.T) {
	e := Convergence{Date: "2026-11-26", Machine: "a test", Command: "make experiments EXPERIMENTS=convergence", Setup: "made up.",
		Cases: []ConvergenceCase{{Name: "a", Model: "ctr.xdeepfm", ModelParams: "dense=23;fields=62", Metric: "AUC", FlipTasks: 3},
			{Name: "b", Model: "fashion_mnist.cnn", Metric: "accuracy", FlipTasks: 5}},
		Runs: []ConvergenceRun{
			convRun("a", Fixed4, 1, 0.6, 0.70), convRun("a", Fixed8, 1, 0.6, 0.72), convRun("a", Changing, 1, 0.6, 0.71),
			convRun("a", Fixed4, 2, 0.6, 0.71), convRun("a", Fixed8, 2, 0.6, 0.73), convRun("a", Changing, 2, 0.6, 0.74),
			convRun("b", Fixed4, 1, 0.8, 0.88), convRun("b", Fixed8, 1, 0.8, 0.89), convRun("b", Changing, 1, 0.8, 0.85),
		}}
	if band := e.Band("a"); band.Min != 0.70 || band.Max != 0.73 || band.N != 4 {
		t.Errorf("Band(a) = %+v, want 0.70–0.73 over 4 runs", band)
	}
	// a: the changing runs end at 0.71 and 0.74, mean 0.725: inside,
	// one of two runs inside. b: 0.85 under 0.88–0.89.
	if in, k, n := e.Verdict("a"); !in || k != 1 || n != 2 {
		t.Errorf("Verdict(a) = %v, %d of %d", in, k, n)
	}
	if in, k, n := e.Verdict("b"); in || k != 0 || n != 1 {
		t.Errorf("Verdict(b) = %v, %d of %d", in, k, n)
	}
	e.Runs[0].LedgerExact = false
	md := e.Markdown("experiments/c.png")
	for _, want := range []string{"2 seed(s)", "`--model_params=\"dense=23;fields=62\"`", "| a | fixed 4 | 0.7050 (0.7000–0.7100) |",
		"**no**", "| a | AUC | 0.7000–0.7300 | 0.7250 (0.7100–0.7400) | yes | 1 of 2 |", "| b | accuracy | 0.8800–0.8900 | 0.8500 | **no** | 0 of 1 |",
		"experiments/c.png", "every 3 tasks"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	path := filepath.Join(t.TempDir(), "c.png")
	if err := e.Plot(path); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("plot is not a PNG (%d bytes, err %v)", len(b), err)
	}
	if err := (Convergence{}).Plot(path); err == nil {
		t.Errorf("a plot of no cases: want an error")
	}
}
