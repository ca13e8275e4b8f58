// Package experiment turns the runs of the seeds' experiments (test/e2e's
// TestExperiment* on the control plane, test/local's
// TestExperimentConvergence, `make experiments`) into what
// docs/experiments.md shows: each job's times, the run's timeline of what
// the jobs hold, tables that compare a baseline with the elastic result
// beside the seed's figure, PNG plots, and the document's generated
// sections. It measures nothing itself: the harness fills in the runs.
package experiment

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
)

// Job is one training job of a run, its times in seconds from the run's
// start (our seconds, not scaled to the seed's).
type Job struct {
	Name      string  `json:"name"`
	Submitted float64 `json:"submitted"`
	// Started is when its first training task was reported done.
	Started float64 `json:"started"`
	// Trained is when its last training task was reported done: its
	// workers only exit after it.
	Trained float64 `json:"trained,omitempty"`
	// Ended is when its master Job was seen complete.
	Ended float64 `json:"ended"`
	// AdmissionWait is how long a gang job waited to be admitted whole.
	AdmissionWait float64 `json:"admission_wait"`
	// Records trained over all epochs, and whether every epoch trained
	// each of its records exactly once.
	Records     int64 `json:"records"`
	ExactlyOnce bool  `json:"exactly_once"`
}

// Wait is how long the job waited from its submission to its first task
// done.
func (j Job) Wait() float64 { return j.Started - j.Submitted }

// Completion is how long the job took from its submission to its end.
func (j Job) Completion() float64 { return j.Ended - j.Submitted }

// Sample is what was held at one moment: CPUs requested by running pods
// and running workers, by series (Run.Series: a run's jobs, or services
// and training).
type Sample struct {
	T       float64   `json:"t"`
	CPU     []float64 `json:"cpu"`
	Workers []int     `json:"workers"`
}

// Run is one run of an experiment in one mode (a baseline or elastic).
type Run struct {
	Mode  string `json:"mode"`
	Index int    `json:"index"`
	Jobs  []Job  `json:"jobs"`
	// Series name the columns of the timeline's samples.
	Series   []string `json:"series"`
	Timeline []Sample `json:"timeline"`
	// End, when set, is the end of the measured window (else the last
	// job's end).
	End float64 `json:"end,omitempty"`
	// Waits: how long each pod of an online service waited from its
	// creation to running (experiment 2).
	Waits []float64 `json:"waits,omitempty"`
	// Records trained in the measured window (experiment 2).
	Records int64 `json:"records,omitempty"`
}

// Makespan is from the run's start to the last job's end.
func (r Run) Makespan() float64 {
	if r.End > 0 {
		return r.End
	}
	end := 0.0
	for _, j := range r.Jobs {
		end = max(end, j.Ended)
	}
	return end
}

// FirstRunning is when series i (job i) was first seen with a worker
// running; -1 if never.
func (r Run) FirstRunning(i int) float64 {
	for _, s := range r.Timeline {
		if s.workers(i) > 0 {
			return s.T
		}
	}
	return -1
}

// WorkerRange is the fewest and the most workers series i had running
// over the timeline.
func (r Run) WorkerRange(i int) (lo, hi int) {
	for k, s := range r.Timeline {
		if k == 0 || s.workers(i) < lo {
			lo = s.workers(i)
		}
		hi = max(hi, s.workers(i))
	}
	return lo, hi
}

// workers is series i's running workers (0 where the sample has no such
// series: data written by hand or cut short).
func (s Sample) workers(i int) int {
	if i < len(s.Workers) {
		return s.Workers[i]
	}
	return 0
}

// Pending is how long job i waited from its submission for a worker to
// run: its whole life if none ever did.
func (r Run) Pending(i int) float64 {
	j := r.Jobs[i]
	if at := r.FirstRunning(i); at >= 0 {
		return at - j.Submitted
	}
	return j.Completion()
}

// Utilization is the mean share of capacity (CPUs) that the jobs' pods
// requested over the makespan, from the timeline (each sample holds until
// the next).
func (r Run) Utilization(capacity float64) float64 {
	span := r.Makespan()
	if span <= 0 || capacity <= 0 || len(r.Timeline) == 0 {
		return 0
	}
	var area float64
	for i, s := range r.Timeline {
		next := span
		if i+1 < len(r.Timeline) {
			next = min(r.Timeline[i+1].T, span)
		}
		if next <= s.T {
			continue
		}
		var cpu float64
		for _, c := range s.CPU {
			cpu += c
		}
		area += cpu * (next - s.T)
	}
	return area / (capacity * span)
}

