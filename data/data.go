// Package data reads training records by random access over record ranges.
//
// The elastic master hands workers tasks of the form "records [start,end) of
// source X"; a worker opens X once with Open and serves each task with
// Source.Read, so no reader ever has to scan a file from the beginning to
// reach a task. Sources: IDX image files (the MNIST format, plain or
// gzipped, see OpenIDX), CSV files (see OpenCSV), CSV files with a declared
// schema of numeric and categorical columns (see OpenCSVSchema and the
// csv:// URI of Open), a synthetic click-through-rate generator (see
// NewSyntheticCTR and the synthetic-ctr:// URI of Open), the snapshot
// of a database table's or query's rows (see OpenSQL and the sqlite://,
// postgres:// and mysql:// URIs of Open), and Parquet files or directories
// of them, their columns bound by name to a schema (see OpenParquet and the
// parquet:// URI of Open).
//
// Recommender sources also fill Batch.Categorical with one id per
// categorical field per record. The ids of all fields share one id space
// (each field's ids are offset or hashed apart, see CategoricalSource), so a
// model can look all of them up in a single embedding table.
//
// The default synthetic-ctr:// source (seed 1) labels about 25.3% of its
// records positive, and the best AUC any model can reach on it, the AUC of
// its hidden true click probability, is 0.801 (CeilingAUC over the first
// 1M records). See SyntheticCTR.
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
	"path"
	"path/filepath"
	"strings"

	"elasticdl/internal/sqldb"
)

// Batch holds decoded records [start,end) of a source, minus corrupt ones.
type Batch struct {
	N            int            // records in the batch (valid ones)
	FeatureShape []int          // per record, e.g. [28,28,1]
	Features     []float32      // N*prod(FeatureShape), row-major, record after record
	Labels       []int32        // N
	Index        []int64        // N: the source record number of each valid record (keeps input order for prediction)
	Corrupt      []*RecordError // records in the range that could not be decoded (skipped, counted by the caller)

	// Categorical ids, for sources that have them (CategoricalSource);
	// NumCategorical is 0 and Categorical nil for the others. Dense
	// features stay in Features.
	NumCategorical int     // ids per record: one per categorical field
	Categorical    []int64 // N*NumCategorical, row-major, record after record; all fields share one id space
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
	// The batch is the caller's: it shares no memory with the source or
	// with other batches (a worker reuses its buffers).
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

	_ CategoricalSource = (*SchemaCSV)(nil)
	_ CategoricalSource = (*SyntheticCTR)(nil)
	_ CategoricalSource = (*SQL)(nil)
	_ CategoricalSource = (*Parquet)(nil)
)

// supportedFormats is appended to Open errors so the user sees what would work.
const supportedFormats = `supported: IDX images files whose name contains "idx3-ubyte", ` +
	`plain or gzipped (e.g. MNIST train-images-idx3-ubyte.gz; the labels file is found by name); ` +
	`CSV files named *.csv; CSV files with a declared schema, csv://PATH?schema=y:label,x:num,c:hash(1000); ` +
	`Parquet files named *.parquet or a directory of them, parquet://PATH?schema=y:label,x:num,c:hash(1000) to name their columns' kinds; ` +
	`generated click-through-rate data, synthetic-ctr://?records=N&seed=S; ` +
	`a database table's or query's rows, sqlite://PATH, postgres://USER:PASSWORD@HOST:PORT/DB or ` +
	`mysql://USER:PASSWORD@tcp(HOST:PORT)/DB with ?table=NAME or ?query=SQL and &label=COLUMN`

// Open opens a source, picking the reader from the file name: a name
// containing "idx3-ubyte" (plain or .gz) is an IDX images file read with
// OpenIDX; a name ending in ".csv" is read with OpenCSV and default options
// (no header, label in the last column, comma-separated). Two URI schemes
// name sources that a file name cannot: "csv://PATH?schema=..." is a CSV
// file read with a declared schema (see OpenCSVURI), and
// "synthetic-ctr://?..." is a generated click-through-rate data set (see
// OpenSyntheticCTR), and "sqlite://...", "postgres://..." and "mysql://..."
// with snapshot= name the snapshot of a table's or query's rows that a
// job's master made (see OpenSQL; the master turns table= and query= into
// snapshot=). A name ending in ".parquet", or a directory holding
// *.parquet files, is read with OpenParquet and its default schema, and
// "parquet://PATH?schema=..." with the schema given (see OpenParquetURI).
// Otherwise only local paths are supported.
func Open(uri string) (Source, error) {
	if i := strings.Index(uri, "://"); i > 0 {
		// Not s, err directly: a nil pointer in a Source would not be == nil.
		switch uri[:i] {
		case csvScheme:
			s, err := OpenCSVURI(uri)
			if err != nil {
				return nil, err
			}
			return s, nil
		case parquetScheme:
			p, err := OpenParquetURI(uri)
			if err != nil {
				return nil, err
			}
			return p, nil
		case "s3":
			if ext := path.Ext(strings.TrimRight(uri, "/")); ext != "" && !strings.EqualFold(ext, ".parquet") {
				return nil, fmt.Errorf("data: open %s: %w", uri, errRemoteFormat)
			}
			p, err := OpenParquet(uri, Schema{})
			if err != nil {
				return nil, err
			}
			return p, nil
		case syntheticCTRScheme:
			g, err := OpenSyntheticCTR(uri)
			if err != nil {
				return nil, err
			}
			return g, nil
		}
		if sqldb.IsURI(uri) {
			s, err := OpenSQL(uri)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
		return nil, fmt.Errorf("data: open %s: scheme %q: %w (%s; otherwise local paths only)",
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
	case strings.EqualFold(filepath.Ext(base), ".parquet") || isParquetDir(uri):
		p, err := OpenParquet(uri, Schema{})
		if err != nil {
			return nil, err
		}
		return p, nil
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
