package data

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// CSVOptions configures OpenCSV. The zero value means: no header, label in
// the last column, comma-separated.
type CSVOptions struct {
	HasHeader   bool   // first line is a header (column names)
	LabelColumn string // header name or zero-based index as a string; default "" = last column
	Comma       rune   // default ','
}

// CSV reads a CSV file by random access. At open it makes one buffered pass
// over the file to record the byte offset where each record starts (8 bytes
// per record in memory, so files much larger than memory are fine); each
// Read then parses only the bytes of its range with encoding/csv.
//
// Record boundaries follow encoding/csv exactly (with LazyQuotes off): quoted
// fields may contain the comma, doubled quotes and newlines; empty lines are
// skipped; "\r\n" line ends are accepted; a malformed line (a bare quote in an
// unquoted field, or text after a closing quote) ends at its newline, just as
// encoding/csv resumes after a parse error. Limits: no comment lines, no
// lazy quotes, and an unterminated quoted field runs to the end of the file
// (one corrupt record), as in encoding/csv. A leading UTF-8 byte order mark
// is skipped.
//
// Record numbers count data records from 0; the header is not a record.
type CSV struct {
	name    string
	comma   rune
	columns []string
	label   int
	// offsets[i] is where record i starts; offsets[Len()] is the end of the data.
	offsets []int64

	mu     sync.RWMutex // Close excludes Read; Reads run concurrently
	closed bool
	f      *os.File
}

// OpenCSV opens and indexes a CSV file. Without a header, the first record
// sets the number of columns, which are named "c0", "c1", ...; records with
// another field count are corrupt. An empty file (no records and no
// header) is an error, since it has no columns.
func OpenCSV(path string, opts CSVOptions) (*CSV, error) {
	comma := opts.Comma
	if comma == 0 {
		comma = ','
	}
	if !validComma(comma) {
		return nil, fmt.Errorf("%s: invalid CSV separator %q", path, comma)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *PathError: "open <path>: ..."
	}
	c := &CSV{name: path, comma: comma, f: f}
	if err := c.init(opts); err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

// validComma mirrors encoding/csv's check, so a bad separator fails at open
// rather than on every record.
func validComma(r rune) bool {
	return r != 0 && r != '"' && r != '\r' && r != '\n' && utf8.ValidRune(r) && r != utf8.RuneError
}

func (c *CSV) init(opts CSVOptions) error {
	var err error
	c.offsets, err = indexCSV(c.f, c.comma, 1<<20)
	if err != nil {
		return fmt.Errorf("%s: index: %w", c.name, err)
	}
	if len(c.offsets) == 1 {
		return fmt.Errorf("%s: empty file: no header or record to take the columns from", c.name)
	}
	first, err := c.rows(0, 1)
	if err != nil {
		return fmt.Errorf("cannot read the column names: %w", err)
	}
	if opts.HasHeader {
		c.columns = first[0]
		c.offsets = c.offsets[1:]
	} else {
		c.columns = make([]string, len(first[0]))
		for i := range c.columns {
			c.columns[i] = "c" + strconv.Itoa(i)
		}
	}
	c.label, err = labelColumn(c.columns, opts.LabelColumn, opts.HasHeader)
	if err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	return nil
}

// labelColumn resolves CSVOptions.LabelColumn. A header name wins over an
// index, so a column literally named "3" is found by name.
func labelColumn(cols []string, spec string, header bool) (int, error) {
	if spec == "" {
		return len(cols) - 1, nil
	}
	if header {
		if i := slices.Index(cols, spec); i >= 0 {
			return i, nil
		}
	}
	if i, err := strconv.Atoi(spec); err == nil {
		if i < 0 || i >= len(cols) {
			return 0, fmt.Errorf("label column %d out of range: have %d columns", i, len(cols))
		}
		return i, nil
	}
	shown := cols
	if len(shown) > 10 { // MNIST-like files have hundreds of columns
		shown = shown[:10]
	}
	list := strings.Join(shown, ", ")
	if len(shown) < len(cols) {
		list += fmt.Sprintf(", ... (%d columns)", len(cols))
	}
	return 0, fmt.Errorf("label column %q not found: want a header name or a zero-based index (columns: %s)", spec, list)
}

// Name returns the path the source was opened with.
func (c *CSV) Name() string { return c.name }

// Len returns the number of data records (the header excluded).
func (c *CSV) Len() int64 { return int64(len(c.offsets) - 1) }

// Columns returns the header names, or "c0".."cN-1" without a header.
func (c *CSV) Columns() []string { return slices.Clone(c.columns) }

// LabelColumn returns the zero-based index of the label column.
func (c *CSV) LabelColumn() int { return c.label }

// FeatureShape returns [number of columns - 1].
func (c *CSV) FeatureShape() []int { return []int{len(c.columns) - 1} }

// ReadRows returns the raw fields of records [start,end). A record that
// encoding/csv cannot parse (bad quoting) is an error here, a *RecordError
// wrapping the *csv.ParseError's cause; Read skips such records instead.
func (c *CSV) ReadRows(start, end int64) ([][]string, error) {
	if err := checkRange(c.name, start, end, c.Len()); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, fmt.Errorf("%s: read: %w", c.name, os.ErrClosed)
	}
	return c.rows(start, end)
}

