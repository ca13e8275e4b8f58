package master

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"elasticdl/internal/master/task"
	"elasticdl/proto/masterpb"
)

// predictionWriter writes a predict job's CSV in input order: one row per
// record, "index,class,p0,...,pK-1". Tasks complete in any order; a task's
// rows are written as soon as every record before it is written, later
// ones are buffered until then. Rows go to a temp file beside the output,
// renamed over it at the end (commit) so that a reader never sees a
// partial file; a failed job removes it (abort).
//
// Rows come only from a task's accepted successful report (the dispatcher
// accepts one per task), so a task redone after a worker loss never gives
// duplicate rows.
type predictionWriter struct {
	path       string
	tmp        *os.File
	w          *bufio.Writer
	total      int64 // records in the data
	numClasses int
	next       int64 // first record not written yet
	pending    map[int64]*predictionRows
	corrupt    int64
	err        error
}

// predictionRows are the checked predictions of one task [start,end).
type predictionRows struct {
	start, end int64
	class      []int32     // by record - start; -1: no prediction (corrupt)
	probs      [][]float32 // by record - start; nil: no prediction
	corrupt    int64
}

func newPredictionWriter(path string, total int64, numClasses int) (*predictionWriter, error) {
	if err := checkOutputDir(path); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("--prediction_outputs: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("--prediction_outputs: %w", err)
	}
	pw := &predictionWriter{path: path, tmp: f, w: bufio.NewWriterSize(f, 1<<20), total: total, numClasses: numClasses, pending: map[int64]*predictionRows{}}
	header := "index,class"
	for k := 0; k < numClasses; k++ {
		header += ",p" + strconv.Itoa(k)
	}
	if _, err := pw.w.WriteString(header + "\n"); err != nil {
		pw.abort()
		return nil, fmt.Errorf("--prediction_outputs: %w", err)
	}
	return pw, nil
}

// check validates a task's predictions against the task: every record of
// [start,end) predicted once, or counted corrupt.
func (pw *predictionWriter) check(t task.Task, p *masterpb.Predictions, corrupt int64) (*predictionRows, error) {
	n := t.End - t.Start
	if p == nil {
		p = &masterpb.Predictions{}
	}
	m := len(p.RecordIndex)
	if len(p.PredictedClass) != m {
		return nil, fmt.Errorf("%d record indices, %d classes", m, len(p.PredictedClass))
	}
	if int(p.NumClasses) != pw.numClasses {
		return nil, fmt.Errorf("%d classes, the model has %d", p.NumClasses, pw.numClasses)
	}
	if len(p.Probabilities) != m*pw.numClasses {
		return nil, fmt.Errorf("%d probabilities for %d records of %d classes", len(p.Probabilities), m, pw.numClasses)
	}
	if int64(m)+corrupt != n {
		return nil, fmt.Errorf("%d predictions and %d corrupt records for a task of %d records", m, corrupt, n)
	}
	rows := &predictionRows{start: t.Start, end: t.End, class: make([]int32, n), probs: make([][]float32, n), corrupt: corrupt}
	for i := range rows.class {
		rows.class[i] = -1
	}
	for i, idx := range p.RecordIndex {
		if idx < t.Start || idx >= t.End {
			return nil, fmt.Errorf("record %d is outside the task's [%d,%d)", idx, t.Start, t.End)
		}
		j := idx - t.Start
		if rows.probs[j] != nil {
			return nil, fmt.Errorf("record %d predicted twice", idx)
		}
		c := p.PredictedClass[i]
		if c < 0 || int(c) >= pw.numClasses {
			return nil, fmt.Errorf("record %d: class %d out of range", idx, c)
		}
		rows.class[j] = c
		rows.probs[j] = p.Probabilities[i*pw.numClasses : (i+1)*pw.numClasses]
	}
	return rows, nil
}

// add takes one task's rows and writes what is now in order.
func (pw *predictionWriter) add(r *predictionRows) error {
	if pw.err != nil {
		return pw.err
	}
	if r.start < pw.next || pw.pending[r.start] != nil {
		// Cannot happen: the dispatcher accepts one report per task.
		return fmt.Errorf("records [%d,%d) predicted twice", r.start, r.end)
	}
	pw.pending[r.start] = r
	for {
		r, ok := pw.pending[pw.next]
		if !ok {
			return nil
		}
		delete(pw.pending, pw.next)
		if err := pw.write(r); err != nil {
			pw.err = err
			return err
		}
		pw.next = r.end
	}
}

func (pw *predictionWriter) write(r *predictionRows) error {
	buf := make([]byte, 0, 256)
	for i := range r.class {
		buf = buf[:0]
		buf = strconv.AppendInt(buf, r.start+int64(i), 10)
		buf = append(buf, ',')
		if r.probs[i] == nil {
			pw.corrupt++
			for k := 0; k < pw.numClasses; k++ {
				buf = append(buf, ',')
			}
		} else {
			buf = strconv.AppendInt(buf, int64(r.class[i]), 10)
			for _, p := range r.probs[i] {
				buf = append(buf, ',')
				if math.IsNaN(float64(p)) {
					buf = append(buf, "nan"...)
					continue
				}
				buf = strconv.AppendFloat(buf, float64(p), 'g', -1, 32)
			}
		}
		buf = append(buf, '\n')
		if _, err := pw.w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// commit checks that every record was written, then moves the file into
// place.
func (pw *predictionWriter) commit() error {
	if pw.err != nil {
		pw.abort()
		return pw.err
	}
	if pw.next != pw.total || len(pw.pending) > 0 {
		pw.abort()
		return fmt.Errorf("only records [0,%d) of %d were predicted", pw.next, pw.total)
	}
	err := pw.w.Flush()
	if err == nil {
		err = pw.tmp.Sync()
	}
	if cerr := pw.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(pw.tmp.Name(), pw.path)
	}
	if err != nil {
		os.Remove(pw.tmp.Name())
		return err
	}
	if d, err := os.Open(filepath.Dir(pw.path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// abort removes the temp file.
func (pw *predictionWriter) abort() {
	pw.tmp.Close()
	os.Remove(pw.tmp.Name())
}
