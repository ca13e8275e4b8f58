package experiment

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// SharedCluster is experiment 4 of docs/experiments.md (Paddle EDL's
// "Fluid EDL evenly distributes resource among jobs"): many jobs arriving
// one after another on a cluster that fits a fraction of what they want,
// as fixed-size jobs served first come, first served (--gang), and as
// elastic jobs sized by the autoscaler.
type SharedCluster struct {
	Date        string  `json:"date"`
	Machine     string  `json:"machine"`
	Command     string  `json:"command"`
	Nodes       int     `json:"nodes"`
	CPUsPerNode float64 `json:"cpus_per_node"`
	// Jobs arrive every Arrival seconds (ours), each with 1..MaxWorkers
	// workers (MaxWorkers when fixed-size) and the same work.
	Jobs       int     `json:"jobs"`
	Arrival    float64 `json:"arrival"`
	MaxWorkers int     `json:"max_workers"`
	WorkerCPU  float64 `json:"worker_cpu"`
	PSCPU      float64 `json:"ps_cpu"`
	MasterCPU  float64 `json:"master_cpu"`
	// Epochs of RecordsPerEpoch records make a job's work.
	Epochs           int     `json:"epochs"`
	RecordsPerEpoch  int64   `json:"records_per_epoch"`
	SecondsPerRecord float64 `json:"seconds_per_record"`
	Calibration      string  `json:"calibration"`
	Runs             []Run   `json:"runs"`
	// Modes are the columns, in order: fifo, and the autoscaler's
	// policies (fair, remaining; elastic: the default). Empty: fifo and
	// elastic (the first version's data).
	Modes []string `json:"modes,omitempty"`
	// Specs, when set, are the jobs by index, each of its own size and
	// speed-up (sharing_jobs.go); Epochs is then unused. MinibatchSize is
	// their minibatch.
	Specs         []SharedJob `json:"specs,omitempty"`
	MinibatchSize int         `json:"minibatch_size,omitempty"`
	// What the simulator needs beside the jobs and runs (Predict, which
	// the report calls, so that it replays the data with today's
	// simulator): StartCost and EndCost, MeasuredCosts' (a start's stall,
	// also how late an added worker trains; the master's wind-down after
	// its last task); ResizeCost stalls a start only without StartCost;
	// ChangePenalty is the autoscaler's --resize_cost (seconds).
	StartCost     float64 `json:"start_cost,omitempty"`
	EndCost       float64 `json:"end_cost,omitempty"`
	ResizeCost    float64 `json:"resize_cost,omitempty"`
	ChangePenalty float64 `json:"change_penalty,omitempty"`
	// Fairness is the remaining policy's --fairness (0: the default's,
	// which data recorded before the field was run with).
	Fairness float64 `json:"fairness,omitempty"`
}

// predicted is Predict's, nil without jobs of their own or on an error.
func (e SharedCluster) predicted() map[string]float64 {
	if len(e.Specs) == 0 {
		return nil
	}
	p, err := e.Predict()
	if err != nil {
		return nil
	}
	return p
}

// modes are e's columns.
func (e SharedCluster) modes() []string {
	if len(e.Modes) == 0 {
		return []string{"fifo", "elastic"}
	}
	return e.Modes
}

// modeTitles are the columns' headers.
var modeTitles = map[string]string{
	"fifo":      "fixed-size, first come first served (ours)",
	"elastic":   "elastic + autoscaler (ours)",
	"fair":      "elastic, max-min fair (ours)",
	"remaining": "elastic, by remaining work (ours)",
}

// MeanJCT is the mean completion time of the jobs of mode's runs.
func (e SharedCluster) MeanJCT(mode string) float64 {
	return SpreadOf(jobTimes(e.Runs, mode, completion)).Mean
}

// Capacity is the cluster's CPUs.
func (e SharedCluster) Capacity() float64 { return float64(e.Nodes) * e.CPUsPerNode }

// Fairness is, over the samples of r in which at least two jobs are in
// the cluster (their master runs and they have not ended: a job waiting
// for room counts, holding its master's share), the ratio of the largest
// to the smallest CPU share among those jobs: its median, and the fraction
// of those samples in which it is at most 1.5. n counts the samples.
func Fairness(r Run) (median, within float64, n int) {
	return shareRatios(r, func(j Job, t float64) bool { return t < j.Ended })
}

// TrainingFairness is Fairness among the jobs that are training (from
// their first task done to their last): issue 33's "running jobs", so a
// job waiting for room or winding down, which holds only its master and
// PS, does not count as one starved.
func TrainingFairness(r Run) (median, within float64, n int) {
	return shareRatios(r, func(j Job, t float64) bool { return j.Started > 0 && j.Started <= t && t < j.Trained })
}

