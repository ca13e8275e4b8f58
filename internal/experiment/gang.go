package experiment

import (
	"fmt"
	"strings"
)

// GangVsElastic is experiment 1 of docs/experiments.md (the ElasticDL
// report's "overlap jobs"): two jobs that each want more than half the
// cluster, the second submitted shortly after the first, run as gang
// jobs (all or nothing) and as elastic jobs. Experiment 5 is the same with
// AllReduce jobs (Seed and Strategy say so).
type GangVsElastic struct {
	// Seed holds the seed's figures; nil: experiment 1's (ElasticDLSeed).
	Seed *GangSeed `json:"seed,omitempty"`
	// Strategy is the jobs' --distribution_strategy ("": parameter
	// servers).
	Strategy string `json:"strategy,omitempty"`
	Date     string `json:"date"`
	Machine  string `json:"machine"`
	Command  string `json:"command"`
	// Nodes and CPUsPerNode make the cluster.
	Nodes       int     `json:"nodes"`
	CPUsPerNode float64 `json:"cpus_per_node"`
	// Workers per job and what each pod requests (CPUs).
	Workers   int     `json:"workers"`
	WorkerCPU float64 `json:"worker_cpu"`
	PSCPU     float64 `json:"ps_cpu"`
	MasterCPU float64 `json:"master_cpu"`
	// SecondsPerRecord is the modelled compute; Calibration says where it
	// comes from.
	SecondsPerRecord float64 `json:"seconds_per_record"`
	Calibration      string  `json:"calibration"`
	Epochs           int     `json:"epochs"`
	// MinibatchSize × MinibatchesPerTask records make a task.
	MinibatchSize      int   `json:"minibatch_size"`
	MinibatchesPerTask int   `json:"minibatches_per_task"`
	RecordsPerEpoch    int64 `json:"records_per_epoch"`
	// Scale: one of our seconds is this many of the seed's.
	Scale float64 `json:"scale"`
	// SecondAfter: the second job is submitted this long (ours) after
	// the first.
	SecondAfter float64 `json:"second_after"`
	Runs        []Run   `json:"runs"`
}

// GangSeed is what the seed reports of a gang vs elastic experiment.
type GangSeed struct {
	Gang, Elastic string  // both jobs done, seconds
	Ratio         float64 // elastic ÷ gang
	FirstAlone    float64 // the first job alone, seconds
	SecondAfter   float64 // the second job's submission after the first, seconds
	// Goal is this project's target for the ratio (0: none).
	Goal float64
}

// ElasticDLSeed is experiment 1's seed (docs/benchmark of ElasticDL: 24
// CPUs, two 13-CPU jobs, the second submitted 30 s after the first).
var ElasticDLSeed = GangSeed{Gang: "780–795", Elastic: "570–580", Ratio: 0.73, FirstAlone: 370, SecondAfter: 30, Goal: 0.70}

// AllReduceSeed is experiment 5's seed (ElasticDL's AllReduce report: 6
// GPUs, two 4-GPU jobs; gang 968 s at 66.6 % utilization, elastic 809 s).
// The report gives no submission delay (taken as none) and no time alone
// (taken as half the gang total: the gang runs the jobs one after the
// other).
var AllReduceSeed = GangSeed{Gang: "968", Elastic: "809", Ratio: 809.0 / 968, FirstAlone: 484, SecondAfter: 0}

func (g GangVsElastic) seed() GangSeed {
	if g.Seed != nil {
		return *g.Seed
	}
	return ElasticDLSeed
}

// Alone is how long a job's modelled compute takes at all its workers:
// the first job alone, in our seconds.
func (g GangVsElastic) Alone() float64 {
	return float64(g.Epochs) * float64(g.RecordsPerEpoch) * g.SecondsPerRecord / (float64(g.Workers) * g.WorkerCPU)
}

// Capacity is the cluster's CPUs.
func (g GangVsElastic) Capacity() float64 { return float64(g.Nodes) * g.CPUsPerNode }

// Summary is the headline: the makespan ratio and the second job's wait
// when elastic, over runs.
func (g GangVsElastic) Summary() (ratio, elasticWait Spread) {
	ratio = SpreadOf(Ratios(g.Runs, "elastic", "gang", Run.Makespan))
	elasticWait = SpreadOf(Of(g.Runs, "elastic", func(r Run) float64 { return r.Jobs[len(r.Jobs)-1].Wait() }))
	return
}

