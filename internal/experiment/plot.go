package experiment

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Colors of the series, in order.
var palette = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
	{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
}

// maxLegend: runs of more series than this (many jobs) get no legend
// entry per series; their colours repeat.
const maxLegend = 6

// Panel is one plot of a figure: a run's timeline and its title.
type Panel struct {
	Title string
	Run   Run
}

// PlotHeld draws, one panel under the other, the CPUs each series of a
// run (its jobs, or services and training) held over time, stacked,
// against the capacity: time in the seed's seconds (ours × scale).
func PlotHeld(path string, panels []Panel, capacity, scale float64) error {
	if len(panels) == 0 {
		return fmt.Errorf("plot %s: no panels", path)
	}
	end := 0.0
	for _, p := range panels {
		end = max(end, p.Run.Makespan()*scale)
	}
	var plots []*plot.Plot
	for _, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.Title
		p.X.Label.Text = "time (s)"
		if scale != 1 {
			p.X.Label.Text = "time (s, scaled to the seed's)"
		}
		p.Y.Label.Text = "CPUs requested"
		p.X.Min, p.X.Max = 0, end*1.02
		p.Y.Min, p.Y.Max = 0, capacity*1.3 // room for the legend
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
		r := pn.Run
		// Stacked step areas, the first job at the bottom.
		base := make([]float64, len(r.Timeline))
		for ji, name := range r.Series {
			var poly plotter.XYs
			var top plotter.XYs
			for i, s := range r.Timeline {
				next := r.Makespan()
				if i+1 < len(r.Timeline) {
					next = r.Timeline[i+1].T
				}
				v := 0.0
				if ji < len(s.CPU) {
					v = s.CPU[ji]
				}
				top = append(top, plotter.XY{X: s.T * scale, Y: base[i] + v}, plotter.XY{X: next * scale, Y: base[i] + v})
			}
			poly = append(poly, top...)
			for i := len(r.Timeline) - 1; i >= 0; i-- {
				next := r.Makespan()
				if i+1 < len(r.Timeline) {
					next = r.Timeline[i+1].T
				}
				poly = append(poly, plotter.XY{X: next * scale, Y: base[i]}, plotter.XY{X: r.Timeline[i].T * scale, Y: base[i]})
			}
			for i, s := range r.Timeline {
				if ji < len(s.CPU) {
					base[i] += s.CPU[ji]
				}
			}
			if len(poly) < 3 {
				continue
			}
			area, err := plotter.NewPolygon(poly)
			if err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
			c := palette[ji%len(palette)]
			area.Color = color.NRGBA{R: c.R, G: c.G, B: c.B, A: 0xc0}
			area.LineStyle.Width = 0
			p.Add(area)
			if len(r.Series) <= maxLegend {
				p.Legend.Add(name, area)
			}
		}
		capLine, err := plotter.NewLine(plotter.XYs{{X: 0, Y: capacity}, {X: end * 1.02, Y: capacity}})
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		capLine.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(capLine)
		p.Legend.Add(fmt.Sprintf("capacity (%.0f CPUs)", capacity), capLine)
		plots = append(plots, p)
	}
	return writePNG(path, plots)
}

// writePNG draws plots one under the other into a PNG file at path.
func writePNG(path string, plots []*plot.Plot) error {
	const w, h = 7 * vg.Inch, 3.2 * vg.Inch
	img := vgimg.New(w, h*vg.Length(len(plots)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Points(6)}
	for i, p := range plots {
		p.Draw(tiles.At(dc, 0, i))
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}
