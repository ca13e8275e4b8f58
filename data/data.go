// Package data reads training records by random access over record ranges.
//
// The elastic master hands workers tasks of the form "records [start,end) of
// source X"; a worker opens X once with Open and serves each task with
// Source.Read, so no reader ever has to scan a file from the beginning to
// reach a task. Two formats are supported: IDX image files (the MNIST format,
// plain or gzipped, see OpenIDX) and CSV files (see OpenCSV).
//
// A record that cannot be decoded is not fatal: it is reported in
// Batch.Corrupt and skipped, so one bad line does not fail a whole task.
// Structural problems (I/O errors, truncated files, bad headers) are returned
// as errors naming the file and, where known, the record.
//
// All sources are safe for concurrent Read calls.
package data

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Batch holds decoded records [start,end) of a source, minus corrupt ones.
type Batch struct {
	N            int            // records in the batch (valid ones)
	FeatureShape []int          // per record, e.g. [28,28,1]
	Features     []float32      // N*prod(FeatureShape), row-major, record after record
	Labels       []int32        // N
	Index        []int64        // N: the source record number of each valid record (keeps input order for prediction)
	Corrupt      []*RecordError // records in the range that could not be decoded (skipped, counted by the caller)
}

// RecordError reports a problem with one record of a source. Record is the
// zero-based record number as used by Source.Read (for CSV files with a
// header, the header is not counted).
type RecordError struct {
	Source string // the name the source was opened with
	Record int64
	Err    error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("%s: record %d: %v", e.Source, e.Record, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// Source is a record file with random access by record range.
type Source interface {
	Name() string // the path/URI it was opened with
	Len() int64   // number of records
	FeatureShape() []int
	// Read decodes records [start,end); it needs 0 <= start <= end <= Len().
	// Records that cannot be decoded go to Batch.Corrupt; structural
	// problems (I/O, truncation) are returned as an error naming the file.
	Read(start, end int64) (*Batch, error)
	Close() error
}

// ErrOutOfRange is wrapped by Read and ReadRows errors for a record range
// that is not within [0, Len()].
var ErrOutOfRange = errors.New("record range out of bounds")

// ErrUnsupportedFormat is wrapped by Open errors for a name that matches no
// supported format.
var ErrUnsupportedFormat = errors.New("unsupported data format")

// Compile-time checks that the readers satisfy Source.
var (
	_ Source = (*IDX)(nil)
	_ Source = (*CSV)(nil)
)

// supportedFormats is appended to Open errors so the user sees what would work.
const supportedFormats = `supported: IDX images files whose name contains "idx3-ubyte", ` +
	`plain or gzipped (e.g. MNIST train-images-idx3-ubyte.gz; the labels file is found by name); ` +
	`CSV files named *.csv`

// Open opens a source, picking the reader from the file name: a name
// containing "idx3-ubyte" (plain or .gz) is an IDX images file read with
// OpenIDX; a name ending in ".csv" is read with OpenCSV and default options
// (no header, label in the last column, comma-separated). Only local paths
// are supported.
func Open(uri string) (Source, error) {
	if i := strings.Index(uri, "://"); i > 0 {
		return nil, fmt.Errorf("data: open %s: scheme %q: %w (%s; local paths only)",
			uri, uri[:i], ErrUnsupportedFormat, supportedFormats)
	}
	base := filepath.Base(uri)
	switch {
	case strings.Contains(base, "idx3-ubyte"):
		x, err := OpenIDX(uri)
		if err != nil {
			return nil, err // not x: a nil *IDX in a Source would not be == nil
		}
		return x, nil
	case strings.EqualFold(filepath.Ext(base), ".csv"):
		c, err := OpenCSV(uri, CSVOptions{})
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("data: open %s: %w (%s)", uri, ErrUnsupportedFormat, supportedFormats)
}

// checkRange validates a record range against a source of n records.
func checkRange(name string, start, end, n int64) error {
	if start < 0 || start > end || end > n {
		return fmt.Errorf("%s: records [%d,%d): %w (have %d records)", name, start, end, ErrOutOfRange, n)
	}
	return nil
}
