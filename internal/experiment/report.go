package experiment

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Report is an experiment's data that renders itself: its section of
// docs/experiments.md and its plot.
type Report interface {
	// Markdown is the section; plot is the figure's path from the
	// document.
	Markdown(plot string) string
	// Plot draws the figure as a PNG file at path.
	Plot(path string) error
}

// heldReport is a Report whose figure is the CPUs held over time
// (PlotHeld).
type heldReport interface {
	// Panels are what the plot shows, one under the other.
	Panels() []Panel
	// Capacity is the cluster's CPUs (the plot's dashed line).
	Capacity() float64
	// TimeScale converts the plot's time axis (1: our seconds).
	TimeScale() float64
}

func plotHeld(path string, r heldReport) error {
	return PlotHeld(path, r.Panels(), r.Capacity(), r.TimeScale())
}

// Plot draws experiment 1's CPUs held over time.
func (g GangVsElastic) Plot(path string) error { return plotHeld(path, g) }

// Plot draws experiment 2's CPUs held over time.
func (e BesideServices) Plot(path string) error { return plotHeld(path, e) }

// Plot draws experiment 4's CPUs held over time.
func (e SharedCluster) Plot(path string) error { return plotHeld(path, e) }

// reports make an empty report of each experiment, by name (the base of
// its files).
var reports = map[string]func() Report{
	"gang-vs-elastic": func() Report { return &GangVsElastic{} },
	"beside-services": func() Report { return &BesideServices{} },
	"shared-cluster":  func() Report { return &SharedCluster{} },
	"convergence":     func() Report { return &Convergence{} },
	// Experiment 5: experiment 1's report with AllReduce jobs.
	"allreduce-gang-vs-elastic": func() Report { return &GangVsElastic{} },
}

// Write writes report r of experiment name: its data as dir/name.json,
// its plot as dir/name.png, and its section into the document doc (the
// plot referenced from doc's folder). It returns the section.
func Write(doc, dir, name string, r Report) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("experiment %s: %w", name, err)
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return "", fmt.Errorf("experiment %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("experiment %s: %w", name, err)
	}
	png := filepath.Join(dir, name+".png")
	if err := r.Plot(png); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(filepath.Dir(doc), png)
	if err != nil {
		return "", fmt.Errorf("experiment %s: %w", name, err)
	}
	section := r.Markdown(filepath.ToSlash(rel))
	old, err := os.ReadFile(doc)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("experiment %s: %w", name, err)
	}
	updated, err := UpdateSection(old, name, section)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(doc, updated, 0o644); err != nil {
		return "", fmt.Errorf("experiment %s: %w", name, err)
	}
	return section, nil
}

// Regenerate rewrites the plot and the section of every experiment whose
// data is in dir (dir/NAME.json, as Write left it) from that data: a
// change to how reports look needs no new runs.
func Regenerate(doc, dir string) (names []string, err error) {
	for _, name := range sortedKeys(reports) {
		b, err := os.ReadFile(filepath.Join(dir, name+".json"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return names, fmt.Errorf("experiment %s: %w", name, err)
		}
		r := reports[name]()
		if err := json.Unmarshal(b, r); err != nil {
			return names, fmt.Errorf("experiment %s: %s: %w", name, filepath.Join(dir, name+".json"), err)
		}
		if _, err := Write(doc, dir, name, r); err != nil {
			return names, err
		}
		names = append(names, name)
	}
	return names, nil
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// run0Panels is a panel for run 0 of each mode, in order, titled by
// titles.
func run0Panels(runs []Run, modes, titles []string) []Panel {
	var out []Panel
	for i, mode := range modes {
		for _, r := range runs {
			if r.Mode == mode && r.Index == 0 {
				out = append(out, Panel{Title: titles[i] + " (run 0)", Run: r})
			}
		}
	}
	return out
}

// Panels of experiment 1: gang above, elastic below.
func (g GangVsElastic) Panels() []Panel {
	return run0Panels(g.Runs, []string{"gang", "elastic"}, []string{"gang: all or nothing (--gang)", "elastic"})
}

// TimeScale of experiment 1: the seed's seconds.
func (g GangVsElastic) TimeScale() float64 { return g.Scale }

// Panels of experiment 2: fixed-size above, elastic below.
func (e BesideServices) Panels() []Panel {
	return run0Panels(e.Runs, []string{"fixed", "elastic"}, []string{"fixed-size training", "elastic training"})
}

// TimeScale of experiment 2: our seconds.
func (e BesideServices) TimeScale() float64 { return 1 }

// Panels of experiment 4: first come first served above, elastic below.
func (e SharedCluster) Panels() []Panel {
	titles := map[string]string{"fifo": "fixed-size, first come first served (--gang)", "elastic": "elastic, sized by the autoscaler",
		"fair": "elastic, max-min fair (--policy=fair)", "remaining": "elastic, by remaining work (--policy=remaining)"}
	var ts []string
	for _, m := range e.modes() {
		ts = append(ts, cmp.Or(titles[m], m))
	}
	return run0Panels(e.Runs, e.modes(), ts)
}

// TimeScale of experiment 4: our seconds.
func (e SharedCluster) TimeScale() float64 { return 1 }
