package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fakeRun(schedule string, room []int, seed int64, acc ...float64) ConvergenceRun {
	r := ConvergenceRun{Schedule: schedule, Room: room, Seed: seed, WallSeconds: 100 + float64(seed)}
	for i, a := range acc {
		r.Epochs = append(r.Epochs, ConvergenceEpoch{Epoch: i + 1, Accuracy: a, Loss: 1 - a, EvalVersion: int64(235 * (i + 1)),
			MinVersionUsed: int64(235*(i+1) + 2), MaxVersionUsed: int64(235*(i+1) + 5),
			Records: 60000, RecordsTrained: 60000})
	}
	return r
}

func TestSummarizeConvergence(t *testing.T) {
	runs := []ConvergenceRun{
		fakeRun("fixed 4", []int{4, 4}, 1, 0.80, 0.85),
		fakeRun("changing", []int{2, 4}, 1, 0.79, 0.86),
		fakeRun("fixed 4", []int{4, 4}, 2, 0.82, 0.87),
	}
	runs[1].Epochs[1].TrainedTwice = 64
	stats := SummarizeConvergence(runs)
	if len(stats) != 2 || stats[0].Schedule != "fixed 4" || stats[1].Schedule != "changing" {
		t.Fatalf("schedules %+v, want fixed 4 then changing", stats)
	}
	a := stats[0].Accuracy[1]
	if math.Abs(a.Mean-0.86) > 1e-9 || a.Min != 0.85 || a.Max != 0.87 || a.N != 2 || math.Abs(a.Width()-0.02) > 1e-9 {
		t.Errorf("fixed 4, epoch 2: %+v, want mean 0.86 over 0.85–0.87", a)
	}
	if !stats[0].LedgerExact || stats[1].LedgerExact {
		t.Errorf("ledger exact: %v, %v; want true, false", stats[0].LedgerExact, stats[1].LedgerExact)
	}
	table := ConvergenceTable(stats)
	for _, want := range []string{
		"| fixed 4 | 4 | 2 | 0.8600 (0.8500–0.8700) | 0.1400 (0.1300–0.1500) | 472–475 | yes |",
		"| changing | 4 | 2 | 0.8600 (0.8600–0.8600) |",
		"**no**",
		"| fixed 4 (4→4) | 1, 2 | 102 s (101–102) |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestPlotConvergence(t *testing.T) {
	stats := SummarizeConvergence([]ConvergenceRun{
		fakeRun("fixed 4", []int{4, 4, 4}, 1, 0.80, 0.85, 0.87),
		fakeRun("fixed 4", []int{4, 4, 4}, 2, 0.81, 0.86, 0.88),
		fakeRun("changing", []int{2, 4, 2}, 1, 0.79, 0.86, 0.875),
	})
	path := filepath.Join(t.TempDir(), "c.png")
	if err := PlotConvergence(stats, "test", path); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte("\x89PNG")) {
		t.Errorf("%s is not a PNG", path)
	}
}
