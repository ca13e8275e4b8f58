package bench

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The convergence experiment (TestConvergence) trains the same AllReduce
// job under several schedules of how many workers the cluster has room
// for, epoch by epoch, over several seeds; what follows turns its runs into
// the table and the plot of bench/RESULTS.md.

// ConvergenceRun is one job of the experiment.
type ConvergenceRun struct {
	Schedule string `json:"schedule"`
	// Room is the workers the cluster had room for in each epoch.
	Room []int `json:"room"`
	Seed int64 `json:"seed"`
	// Epochs are the test metrics after each epoch and its ledger.
	Epochs           []ConvergenceEpoch `json:"epochs"`
	WallSeconds      float64            `json:"wall_seconds"`
	TrainingSeconds  float64            `json:"training_seconds"`
	RecordsPerSecond float64            `json:"records_per_second"`
	ModelVersion     int64              `json:"model_version"`
	// SwitchVersions are the model versions at which the room changed.
	SwitchVersions   []int64 `json:"switch_versions,omitempty"`
	WorkersLaunched  int     `json:"workers_launched"`
	WorkersPreempted int     `json:"workers_preempted"`
	RingVersions     int64   `json:"ring_versions"`
	MaxWorldSize     int     `json:"max_world_size"`
}

// ConvergenceEpoch is the evaluation that followed one epoch (queued at
// model version EvalVersion, computed on versions MinVersionUsed to
// MaxVersionUsed) and the epoch's exactly-once ledger.
type ConvergenceEpoch struct {
	Epoch          int     `json:"epoch"`
	Accuracy       float64 `json:"accuracy"`
	Loss           float64 `json:"loss"`
	EvalVersion    int64   `json:"eval_version"`
	MinVersionUsed int64   `json:"min_version_used"`
	MaxVersionUsed int64   `json:"max_version_used"`
	Records        int64   `json:"records"`
	RecordsTrained int64   `json:"records_trained"`
	TrainedTwice   int64   `json:"records_trained_twice"`
	Missed         int64   `json:"records_missed"`
}

// Spread is a quantity over seeds: its mean and range.
type Spread struct {
	Mean, Min, Max float64
	N              int
}

// Width is max - min: what the seeds alone move the quantity by.
func (s Spread) Width() float64 { return s.Max - s.Min }

