package experiment

import (
	"fmt"
	"image/color"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Convergence is experiment 3 of docs/experiments.md (the ElasticDL
// report's "convergence with a changing number of workers"): each case, a
// model on a data set, trained for real by parameter-server jobs with a
// fixed 4 workers, a fixed 8, and a room that flips between 4 and 8 every
// few tasks (the 4 newest workers preempted, their relaunches pending
// until the room returns), over several seeds each.
type Convergence struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	Command string `json:"command"`
	// Setup says what ran where (backend, PS, build).
	Setup string            `json:"setup"`
	Cases []ConvergenceCase `json:"cases"`
	Runs  []ConvergenceRun  `json:"runs"`
	Goal  string            `json:"goal,omitempty"`
	Notes []string          `json:"notes,omitempty"`
}

// The schedules of experiment 3, in the order they are reported.
const (
	Fixed4   = "fixed 4"
	Fixed8   = "fixed 8"
	Changing = "4 ↔ 8"
)

// ConvergenceSchedules are the schedules in report order.
var ConvergenceSchedules = []string{Fixed4, Fixed8, Changing}

// ConvergenceCase is one model on one data set.
type ConvergenceCase struct {
	Name        string `json:"name"` // e.g. "ctr.xdeepfm on ticdata"
	Model       string `json:"model"`
	ModelParams string `json:"model_params,omitempty"`
	// Optimizer overrides the model's (--optimizer) when set.
	Optimizer string `json:"optimizer,omitempty"`
	Data      string `json:"data"` // where the records come from
	Metric    string `json:"metric"`
	Epochs    int    `json:"epochs"`
	Minibatch int    `json:"minibatch"`
	// TrainRecords per epoch; TestRecords evaluated at each point.
	TrainRecords int64 `json:"train_records"`
	TestRecords  int64 `json:"test_records"`
	// EvaluationSteps: a point every this many model versions (one
	// version per minibatch pushed).
	EvaluationSteps int64 `json:"evaluation_steps"`
	// FlipTasks: the changing schedule's room flips each time another
	// this many training tasks' worth of records is done.
	FlipTasks int `json:"flip_tasks"`
	// Ceiling, for synthetic data, is the AUC of the true click
	// probabilities on the test records: what a perfect model reaches.
	Ceiling float64 `json:"ceiling,omitempty"`
}

// ConvergenceRun is one job of a case under a schedule.
type ConvergenceRun struct {
	Case     string             `json:"case"`
	Schedule string             `json:"schedule"`
	Seed     int64              `json:"seed"`
	Points   []ConvergencePoint `json:"points"`
	Wall     float64            `json:"wall_seconds"`
	// Flips are the room's changes; Preempted and Relaunched the
	// master's counts of workers.
	Flips      int `json:"flips"`
	Preempted  int `json:"preempted"`
	Relaunched int `json:"relaunched"`
	// LedgerExact: every epoch trained each of its records exactly once.
	LedgerExact bool `json:"ledger_exact"`
}

// ConvergencePoint is one evaluation on the test records.
type ConvergencePoint struct {
	// Records trained when it was queued: Version × the minibatch (short
	// minibatches at task ends make it a slight over-count), or all of
	// them for the final one.
	Records int64   `json:"records"`
	Version int64   `json:"version"`
	Metric  float64 `json:"metric"`
	Loss    float64 `json:"loss"`
	Final   bool    `json:"final,omitempty"`
}

// Final is the run's final evaluation (the zero point if it has none).
func (r ConvergenceRun) Final() ConvergencePoint {
	for i := len(r.Points) - 1; i >= 0; i-- {
		if r.Points[i].Final {
			return r.Points[i]
		}
	}
	return ConvergencePoint{}
}

// runsOf returns the runs of case c under schedule s.
func (e Convergence) runsOf(c, s string) []ConvergenceRun {
	var out []ConvergenceRun
	for _, r := range e.Runs {
		if r.Case == c && r.Schedule == s {
			out = append(out, r)
		}
	}
	return out
}

func finals(runs []ConvergenceRun, f func(ConvergencePoint) float64) []float64 {
	var out []float64
	for _, r := range runs {
		out = append(out, f(r.Final()))
	}
	return out
}

func metricOf(p ConvergencePoint) float64 { return p.Metric }
func lossOf(p ConvergencePoint) float64   { return p.Loss }

// Band is the final metric's range over the fixed schedules' runs of case
// c: what the seeds and the worker count alone move it by.
func (e Convergence) Band(c string) Spread {
	return SpreadOf(append(finals(e.runsOf(c, Fixed4), metricOf), finals(e.runsOf(c, Fixed8), metricOf)...))
}

// Verdict says whether the changing runs of case c end inside the band:
// their mean, and how many of them.
func (e Convergence) Verdict(c string) (meanInside bool, inside, n int) {
	band := e.Band(c)
	ch := finals(e.runsOf(c, Changing), metricOf)
	for _, m := range ch {
		if m >= band.Min && m <= band.Max {
			inside++
		}
	}
	s := SpreadOf(ch)
	return s.N > 0 && band.N > 0 && s.Mean >= band.Min && s.Mean <= band.Max, inside, len(ch)
}

// Markdown renders experiment 3's section.
func (e Convergence) Markdown(plotPath string) string {
	var b strings.Builder
	seeds := map[int64]bool{}
	for _, r := range e.Runs {
		seeds[r.Seed] = true
	}
	fmt.Fprintf(&b, "Measured %s on %s: %d seed(s) of each schedule. %s\n\n", e.Date, e.Machine, len(seeds), e.Setup)
	fmt.Fprintf(&b, "```\n%s\n```\n\n", e.Command)
	var cases [][]string
	for _, c := range e.Cases {
		params := ""
		if c.ModelParams != "" {
			params += fmt.Sprintf(" `--model_params=%q`", c.ModelParams)
		}
		if c.Optimizer != "" {
			params += fmt.Sprintf(" `--optimizer=%s`", c.Optimizer)
		}
		cases = append(cases, []string{c.Name, "`" + c.Model + "`" + params, c.Data,
			fmt.Sprintf("%d × %d", c.Epochs, c.TrainRecords), fmt.Sprint(c.TestRecords), fmt.Sprint(c.Minibatch),
			fmt.Sprintf("every %d tasks", c.FlipTasks)})
	}
	b.WriteString(Table([]string{"case", "model", "data", "epochs × records", "test records", "minibatch", "4 ↔ 8 flips"}, cases))
	b.WriteString("\n")
	var rows [][]string
	for _, c := range e.Cases {
		for _, s := range ConvergenceSchedules {
			runs := e.runsOf(c.Name, s)
			if len(runs) == 0 {
				continue
			}
			exact, flips, pre, rel, wall := true, []float64{}, []float64{}, []float64{}, []float64{}
			for _, r := range runs {
				exact = exact && r.LedgerExact
				flips = append(flips, float64(r.Flips))
				pre = append(pre, float64(r.Preempted))
				rel = append(rel, float64(r.Relaunched))
				wall = append(wall, r.Wall)
			}
			ledger := "yes"
			if !exact {
				ledger = "**no**"
			}
			rows = append(rows, []string{c.Name, s,
				SpreadOf(finals(runs, metricOf)).Format("%.4f"), SpreadOf(finals(runs, lossOf)).Format("%.4f"),
				SpreadOf(flips).Format("%.0f"), SpreadOf(pre).Format("%.0f"), SpreadOf(rel).Format("%.0f"),
				SpreadOf(wall).Format("%.0f"), ledger})
		}
	}
	b.WriteString(Table([]string{"case", "workers", "final test metric, mean (min–max)", "final test loss", "room changes",
		"workers preempted", "relaunched", "wall s", "every record once per epoch"}, rows))
	b.WriteString("\n")
	var verdicts [][]string
	for _, c := range e.Cases {
		band := e.Band(c.Name)
		meanIn, in, n := e.Verdict(c.Name)
		ok := "**no**"
		if meanIn {
			ok = "yes"
		}
		ceiling := ""
		if c.Ceiling > 0 {
			ceiling = fmt.Sprintf("%.4f", c.Ceiling)
		}
		verdicts = append(verdicts, []string{c.Name, c.Metric,
			fmt.Sprintf("%.4f–%.4f", band.Min, band.Max),
			SpreadOf(finals(e.runsOf(c.Name, Changing), metricOf)).Format("%.4f"),
			ok, fmt.Sprintf("%d of %d", in, n), ceiling})
	}
	b.WriteString(Table([]string{"case", "metric", "fixed 4 and fixed 8: band of final", "4 ↔ 8: final",
		"mean inside the band", "runs inside", "ceiling (true probabilities)"}, verdicts))
	if e.Goal != "" {
		fmt.Fprintf(&b, "\nGoal: %s\n", e.Goal)
	}
	fmt.Fprintf(&b, "\n![test metric against records trained](%s)\n", plotPath)
	for _, n := range e.Notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	return b.String()
}

// curve is a schedule's metric over its seeds at each evaluation point:
// records trained, mean, min, max.
type curve struct {
	x, mean, lo, hi []float64
}

func (e Convergence) curve(c, s string) curve {
	at := map[int64][]float64{} // records → metric of each seed
	for _, r := range e.runsOf(c, s) {
		for _, p := range r.Points {
			at[p.Records] = append(at[p.Records], p.Metric)
		}
	}
	var xs []int64
	for x := range at {
		xs = append(xs, x)
	}
	slices.Sort(xs)
	var out curve
	for _, x := range xs {
		sp := SpreadOf(at[x])
		out.x = append(out.x, float64(x))
		out.mean, out.lo, out.hi = append(out.mean, sp.Mean), append(out.lo, sp.Min), append(out.hi, sp.Max)
	}
	return out
}

// Plot draws one panel per case: each schedule's test metric against the
// records trained, the mean over seeds as a line and their range shaded.
func (e Convergence) Plot(path string) error {
	if len(e.Cases) == 0 {
		return fmt.Errorf("plot %s: no cases", path)
	}
	var plots []*plot.Plot
	for _, c := range e.Cases {
		p := plot.New()
		p.Title.Text = c.Name
		p.X.Label.Text = "records trained"
		p.Y.Label.Text = "test " + c.Metric
		// Bottom right: the curves rise to the top right.
		p.Legend.Top, p.Legend.Left = false, false
		p.Legend.XOffs, p.Legend.YOffs = vg.Points(-4), vg.Points(4)
		p.Add(plotter.NewGrid())
		for i, s := range ConvergenceSchedules {
			cv := e.curve(c.Name, s)
			if len(cv.x) == 0 {
				continue
			}
			col := palette[i%len(palette)]
			var band plotter.XYs
			for j := range cv.x {
				band = append(band, plotter.XY{X: cv.x[j], Y: cv.hi[j]})
			}
			for j := len(cv.x) - 1; j >= 0; j-- {
				band = append(band, plotter.XY{X: cv.x[j], Y: cv.lo[j]})
			}
			if len(band) >= 3 {
				area, err := plotter.NewPolygon(band)
				if err != nil {
					return fmt.Errorf("plot %s: %w", path, err)
				}
				area.Color = color.NRGBA{R: col.R, G: col.G, B: col.B, A: 0x40}
				area.LineStyle.Width = 0
				p.Add(area)
			}
			var line plotter.XYs
			for j := range cv.x {
				line = append(line, plotter.XY{X: cv.x[j], Y: cv.mean[j]})
			}
			l, err := plotter.NewLine(line)
			if err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
			l.Color, l.Width = col, vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(s+" (mean, range over seeds)", l)
		}
		plots = append(plots, p)
	}
	return writePNG(path, plots)
}
