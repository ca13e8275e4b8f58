package master

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"elasticdl/internal/atomicfile"
	"elasticdl/internal/master/job"
)

// predictionFile writes a predict job's CSV, "index,class,p0,...,pK-1",
// with the rows the core releases in input order. Rows go to a temp file
// beside the output, moved over it at the end (commit) so that a reader
// never sees a partial file; a failed job removes it (abort).
//
// A run's temp file (runID set) outlives the commit, linked to the output
// as well, until the state that says the job succeeded is durable
// (release): a master that dies in between leaves the job in phase
// Saving, and the next one commits again from the same file.
type predictionFile struct {
	path       string
	remote     string // s3://...: path is a local stand-in, uploaded at commit
	partial    string // the run's temp file, kept until release; "" without a runID
	tmp        *os.File
	w          *bufio.Writer
	numClasses int
	written    int64 // records written, for commit's last check
	buf        []byte
	closed     bool // committed or aborted
}

// newPredictionFile starts the CSV of path. With a runID the temp file has a
// fixed name (a master that takes over finds it), and resume >= 0 takes
// over the file of a master that died: it keeps the header and the first
// resume rows (what the persisted state says were written) and drops any
// written after.
func newPredictionFile(path string, numClasses int, runID string, resume int64) (*predictionFile, error) {
	if err := checkOutputDir(path); err != nil {
		return nil, err
	}
	pf := &predictionFile{path: path, numClasses: numClasses}
	if runID != "" {
		pf.partial = partialPredictions(path, runID)
	}
	if pf.partial != "" && resume >= 0 {
		if err := pf.reopen(pf.partial, resume); err != nil {
			return nil, fmt.Errorf("--prediction_outputs: resume: %w", err)
		}
		return pf, nil
	}
	var f *os.File
	var err error
	if pf.partial != "" {
		f, err = os.OpenFile(pf.partial, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	} else {
		f, err = os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	}
	if err != nil {
		return nil, fmt.Errorf("--prediction_outputs: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("--prediction_outputs: %w", err)
	}
	pf.tmp, pf.w = f, bufio.NewWriterSize(f, 1<<20)
	header := "index,class"
	for k := 0; k < numClasses; k++ {
		header += ",p" + strconv.Itoa(k)
	}
	if _, err := pf.w.WriteString(header + "\n"); err != nil {
		pf.abort()
		return nil, fmt.Errorf("--prediction_outputs: %w", err)
	}
	return pf, nil
}

// partialPredictions is the temp file of run runID's output path.
func partialPredictions(path, runID string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+runID+".partial")
}

// removeLeftoverPredictions removes run runID's temp file, left behind by
// a master that died after the job had ended (its state says so).
func removeLeftoverPredictions(path, runID string) error {
	if err := removeIfThere(partialPredictions(path, runID)); err != nil {
		return fmt.Errorf("--prediction_outputs: %w", err)
	}
	return nil
}

// removeIfThere removes name, which may not exist.
func removeIfThere(name string) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// reopen takes over name, keeping its header and first rows rows.
func (pf *predictionFile) reopen(name string, rows int64) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	var offset int64
	for line := int64(0); line <= rows; line++ { // the header, then rows
		b, err := r.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) {
			var more []byte
			more, err = r.ReadSlice('\n')
			b = append(b, more...)
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("%s has %d rows, the job's state says %d were written", name, max(line-1, 0), rows)
		}
		offset += int64(len(b))
	}
	if err := f.Truncate(offset); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		f.Close()
		return err
	}
	pf.tmp, pf.w, pf.written = f, bufio.NewWriterSize(f, 1<<20), rows
	return nil
}

// sync makes the rows written so far durable (before the state that
// counts them is persisted).
func (pf *predictionFile) sync() error {
	if pf.closed {
		return nil
	}
	if err := pf.w.Flush(); err != nil {
		return err
	}
	return pf.tmp.Sync()
}

// write appends one task's rows; the core gives them in order.
func (pf *predictionFile) write(r *job.PredictionRows) error {
	if r.Start != pf.written {
		return fmt.Errorf("rows from record %d, expected %d", r.Start, pf.written)
	}
	for i := range r.Class {
		buf := strconv.AppendInt(pf.buf[:0], r.Start+int64(i), 10)
		buf = append(buf, ',')
		if r.Probs[i] == nil {
			for k := 0; k < pf.numClasses; k++ {
				buf = append(buf, ',')
			}
		} else {
			buf = strconv.AppendInt(buf, int64(r.Class[i]), 10)
			for _, p := range r.Probs[i] {
				buf = append(buf, ',')
				if math.IsNaN(float64(p)) {
					buf = append(buf, "nan"...)
					continue
				}
				buf = strconv.AppendFloat(buf, float64(p), 'g', -1, 32)
			}
		}
		buf = append(buf, '\n')
		pf.buf = buf
		if _, err := pf.w.Write(buf); err != nil {
			return err
		}
	}
	pf.written = r.End
	return nil
}

// commit moves the file into place once every record of total was
// written.
func (pf *predictionFile) commit(total int64) error {
	if pf.written != total {
		pf.abort()
		return fmt.Errorf("only records [0,%d) of %d were predicted", pf.written, total)
	}
	pf.closed = true
	err := pf.w.Flush()
	if err == nil {
		err = pf.tmp.Sync()
	}
	if cerr := pf.tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(pf.tmp.Name())
		return err
	}
	if err := pf.moveIntoPlace(); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(filepath.Dir(pf.path)); err != nil {
		return err
	}
	return pf.upload()
}

// moveIntoPlace puts the temp file over the output. A run's temp file is
// kept as well (through a second name, moved over the output) for a commit
// again until release, except on a file system without hard links.
func (pf *predictionFile) moveIntoPlace() error {
	if pf.partial == "" {
		return os.Rename(pf.tmp.Name(), pf.path)
	}
	second := pf.partial + ".commit"
	if err := removeIfThere(second); err != nil {
		return err
	}
	if err := os.Link(pf.partial, second); err != nil {
		return os.Rename(pf.partial, pf.path)
	}
	err := os.Rename(second, pf.path)
	// Left where the output already was the temp file (a commit again):
	// rename does nothing then.
	os.Remove(second)
	return err
}

// release removes the run's temp file once the output is committed and
// the state that says so is durable.
func (pf *predictionFile) release() error {
	if pf.partial == "" {
		return nil
	}
	if err := removeIfThere(pf.partial); err != nil {
		return fmt.Errorf("--prediction_outputs: %w", err)
	}
	return nil
}

// abort removes the temp file.
func (pf *predictionFile) abort() {
	pf.closed = true
	pf.tmp.Close()
	os.Remove(pf.tmp.Name())
}