func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{Mean: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s := Spread{Min: xs[0], Max: xs[0], N: len(xs)}
	sum := 0.0
	for _, x := range xs {
		sum += x
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	s.Mean = sum / float64(len(xs))
	return s
}

// ScheduleStats is one schedule over its seeds, epoch by epoch.
type ScheduleStats struct {
	Schedule string
	Room     []int
	Seeds    []int64
	Accuracy []Spread // by epoch
	Loss     []Spread
	// EvalVersions are the lowest and highest model versions evaluated
	// after each epoch, over the seeds (a pass is queued at a multiple of
	// the steps of an epoch; its tasks run on the versions of their turn).
	EvalVersions [][2]int64
	// LedgerExact: every epoch of every seed trained each record once.
	LedgerExact bool
	Wall        Spread
}

// SummarizeConvergence groups runs by schedule (in the order the schedules
// first appear) and takes each epoch's spread over the seeds.
func SummarizeConvergence(runs []ConvergenceRun) []ScheduleStats {
	var out []ScheduleStats
	for _, r := range runs {
		i := slices.IndexFunc(out, func(s ScheduleStats) bool { return s.Schedule == r.Schedule })
		if i < 0 {
			out = append(out, ScheduleStats{Schedule: r.Schedule, Room: r.Room, LedgerExact: true})
			i = len(out) - 1
		}
		out[i].Seeds = append(out[i].Seeds, r.Seed)
	}
	for i := range out {
		s := &out[i]
		var mine []ConvergenceRun
		for _, r := range runs {
			if r.Schedule == s.Schedule {
				mine = append(mine, r)
			}
		}
		epochs := 0
		var walls []float64
		for _, r := range mine {
			epochs = max(epochs, len(r.Epochs))
			walls = append(walls, r.WallSeconds)
		}
		s.Wall = spreadOf(walls)
		for e := range epochs {
			var acc, loss []float64
			for _, r := range mine {
				if e >= len(r.Epochs) {
					s.LedgerExact = false
					continue
				}
				ep := r.Epochs[e]
				acc, loss = append(acc, ep.Accuracy), append(loss, ep.Loss)
				if ep.RecordsTrained != ep.Records || ep.TrainedTwice != 0 || ep.Missed != 0 {
					s.LedgerExact = false
				}
			}
			s.Accuracy = append(s.Accuracy, spreadOf(acc))
			s.Loss = append(s.Loss, spreadOf(loss))
			s.EvalVersions = append(s.EvalVersions, versionRange(mine, e))
		}
	}
	return out
}

func roomString(room []int) string {
	parts := make([]string, len(room))
	for i, r := range room {
		parts[i] = fmt.Sprint(r)
	}
	return strings.Join(parts, "→")
}

// versionRange is the lowest and highest model version evaluated after
// epoch index e over runs.
func versionRange(runs []ConvergenceRun, e int) [2]int64 {
	r := [2]int64{math.MaxInt64, math.MinInt64}
	for _, run := range runs {
		if e < len(run.Epochs) {
			r[0] = min(r[0], run.Epochs[e].MinVersionUsed)
			r[1] = max(r[1], run.Epochs[e].MaxVersionUsed)
		}
	}
	return r
}

// ConvergenceTable renders stats as a Markdown table: one row per schedule
// and epoch, each figure as the mean over seeds and its range.
func ConvergenceTable(stats []ScheduleStats) string {
	var b strings.Builder
	b.WriteString("| schedule | workers | epoch | test accuracy, mean (min–max) | test loss, mean (min–max) | model versions evaluated | ledger exact |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, s := range stats {
		for e := range s.Accuracy {
			room := "?"
			if e < len(s.Room) {
				room = fmt.Sprint(s.Room[e])
			}
			a, l := s.Accuracy[e], s.Loss[e]
			exact := "yes"
			if !s.LedgerExact {
				exact = "**no**"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %.4f (%.4f–%.4f) | %.4f (%.4f–%.4f) | %s | %s |\n",
				s.Schedule, room, e+1, a.Mean, a.Min, a.Max, l.Mean, l.Min, l.Max, fmt.Sprintf("%d–%d", s.EvalVersions[e][0], s.EvalVersions[e][1]), exact)
		}
	}
	b.WriteString("\n| schedule | seeds | wall time per job, mean (min–max) |\n| --- | --- | --- |\n")
	for _, s := range stats {
		seeds := make([]string, len(s.Seeds))
		for i, seed := range s.Seeds {
			seeds[i] = fmt.Sprint(seed)
		}
		fmt.Fprintf(&b, "| %s (%s) | %s | %.0f s (%.0f–%.0f) |\n", s.Schedule, roomString(s.Room),
			strings.Join(seeds, ", "), s.Wall.Mean, s.Wall.Min, s.Wall.Max)
	}
	return b.String()
}

// PlotConvergence draws test accuracy against epoch, one line per schedule
// (the mean over seeds) with the seeds' range as error bars, into a PNG.
func PlotConvergence(stats []ScheduleStats, title, path string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "epoch"
	p.Y.Label.Text = "test accuracy (mean over seeds, bars: min–max)"
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs = -vg.Points(6) // keep the glyphs off the edge
	p.Add(plotter.NewGrid())
	colors := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	epochs := 0
	for i, s := range stats {
		epochs = max(epochs, len(s.Accuracy))
		// Schedules side by side around each epoch, so the bars do not hide
		// one another.
		dx := (float64(i) - float64(len(stats)-1)/2) * 0.05
		pts := make(plotter.XYs, len(s.Accuracy))
		errs := make(plotter.YErrors, len(s.Accuracy))
		for e, a := range s.Accuracy {
			pts[e] = plotter.XY{X: float64(e+1) + dx, Y: a.Mean}
			errs[e] = struct{ Low, High float64 }{a.Mean - a.Min, a.Max - a.Mean}
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.Schedule, err)
		}
		c := colors[i%len(colors)]
		line.Color, points.Color = c, c
		points.Shape = draw.CircleGlyph{}
		bars, err := plotter.NewYErrorBars(struct {
			plotter.XYer
			plotter.YErrorer
		}{pts, errs})
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.Schedule, err)
		}
		bars.Color = c
		bars.Width = vg.Points(1)
		bars.CapWidth = vg.Points(6)
		p.Add(line, points, bars)
		p.Legend.Add(fmt.Sprintf("%s (workers %s)", s.Schedule, roomString(s.Room)), line, points)
	}
	ticks := make([]plot.Tick, epochs)
	for e := range ticks {
		ticks[e] = plot.Tick{Value: float64(e + 1), Label: fmt.Sprint(e + 1)}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = 0.7, float64(epochs)+0.3
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("save plot %s: %w", path, err)
	}
	return nil
}
