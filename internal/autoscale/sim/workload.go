package sim

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// Curve is a job's measured throughput at some worker counts.
type Curve struct {
	Workers []int     // increasing
	Rate    []float64 // records/s at Workers[i]
}

// Max is the most workers the curve was measured at.
func (c Curve) Max() int { return c.Workers[len(c.Workers)-1] }

// Throughput is records/s at w workers: linear between measured counts,
// 0 below one worker, the largest count's beyond it.
func (c Curve) Throughput(w int) float64 {
	if w < 1 || len(c.Workers) == 0 {
		return 0
	}
	i, found := slices.BinarySearch(c.Workers, w)
	switch {
	case found:
		return c.Rate[i]
	case i == 0:
		return c.Rate[0] * float64(w) / float64(c.Workers[0])
	case i == len(c.Workers):
		return c.Rate[i-1]
	}
	x0, x1 := float64(c.Workers[i-1]), float64(c.Workers[i])
	return c.Rate[i-1] + (float64(w)-x0)/(x1-x0)*(c.Rate[i]-c.Rate[i-1])
}

// Job is one job of a trace.
type Job struct {
	Name    string
	Arrival float64 // seconds from the trace's start
	// Records is its total work; Curve its speed.
	Records float64
	Curve   Curve
	// Gang is the workers it asks for when it is not elastic (the
	// trace's own size), at most Curve.Max().
	Gang int
}

// Workload is a named trace: its jobs by arrival.
type Workload struct {
	Name string
	Jobs []Job
}

// LoadDir loads the workloads of a directory laid out as testdata
// (jobs.csv and models.csv).
func LoadDir(dir string) ([]Workload, error) {
	jobs, err := os.Open(filepath.Join(dir, "jobs.csv"))
	if err != nil {
		return nil, err
	}
	defer jobs.Close()
	models, err := os.Open(filepath.Join(dir, "models.csv"))
	if err != nil {
		return nil, err
	}
	defer models.Close()
	ws, err := Load(jobs, models)
	if err != nil {
		return nil, fmt.Errorf("workloads in %s: %w", dir, err)
	}
	return ws, nil
}

// Load reads workloads from testdata's jobs.csv (workload, name, time,
// model, workers, batch) and models.csv (model, batch, records, workers,
// records_per_s): see testdata/README.md.
func Load(jobsCSV, modelsCSV io.Reader) ([]Workload, error) {
	models, err := readRows(modelsCSV, 5)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	type model struct {
		records float64
		curve   Curve
	}
	byKey := map[string]*model{}
	for _, r := range models {
		key := r[0] + "/" + r[1]
		m := byKey[key]
		if m == nil {
			m = &model{}
			byKey[key] = m
		}
		recs, e1 := strconv.ParseFloat(r[2], 64)
		w, e2 := strconv.Atoi(r[3])
		rate, e3 := strconv.ParseFloat(r[4], 64)
		if err := cmp.Or(e1, e2, e3); err != nil {
			return nil, fmt.Errorf("models row %v: %w", r, err)
		}
		m.records = recs
		m.curve.Workers = append(m.curve.Workers, w)
		m.curve.Rate = append(m.curve.Rate, rate)
	}
	rows, err := readRows(jobsCSV, 6)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	var out []Workload
	for _, r := range rows {
		m := byKey[r[3]+"/"+r[5]]
		if m == nil {
			return nil, fmt.Errorf("jobs row %v: no model %s at batch %s", r, r[3], r[5])
		}
		at, e1 := strconv.ParseFloat(r[2], 64)
		gang, e2 := strconv.Atoi(r[4])
		if err := cmp.Or(e1, e2); err != nil {
			return nil, fmt.Errorf("jobs row %v: %w", r, err)
		}
		if len(out) == 0 || out[len(out)-1].Name != r[0] {
			out = append(out, Workload{Name: r[0]})
		}
		w := &out[len(out)-1]
		w.Jobs = append(w.Jobs, Job{Name: r[1], Arrival: at, Records: m.records, Curve: m.curve,
			Gang: max(1, min(gang, m.curve.Max()))})
	}
	for i := range out {
		slices.SortStableFunc(out[i].Jobs, func(a, b Job) int { return cmp.Compare(a.Arrival, b.Arrival) })
	}
	return out, nil
}

// readRows is a CSV's rows but its header, each of n fields.
func readRows(r io.Reader, n int) ([][]string, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = n
	rows, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("reading CSV: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no header")
	}
	return rows[1:], nil
}