// shareRatios is Fairness over the jobs that hold CPUs and are in at a
// sample's time (jobs beyond r.Jobs are counted while they hold CPUs).
func shareRatios(r Run, in func(j Job, t float64) bool) (median, within float64, n int) {
	var ratios []float64
	for _, s := range r.Timeline {
		lo, hi, k := math.Inf(1), 0.0, 0
		for i, cpu := range s.CPU {
			if cpu <= 0 || (i < len(r.Jobs) && !in(r.Jobs[i], s.T)) {
				continue
			}
			k++
			lo, hi = min(lo, cpu), max(hi, cpu)
		}
		if k >= 2 && lo > 0 {
			ratios = append(ratios, hi/lo)
		}
	}
	if len(ratios) == 0 {
		return 0, 0, 0
	}
	ok := 0
	for _, x := range ratios {
		if x <= 1.5+1e-9 {
			ok++
		}
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2], float64(ok) / float64(len(ratios)), len(ratios)
}

// jobTimes are, over the jobs of the runs of a mode, f of each job (by
// its run and index).
func jobTimes(runs []Run, mode string, f func(r Run, job int) float64) []float64 {
	var out []float64
	for _, r := range runs {
		if r.Mode == mode {
			for i := range r.Jobs {
				out = append(out, f(r, i))
			}
		}
	}
	return out
}

// completion is a jobTimes f: the job's completion time.
func completion(r Run, i int) float64 { return r.Jobs[i].Completion() }

// LongestPending is the longest any job of the runs of a mode waited for
// a worker.
func LongestPending(runs []Run, mode string) float64 {
	xs := jobTimes(runs, mode, Run.Pending)
	if len(xs) == 0 {
		return 0
	}
	return slices.Max(xs)
}

// Markdown is the experiment's generated section of docs/experiments.md.
func (e SharedCluster) Markdown(plot string) string {
	var b strings.Builder
	b.WriteString(preamble(e.Date, e.Machine, e.Runs, e.Nodes, e.CPUsPerNode))
	b.WriteString(e.jobsLine())
	header := []string{""}
	for _, mode := range e.modes() {
		header = append(header, cmp.Or(modeTitles[mode], mode))
	}
	b.WriteString(Table(header, e.rows()))
	if slices.Contains(e.modes(), "remaining") {
		rm, _, _ := e.shares("remaining", TrainingFairness)
		fmt.Fprintf(&b, "\nMean JCT, remaining ÷ FCFS gang: **%.2f** (goal ≤ 0.8); max-min fair ÷ FCFS gang %.2f; "+
			"max ÷ min share among the jobs training, median **%s** by remaining work (goal ≤ 2).\n", e.MeanJCT("remaining")/e.MeanJCT("fifo"), e.MeanJCT("fair")/e.MeanJCT("fifo"), rm)
		if p := e.predicted(); len(p) > 0 {
			fmt.Fprintf(&b, "\nSimulator's mean JCT ÷ the control plane's, worst mode: **%.2f** (goal within 0.90–1.10).\n", e.worstPrediction(p))
		}
		b.WriteString("\n")
	} else {
		worst := func(mode string) string { return e.longest(mode) }
		ef, _, _ := e.fairness("elastic")
		fmt.Fprintf(&b, "\nMean completion time elastic ÷ fixed-size: **%.2f** (goal < 1); longest pending: **%s s** elastic, %s s fixed-size; "+
			"max ÷ min share median **%s** elastic (goal ≤ 1.5).\n\n", e.MeanJCT("elastic")/e.MeanJCT("fifo"), worst("elastic"), worst("fifo"), ef)
	}
	fmt.Fprintf(&b, "![CPUs held by each job over time, one colour per job; one panel per mode, in the table's order](%s)\n", plot)
	return b.String()
}

// jobsLine describes the jobs.
func (e SharedCluster) jobsLine() string {
	common := fmt.Sprintf("%d jobs arrive %.0f s apart, each wanting %d workers × %g CPU + a PS × %g + a master × %g (%.2f CPUs: %.1f× the cluster together), ",
		e.Jobs, e.Arrival, e.MaxWorkers, e.WorkerCPU, e.PSCPU, e.MasterCPU, e.jobCPU(), float64(e.Jobs)*e.jobCPU()/e.Capacity())
	if len(e.Specs) == 0 {
		return common + fmt.Sprintf("each with the same work: %d epochs of %d records, modelled at %.0f µs a record on one CPU (%s).\n\n",
			e.Epochs, e.RecordsPerEpoch, e.SecondsPerRecord*1e6, e.Calibration)
	}
	var sizes, knees []float64
	for _, j := range e.Specs {
		sizes, knees = append(sizes, float64(j.Epochs)), append(knees, j.Knee)
	}
	return common + fmt.Sprintf("each of its own size and speed-up, drawn from the simulator's trace (Pollux's workload 1, in order; "+
		"internal/experiment/sharing_jobs.go): %s epochs of %d records, modelled at %.0f µs a record on one CPU (%s), "+
		"with a modelled PS that serializes pushes so that a job's speed-up stops at its trace job's best speed-up at up to %d workers, %s. "+
		"The simulator replays the same jobs, curves, arrivals and cluster with the control plane's latencies as measured in these runs: "+
		"a job stalls %.1f s when it starts (the first job's submission to its first worker running, and its workers' time not training); "+
		"a worker added to a running job trains as much later while the others train on; one removed stops at once; "+
		"a job ends %.1f s after its last task; first come, first served admits as our gang masters do "+
		"(every master waiting when room frees sees it, each whose gang fits is admitted, and their pods run as room allows).\n\n",
		SpreadOf(sizes).Format("%.0f"), e.RecordsPerEpoch, e.SecondsPerRecord*1e6, e.Calibration, e.MaxWorkers, SpreadOf(knees).Format("%.1f×"), e.StartCost, e.EndCost)
}

