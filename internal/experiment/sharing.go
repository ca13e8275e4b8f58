package experiment

import (
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
}

// Capacity is the cluster's CPUs.
func (e SharedCluster) Capacity() float64 { return float64(e.Nodes) * e.CPUsPerNode }

// Fairness is, over the samples of r in which at least two jobs are in
// the cluster (their master runs and they have not ended: a job waiting
// for room counts, holding its master's share), the ratio of the largest
// to the smallest CPU share among those jobs: its median, and the fraction
// of those samples in which it is at most 1.5. n counts the samples.
func Fairness(r Run) (median, within float64, n int) {
	var ratios []float64
	for _, s := range r.Timeline {
		lo, hi, k := math.Inf(1), 0.0, 0
		for i, cpu := range s.CPU {
			if cpu <= 0 || (i < len(r.Jobs) && s.T >= r.Jobs[i].Ended) {
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
	fmt.Fprintf(&b, "%d jobs arrive %.0f s apart, each wanting %d workers × %g CPU + a PS × %g + a master × %g (%.2f CPUs: %.1f× the cluster together), "+
		"each with the same work: %d epochs of %d records, modelled at %.0f µs a record on one CPU (%s).\n\n",
		e.Jobs, e.Arrival, e.MaxWorkers, e.WorkerCPU, e.PSCPU, e.MasterCPU,
		e.jobCPU(), float64(e.Jobs)*e.jobCPU()/e.Capacity(), e.Epochs, e.RecordsPerEpoch, e.SecondsPerRecord*1e6, e.Calibration)
	pending := Run.Pending
	worst := func(mode string) string {
		if len(Of(e.Runs, mode, Run.Makespan)) == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f", LongestPending(e.Runs, mode))
	}
	fair := func(mode string) (string, string) {
		var med, within []float64
		for _, r := range e.Runs {
			if r.Mode == mode {
				m, w, n := Fairness(r)
				if n > 0 {
					med, within = append(med, m), append(within, 100*w)
				}
			}
		}
		return SpreadOf(med).Format("%.2f"), SpreadOf(within).Format("%.0f")
	}
	util := func(r Run) float64 { return 100 * r.Utilization(e.Capacity()) }
	ff, fw := fair("fifo")
	ef, ew := fair("elastic")
	mean := func(mode string, f func(Run, int) float64) string {
		return SpreadOf(jobTimes(e.Runs, mode, f)).Format("%.1f")
	}
	rows := [][]string{
		{"job completion time (submitted → done), mean (min–max over jobs), s", mean("fifo", completion), mean("elastic", completion)},
		{"job pending time (submitted → a worker running), mean (min–max), s", mean("fifo", pending), mean("elastic", pending)},
		{"longest pending, s", worst("fifo"), worst("elastic")},
		{"all jobs done (makespan), s", SpreadOf(Of(e.Runs, "fifo", Run.Makespan)).Format("%.1f"), SpreadOf(Of(e.Runs, "elastic", Run.Makespan)).Format("%.1f")},
		{"CPU requested by the jobs ÷ capacity over the makespan, %", SpreadOf(Of(e.Runs, "fifo", util)).Format("%.1f"), SpreadOf(Of(e.Runs, "elastic", util)).Format("%.1f")},
		{"max ÷ min CPU share among the jobs in the cluster, median over time", ff, ef},
		{"time with max ÷ min share ≤ 1.5, % of the time ≥ 2 jobs are in", fw, ew},
	}
	b.WriteString(Table([]string{"", "fixed-size, first come first served (ours)", "elastic + autoscaler (ours)"}, rows))
	fc, ec := SpreadOf(jobTimes(e.Runs, "fifo", completion)), SpreadOf(jobTimes(e.Runs, "elastic", completion))
	fmt.Fprintf(&b, "\nMean completion time elastic ÷ fixed-size: **%.2f** (goal < 1); longest pending: **%s s** elastic, %s s fixed-size; "+
		"max ÷ min share median **%s** elastic (goal ≤ 1.5).\n\n", ec.Mean/fc.Mean, worst("elastic"), worst("fifo"), ef)
	fmt.Fprintf(&b, "![CPUs held by each job over time, one colour per job; fixed-size above, elastic below](%s)\n", plot)
	return b.String()
}

func (e SharedCluster) jobCPU() float64 {
	return float64(e.MaxWorkers)*e.WorkerCPU + e.PSCPU + e.MasterCPU
}