// Spread is a quantity over runs.
type Spread struct {
	Mean, Min, Max float64
	N              int
}

// SpreadOf summarizes xs.
func SpreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := Spread{Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
	for _, x := range xs {
		s.Mean += x
	}
	s.Mean /= float64(len(xs))
	return s
}

// Format writes s with format f for each number: "mean (min–max)", or
// just the mean for a single run or a range that f shows as one number.
func (s Spread) Format(f string) string {
	if s.N == 0 {
		return "—"
	}
	if s.N == 1 || fmt.Sprintf(f, s.Min) == fmt.Sprintf(f, s.Max) {
		return fmt.Sprintf(f, s.Mean)
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", s.Mean, s.Min, s.Max)
}

// Of returns f of each run of the given mode, in order.
func Of(runs []Run, mode string, f func(Run) float64) []float64 {
	var out []float64
	for _, r := range runs {
		if r.Mode == mode {
			out = append(out, f(r))
		}
	}
	return out
}

// Ratios pairs the runs of modes a and b by index and returns f(a)/f(b)
// for each pair where both exist.
func Ratios(runs []Run, a, b string, f func(Run) float64) []float64 {
	byIndex := map[int]Run{}
	for _, r := range runs {
		if r.Mode == b {
			byIndex[r.Index] = r
		}
	}
	var out []float64
	for _, r := range runs {
		if o, ok := byIndex[r.Index]; ok && r.Mode == a && f(o) != 0 {
			out = append(out, f(r)/f(o))
		}
	}
	return out
}

// Table renders a markdown table: a header row and rows of cells.
func Table(header []string, rows [][]string) string {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range rows {
		line(r)
	}
	return b.String()
}

// Section markers of a generated part of a document.
func markers(name string) (begin, end string) {
	return "<!-- experiment " + name + ": generated by the command above, do not edit -->",
		"<!-- end of experiment " + name + " -->"
}

// UpdateSection replaces the generated section name of doc with body, or
// appends it when doc has none. A section whose end marker is missing is
// an error (the document was edited by hand).
func UpdateSection(doc []byte, name, body string) ([]byte, error) {
	begin, end := markers(name)
	section := begin + "\n" + strings.TrimRight(body, "\n") + "\n" + end
	i := bytes.Index(doc, []byte(begin))
	if i < 0 {
		out := bytes.TrimRight(doc, "\n")
		if len(out) > 0 {
			out = append(out, "\n\n"...)
		}
		return append(out, section+"\n"...), nil
	}
	j := bytes.Index(doc[i:], []byte(end))
	if j < 0 {
		return nil, fmt.Errorf("experiment %s: the section has no end marker %q", name, end)
	}
	out := append([]byte{}, doc[:i]...)
	out = append(out, section...)
	return append(out, doc[i+j+len(end):]...), nil
}

// round rounds x to d decimals (for JSON that stays readable).
func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}

// preamble opens a report: when and where it was measured, how many runs
// of each mode (counted by the last run's mode), and the cluster.
func preamble(date, machine string, runs []Run, nodes int, cpusPerNode float64) string {
	n := 0
	if len(runs) > 0 {
		n = len(Of(runs, runs[len(runs)-1].Mode, Run.Makespan))
	}
	return fmt.Sprintf("Measured %s on %s: %d run(s) of each mode, alternated. Cluster: %d process nodes × %g CPUs = %g CPUs. ",
		date, machine, n, nodes, cpusPerNode, float64(nodes)*cpusPerNode)
}

// Machine describes this machine for a report: its cores, CPU model and
// Go version.
func Machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s", runtime.NumCPU(), cpu, runtime.Version())
}

// Requested says whether ELASTICDL_EXPERIMENT (comma-separated names, or
// "all"; set by `make experiments`) asks for the full version of
// experiment name; the test suites run a short version otherwise.
func Requested(name string) bool {
	for _, v := range strings.Split(os.Getenv("ELASTICDL_EXPERIMENT"), ",") {
		if v = strings.TrimSpace(v); v == "all" || v == name {
			return true
		}
	}
	return false
}