// rows are the table's rows, a column per mode.
func (e SharedCluster) rows() [][]string {
	util := func(r Run) float64 { return 100 * r.Utilization(e.Capacity()) }
	row := func(label string, cell func(mode string) string) []string {
		out := []string{label}
		for _, mode := range e.modes() {
			out = append(out, cell(mode))
		}
		return out
	}
	mean := func(f func(Run, int) float64) func(string) string {
		return func(mode string) string { return SpreadOf(jobTimes(e.Runs, mode, f)).Format("%.1f") }
	}
	rows := [][]string{
		row("job completion time (submitted → done), mean (min–max over jobs), s", mean(completion)),
		row("job pending time (submitted → a worker running), mean (min–max), s", mean(Run.Pending)),
		row("longest pending, s", e.longest),
		row("all jobs done (makespan), s", func(m string) string { return SpreadOf(Of(e.Runs, m, Run.Makespan)).Format("%.1f") }),
		row("CPU requested by the jobs ÷ capacity over the makespan, %", func(m string) string { return SpreadOf(Of(e.Runs, m, util)).Format("%.1f") }),
		row("max ÷ min CPU share among the jobs in the cluster, median over time", func(m string) string { med, _, _ := e.fairness(m); return med }),
		row("time with max ÷ min share ≤ 1.5, % of the time ≥ 2 jobs are in", func(m string) string { _, w, _ := e.fairness(m); return w }),
	}
	if len(e.Specs) > 0 {
		rows = append(rows, row("max ÷ min CPU share among the jobs training (first task → last task), median over time",
			func(m string) string { med, _, _ := e.shares(m, TrainingFairness); return med }))
	}
	if pred := e.predicted(); len(pred) > 0 {
		rows = append(rows, row("simulator's mean completion time for the same jobs, s (÷ ours; ÷ each run's)", func(m string) string {
			p, ok := pred[m]
			if !ok || e.MeanJCT(m) == 0 {
				return "—"
			}
			// Each run's ratio too: runs of one mode can differ by more
			// than the prediction's goal on a shared machine.
			runs := SpreadOf(Of(e.Runs, m, func(r Run) float64 { return p / SpreadOf(jobTimes([]Run{r}, m, completion)).Mean }))
			if runs.N < 2 {
				return fmt.Sprintf("%.1f (%.2f)", p, p/e.MeanJCT(m))
			}
			return fmt.Sprintf("%.1f (%.2f; %.2f–%.2f)", p, p/e.MeanJCT(m), runs.Min, runs.Max)
		}))
	}
	return rows
}

// longest is the longest pending of mode's jobs, "—" without runs.
func (e SharedCluster) longest(mode string) string {
	if len(Of(e.Runs, mode, Run.Makespan)) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", LongestPending(e.Runs, mode))
}

// fairness is Fairness's median and within (%) over mode's runs.
func (e SharedCluster) fairness(mode string) (median, within string, n int) {
	return e.shares(mode, Fairness)
}

// shares is metric's median and within (%) over mode's runs.
func (e SharedCluster) shares(mode string, metric func(Run) (float64, float64, int)) (median, within string, n int) {
	var med, in []float64
	for _, r := range e.Runs {
		if r.Mode == mode {
			m, w, k := metric(r)
			if k > 0 {
				med, in, n = append(med, m), append(in, 100*w), n+k
			}
		}
	}
	return SpreadOf(med).Format("%.2f"), SpreadOf(in).Format("%.0f"), n
}

// worstPrediction is, over the modes predicted, the simulator's mean JCT
// ÷ the control plane's farthest from 1.
func (e SharedCluster) worstPrediction(pred map[string]float64) float64 {
	worst := 1.0
	for _, mode := range e.modes() {
		if p, ok := pred[mode]; ok && e.MeanJCT(mode) > 0 {
			if r := p / e.MeanJCT(mode); math.Abs(r-1) > math.Abs(worst-1) {
				worst = r
			}
		}
	}
	return worst
}

func (e SharedCluster) jobCPU() float64 {
	return float64(e.MaxWorkers)*e.WorkerCPU + e.PSCPU + e.MasterCPU
}