// Markdown is the experiment's generated section of docs/experiments.md;
// plot is the figure's path relative to that document.
func (g GangVsElastic) Markdown(plot string) string {
	var b strings.Builder
	seed := g.seed()
	b.WriteString(preamble(g.Date, g.Machine, g.Runs, g.Nodes, g.CPUsPerNode))
	ps := fmt.Sprintf(" + 1 PS × %g CPU", g.PSCPU)
	if g.Strategy != "" {
		ps = fmt.Sprintf(", `--distribution_strategy=%s` (no PS)", g.Strategy)
	}
	fmt.Fprintf(&b, "Each job: %d workers × %g CPU%s + a master × %g CPU, %d epoch(s) of %d records in tasks of %d × %d. "+
		"Modelled compute: a record takes %.0f µs of one CPU (%s). "+
		"Time scale: one second here is %.2f of the seed's (the first job alone: %.0f s in the seed); "+
		"the second job is submitted %.1f s (seed: %.0f s) after the first.\n\n",
		g.Workers, g.WorkerCPU, ps, g.MasterCPU,
		g.Epochs, g.RecordsPerEpoch, g.MinibatchesPerTask, g.MinibatchSize, g.SecondsPerRecord*1e6, g.Calibration, g.Scale, seed.FirstAlone, g.SecondAfter, seed.SecondAfter)
	scaled := func(f func(Run) float64) func(Run) float64 { return func(r Run) float64 { return f(r) * g.Scale } }
	second := func(f func(Job) float64) func(Run) float64 {
		return func(r Run) float64 { return f(r.Jobs[len(r.Jobs)-1]) }
	}
	last := func(r Run) int { return len(r.Jobs) - 1 }
	first := func(f func(Job) float64) func(Run) float64 {
		return func(r Run) float64 { return f(r.Jobs[0]) }
	}
	spreads := func(f func(Run) float64, format string) (string, string) {
		return SpreadOf(Of(g.Runs, "gang", f)).Format(format), SpreadOf(Of(g.Runs, "elastic", f)).Format(format)
	}
	row := func(what, seed string, f func(Run) float64, format string, ratio bool) []string {
		gang, el := spreads(f, format)
		r := "—"
		if ratio {
			r = SpreadOf(Ratios(g.Runs, "elastic", "gang", f)).Format("%.3f")
		}
		return []string{what, seed, gang, el, r}
	}
	utilization := func(r Run) float64 { return 100 * r.Utilization(g.Capacity()) }
	rows := [][]string{
		row("both jobs done (makespan), seed's seconds", seed.Gang+" / "+seed.Elastic, scaled(Run.Makespan), "%.0f", true),
		row("both jobs done, our seconds", "—", Run.Makespan, "%.1f", true),
		row("first job: submitted → done, our seconds", fmt.Sprintf("%.0f", seed.FirstAlone), first(func(j Job) float64 { return j.Ended - j.Submitted }), "%.1f", false),
		row("second job: submitted → a worker running, our seconds", fmt.Sprintf("~%.0f / ~0", seed.FirstAlone), func(r Run) float64 { return r.Pending(last(r)) }, "%.1f", false),
		row("second job: submitted → first task done, our seconds", fmt.Sprintf("~%.0f / ~0", seed.FirstAlone), second(Job.Wait), "%.1f", false),
		row("second job: workers at most", fmt.Sprintf("%d / %d", g.Workers, g.Workers), func(r Run) float64 { _, hi := r.WorkerRange(last(r)); return float64(hi) }, "%.0f", false),
		row("CPU requested by the jobs ÷ capacity over the makespan, %", "—", utilization, "%.1f", false),
	}
	b.WriteString(Table([]string{"", "seed (gang / elastic)", "gang (ours)", "elastic (ours)", "elastic ÷ gang"}, rows))
	ratio, wait := g.Summary()
	exact := true
	for _, r := range g.Runs {
		for _, j := range r.Jobs {
			exact = exact && j.ExactlyOnce
		}
	}
	goal := ""
	if seed.Goal > 0 {
		goal = fmt.Sprintf(", goal ≤ %.2f", seed.Goal)
	}
	fmt.Fprintf(&b, "\nElastic ÷ gang makespan: **%s** (seed %.2f%s); the second elastic job's wait: **%s s** (goal ≤ 5 s); "+
		"every epoch of every job trained exactly once: **%v**.\n\n", ratio.Format("%.3f"), seed.Ratio, goal, wait.Format("%.1f"), exact)
	fmt.Fprintf(&b, "![CPUs held by each job over time, gang above, elastic below](%s)\n\n", plot)
	fmt.Fprintf(&b, "Run by run (our seconds):\n\n")
	var rr [][]string
	for _, r := range g.Runs {
		var jobs []string
		for i, j := range r.Jobs {
			_, most := r.WorkerRange(i)
			jobs = append(jobs, fmt.Sprintf("%s %.1f→%.1f→%.1f (admission %.1f, ≤%d workers)", j.Name, j.Submitted, j.Started, j.Ended, j.AdmissionWait, most))
		}
		rr = append(rr, []string{r.Mode, fmt.Sprint(r.Index), fmt.Sprintf("%.1f", r.Makespan()), fmt.Sprintf("%.1f", utilization(r)), strings.Join(jobs, "; ")})
	}
	b.WriteString(Table([]string{"mode", "run", "makespan", "utilization %", "jobs: submitted→first task done→ended"}, rr))
	return b.String()
}