func (c *CSV) rows(start, end int64) ([][]string, error) {
	rows := make([][]string, 0, end-start)
	err := c.scan(start, end, false, func(rec int64, fields []string, perr error) error {
		if perr != nil {
			return &RecordError{Source: c.name, Record: rec, Err: perr}
		}
		rows = append(rows, fields)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// Read parses records [start,end): every column but the label as a float32
// feature, the label as an int32 (an integral float such as "3.0" is
// accepted; surrounding spaces are ignored). A record with the wrong field
// count, a bad quote, a non-numeric or non-finite feature, or a label that
// is not an int32 goes to Batch.Corrupt and is skipped.
func (c *CSV) Read(start, end int64) (*Batch, error) {
	if err := checkRange(c.name, start, end, c.Len()); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, fmt.Errorf("%s: read: %w", c.name, os.ErrClosed)
	}
	n := int(end - start)
	nf := len(c.columns) - 1
	b := &Batch{
		FeatureShape: c.FeatureShape(),
		Features:     make([]float32, 0, n*nf),
		Labels:       make([]int32, 0, n),
		Index:        make([]int64, 0, n),
	}
	err := c.scan(start, end, true, func(rec int64, fields []string, perr error) error {
		if perr == nil {
			var label int32
			label, b.Features, perr = c.decode(fields, b.Features)
			if perr == nil {
				b.Labels = append(b.Labels, label)
				b.Index = append(b.Index, rec)
				return nil
			}
		}
		b.Corrupt = append(b.Corrupt, &RecordError{Source: c.name, Record: rec, Err: perr})
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.N = len(b.Labels)
	return b, nil
}

// decode appends the features of one record to feats and returns its label.
// On error feats comes back at its original length, so a corrupt record
// leaves no partial features behind.
func (c *CSV) decode(fields []string, feats []float32) (int32, []float32, error) {
	if len(fields) != len(c.columns) {
		return 0, feats, fmt.Errorf("got %d fields, want %d", len(fields), len(c.columns))
	}
	n0 := len(feats)
	var label int32
	for i, s := range fields {
		s = strings.TrimSpace(s)
		if i == c.label {
			l, err := parseLabel(s)
			if err != nil {
				return 0, feats[:n0], fmt.Errorf("label column %d (%s): %w", i, c.columns[i], err)
			}
			label = l
			continue
		}
		v, err := strconv.ParseFloat(s, 32)
		if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
			err = fmt.Errorf("non-finite value %q", s) // would poison training
		}
		if err != nil {
			return 0, feats[:n0], fmt.Errorf("column %d (%s): %w", i, c.columns[i], err)
		}
		feats = append(feats, float32(v))
	}
	return label, feats, nil
}

func parseLabel(s string) (int32, error) {
	l, err := strconv.ParseInt(s, 10, 32)
	if err == nil {
		return int32(l), nil
	}
	// Tools that write every column as a float emit "3.0" for label 3.
	if v, ferr := strconv.ParseFloat(s, 64); ferr == nil && v == math.Trunc(v) && v >= math.MinInt32 && v <= math.MaxInt32 {
		return int32(v), nil
	}
	return 0, err
}

// Close releases the file. Reads after Close fail; Close is idempotent.
func (c *CSV) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if err := c.f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", c.name, err)
	}
	return nil
}

// scan parses records [start,end) and calls fn for each, in order, with its
// fields or its parse error. An error from fn, or a structural one (I/O, a
// file that changed since it was indexed), stops the scan. With reuse, the
// fields slice is only valid during the call.
func (c *CSV) scan(start, end int64, reuse bool, fn func(rec int64, fields []string, perr error) error) error {
	if start == end {
		return nil
	}
	span := &spanReader{r: c.f, off: c.offsets[start], end: c.offsets[end]}
	r := csv.NewReader(bufio.NewReaderSize(span, 64<<10)) // big reads: fewer pread calls than csv's 4 KB
	r.Comma = c.comma
	r.FieldsPerRecord = -1 // field counts are checked per record, against the columns
	r.ReuseRecord = reuse
	for rec := start; rec < end; rec++ {
		fields, err := r.Read()
		var pe *csv.ParseError
		switch {
		case err == nil:
		case errors.As(err, &pe):
			err = fmt.Errorf("malformed CSV: %w", pe.Err)
		case err == io.EOF:
			return &RecordError{Source: c.name, Record: rec, Err: errors.New("record missing: the file changed since it was indexed")}
		default:
			return &RecordError{Source: c.name, Record: rec, Err: fmt.Errorf("read: %w", err)}
		}
		if err := fn(rec, fields, err); err != nil {
			return err
		}
	}
	// The index and encoding/csv must agree on where records end; if they
	// did not, records would be silently misnumbered.
	if _, err := r.Read(); err != io.EOF {
		return fmt.Errorf("%s: records [%d,%d): bytes left after the last record: the file changed since it was indexed", c.name, start, end)
	}
	return nil
}

// spanReader reads bytes [off,end) of r. Running out of file before end is
// io.ErrUnexpectedEOF, not io.EOF, so a file truncated after indexing is an
// error rather than silently fewer records.
type spanReader struct {
	r        io.ReaderAt
	off, end int64
}

func (s *spanReader) Read(p []byte) (int, error) {
	if s.off >= s.end {
		return 0, io.EOF
	}
	if rem := s.end - s.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := s.r.ReadAt(p, s.off)
	s.off += int64(n)
	if err == io.EOF {
		err = nil
		if n < len(p) {
			err = io.ErrUnexpectedEOF
		}
	}
	return n, err
}

// csvIndexer finds where records start, applying encoding/csv's rules for
// record boundaries so that any range of the index can be parsed by its own
// encoding/csv reader and yield exactly the records the index promises.
type csvIndexer struct {
	comma    []byte // the separator, UTF-8 encoded
	state    int
	matched  int   // bytes of comma seen after a closing quote
	recStart int64 // offset of the current record's first byte
	starts   []int64
}

const (
	stUnquoted   = iota // in an unquoted field (or at the start of one)
	stQuoted            // inside a quoted field
	stAfterQuote        // just after a quote inside a quoted field: "" escape, separator, newline or malformed
	stSkipLine          // the line is malformed: encoding/csv drops the rest of it
)

// lookback is how many bytes of the previous chunk stay in front of the next
// one: enough to see a whole separator (and a '\r') before a quote or newline.
const lookback = utf8.UTFMax

// indexCSV returns the offset of each record start, then the end of the
// data. It reads r once, sequentially, in chunks of chunk bytes.
func indexCSV(r io.Reader, comma rune, chunk int) ([]int64, error) {
	const bom = "\ufeff"
	ix := &csvIndexer{comma: utf8.AppendRune(nil, comma)}
	buf := make([]byte, lookback+max(chunk, len(bom))) // the first chunk must hold a whole BOM
	// buf[lookback-keep:lookback] holds the end of the previous chunk;
	// buf[lookback] is at file offset base.
	keep := 0
	var base int64
	firstRead := true
	for {
		n, err := io.ReadFull(r, buf[lookback:])
		if n > 0 {
			data := buf[lookback-keep : lookback+n]
			skip := 0
			if firstRead && bytes.HasPrefix(data, []byte(bom)) { // byte order mark: not part of any record
				skip = len(bom)
				ix.recStart = int64(len(bom))
			}
			firstRead = false
			ix.scan(data, keep, skip, base)
			base += int64(n)
			keep = min(lookback, len(data))
			copy(buf[lookback-keep:lookback], data[len(data)-keep:])
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	// The last record may lack a newline; a lone "\r" there is an empty line.
	if size := base - ix.recStart; size > 1 || size == 1 && buf[lookback-1] != '\r' {
		ix.starts = append(ix.starts, ix.recStart)
	}
	return append(ix.starts, base), nil
}

// scan processes data[lb:] (data[:lb] is look-back from the previous chunk),
// where data[lb] is at file offset base. It starts at data[lb+skip].
func (ix *csvIndexer) scan(data []byte, lb, skip int, base int64) {
	abs := func(i int) int64 { return base + int64(i-lb) }
	// fieldStart reports whether a quote at data[j] opens a quoted field:
	// it starts the record or follows a separator. (A separator cannot
	// straddle the record start: the byte before that is '\n' or a BOM.)
	fieldStart := func(j int) bool {
		k := len(ix.comma)
		return abs(j) == ix.recStart || j >= k && bytes.Equal(data[j-k:j], ix.comma)
	}
	i := lb + skip
	for i < len(data) {
		switch ix.state {
		case stUnquoted:
			nl := bytes.IndexByte(data[i:], '\n')
			line := data[i:]
			if nl >= 0 {
				line = line[:nl]
			}
			if q := bytes.IndexByte(line, '"'); q >= 0 {
				j := i + q
				if fieldStart(j) {
					ix.state = stQuoted
				} else {
					ix.state = stSkipLine // bare quote in an unquoted field
				}
				i = j + 1
				continue
			}
			if nl < 0 {
				return
			}
			ix.endRecord(data, i+nl, abs(i+nl))
			i += nl + 1
		case stQuoted:
			q := bytes.IndexByte(data[i:], '"')
			if q < 0 {
				return
			}
			i += q + 1
			ix.state, ix.matched = stAfterQuote, 0
		case stAfterQuote:
			c := data[i]
			switch {
			case ix.matched == 0 && c == '"': // "" is an escaped quote
				ix.state = stQuoted
				i++
			case c == ix.comma[ix.matched]:
				ix.matched++
				i++
				if ix.matched == len(ix.comma) {
					ix.state = stUnquoted // at the start of the next field
				}
			default:
				// The line ends after the quote, or text follows it (malformed):
				// either way the record ends at the next newline. Not consumed,
				// as it may be that newline.
				ix.state = stSkipLine
			}
		case stSkipLine:
			nl := bytes.IndexByte(data[i:], '\n')
			if nl < 0 {
				return
			}
			ix.endRecord(data, i+nl, abs(i+nl))
			ix.state = stUnquoted
			i += nl + 1
		}
	}
}

// endRecord handles the newline at data[j] (file offset nl) that ends a line
// outside quotes. Empty lines ("\n" or "\r\n") are not records.
func (ix *csvIndexer) endRecord(data []byte, j int, nl int64) {
	size := nl - ix.recStart
	if size > 1 || size == 1 && data[j-1] != '\r' {
		ix.starts = append(ix.starts, ix.recStart)
	}
	ix.recStart = nl + 1
}
