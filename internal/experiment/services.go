package experiment

import (
	"fmt"
	"slices"
	"strings"
)

// BesideServices is experiment 2 of docs/experiments.md (Paddle EDL's
// nginx experiment, ElasticDL's "auto react"): an online service at high
// priority whose replicas follow a day of load, and low-priority training
// on the rest of the cluster, as fixed-size jobs sized for the service's
// peak and as elastic jobs sized by the autoscaler.
type BesideServices struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	Command string `json:"command"`
	Nodes   int    `json:"nodes"`
	// CPUsPerNode make the cluster.
	CPUsPerNode float64 `json:"cpus_per_node"`
	// The service: ServiceMin to ServiceMax replicas of ServiceCPU each
	// over a day of Day seconds (ours).
	ServiceCPU float64 `json:"service_cpu"`
	ServiceMin int     `json:"service_min"`
	ServiceMax int     `json:"service_max"`
	Day        float64 `json:"day"`
	// Training: Jobs jobs of 1..MaxWorkers workers (elastic) or
	// FixedWorkers (fixed-size), with a PS and a master each.
	Jobs         int     `json:"jobs"`
	MaxWorkers   int     `json:"max_workers"`
	FixedWorkers int     `json:"fixed_workers"`
	WorkerCPU    float64 `json:"worker_cpu"`
	PSCPU        float64 `json:"ps_cpu"`
	MasterCPU    float64 `json:"master_cpu"`
	// SecondsPerRecord is the modelled compute.
	SecondsPerRecord float64 `json:"seconds_per_record"`
	Calibration      string  `json:"calibration"`
	Runs             []Run   `json:"runs"`
}

// Capacity is the cluster's CPUs.
func (e BesideServices) Capacity() float64 { return float64(e.Nodes) * e.CPUsPerNode }

// waitStats is how the service's pods waited in the runs of a mode: the
// median and the worst, and how many waited longer than slow seconds.
func waitStats(runs []Run, mode string, slow float64) (median, worst float64, over, n int) {
	var all []float64
	for _, r := range runs {
		if r.Mode == mode {
			all = append(all, r.Waits...)
		}
	}
	if len(all) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(all)
	for _, w := range all {
		if w > slow {
			over++
		}
	}
	return all[len(all)/2], all[len(all)-1], over, len(all)
}

// Markdown is the experiment's generated section of docs/experiments.md.
func (e BesideServices) Markdown(plot string) string {
	var b strings.Builder
	b.WriteString(preamble(e.Date, e.Machine, e.Runs, e.Nodes, e.CPUsPerNode))
	fmt.Fprintf(&b, "The service: a Deployment of the project's Go web server (every pod answers HTTP) at `elasticdl-high`, %g CPU a pod, "+
		"%d → %d → %d replicas over a day of %.0f s (a raised cosine, set every second by the test's load driver). "+
		"Training: %d jobs at `elasticdl-low` (PS and master at `elasticdl-high`), workers of %g CPU: fixed-size with %d workers each "+
		"(what fits beside the service's peak), or elastic with 1..%d sized by `elasticdl autoscaler`. "+
		"Modelled compute: %.0f µs a record (%s).\n\n",
		e.ServiceCPU, e.ServiceMin, e.ServiceMax, e.ServiceMin, e.Day,
		e.Jobs, e.WorkerCPU, e.FixedWorkers, e.MaxWorkers, e.SecondsPerRecord*1e6, e.Calibration)
	util := func(r Run) float64 { return 100 * r.Utilization(e.Capacity()) }
	records := func(r Run) float64 { return float64(r.Records) }
	fixedU, elasticU := SpreadOf(Of(e.Runs, "fixed", util)), SpreadOf(Of(e.Runs, "elastic", util))
	fixedR, elasticR := SpreadOf(Of(e.Runs, "fixed", records)), SpreadOf(Of(e.Runs, "elastic", records))
	workers := func(mode string) string {
		lo, hi := -1, 0
		for _, r := range e.Runs {
			if r.Mode == mode && len(r.Timeline) > 0 {
				l, h := r.WorkerRange(1)
				if lo < 0 || l < lo {
					lo = l
				}
				hi = max(hi, h)
			}
		}
		return fmt.Sprintf("%d–%d", max(lo, 0), hi)
	}
	const slow = 5.0
	waits := func(mode string) (string, string) {
		m, w, over, n := waitStats(e.Runs, mode, slow)
		return fmt.Sprintf("%.2f / %.2f (%d pods)", m, w, n), fmt.Sprint(over)
	}
	fw, fo := waits("fixed")
	ew, eo := waits("elastic")
	rows := [][]string{
		{"CPU requested (service + training) ÷ capacity over the day, %", "~90 (Paddle EDL), >90 (ElasticDL)", fixedU.Format("%.1f"), elasticU.Format("%.1f"), SpreadOf(Ratios(e.Runs, "elastic", "fixed", util)).Format("%.2f")},
		{"records trained over the day", "—", fixedR.Format("%.0f"), elasticR.Format("%.0f"), SpreadOf(Ratios(e.Runs, "elastic", "fixed", records)).Format("%.2f")},
		{"training workers running (all jobs), min–max", "—", workers("fixed"), workers("elastic"), "—"},
		{"service pods, created → running: median / worst, s", "—", fw, ew, "—"},
		{fmt.Sprintf("service pods that waited over %.0f s", slow), "—", fo, eo, "—"},
	}
	b.WriteString(Table([]string{"", "seed", "fixed-size (ours)", "elastic (ours)", "elastic ÷ fixed"}, rows))
	fmt.Fprintf(&b, "\nElastic utilization **%s %%** (seed ~90 %%, goal ≥ 95 %%); fixed-size **%s %%**; the worst service pod wait with elastic training **%.2f s**.\n\n",
		elasticU.Format("%.1f"), fixedU.Format("%.1f"), func() float64 { _, w, _, _ := waitStats(e.Runs, "elastic", slow); return w }())
	fmt.Fprintf(&b, "![CPUs requested by the service and by training over the day, fixed-size above, elastic below](%s)\n", plot)
	return b.String()
}
