package data

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// groupRows holds a row group's rows decoded column by column, before the
// valid ones are appended to the batch in record order.
type groupRows struct {
	feats  []float32 // n × numDense
	ids    []int64   // n × numCategorical
	labels []int32
	errs   []error         // per row, the first column (in schema order) that failed
	vals   []parquet.Value // readChunk's buffer, one for the whole Read
}

// readGroup appends rows [lo,hi) of a row group to b; base is the record
// number of the group's row 0.
func (p *Parquet) readGroup(f *parquetFile, rg parquet.RowGroup, lo, hi, base int64, b *Batch, vals []parquet.Value) (err error) {
	defer recoverDamage(&err, "") // readFile names the file
	n := int(hi - lo)
	nd, nc := p.plan.numDense, p.plan.numCategorical
	g := &groupRows{
		feats:  make([]float32, n*nd),
		ids:    make([]int64, n*nc),
		labels: make([]int32, n),
		errs:   make([]error, n),
		vals:   vals,
	}
	chunks := rg.ColumnChunks()
	for i := range p.plan.cols {
		if f.leaf[i] < 0 {
			continue
		}
		kind := f.kind[i]
		err = readChunk(chunks[f.leaf[i]], lo, n, g.vals, func(row int, vals []parquet.Value) {
			for j, v := range vals {
				p.decodeValue(i, kind, v, row+j, g)
			}
		})
		if err != nil {
			return fmt.Errorf("column %q: %w", p.plan.cols[i].name, err)
		}
	}
	for r := range n {
		if g.errs[r] != nil {
			b.Corrupt = append(b.Corrupt, &RecordError{Source: p.name, Record: base + lo + int64(r), Err: g.errs[r]})
			continue
		}
		b.Features = append(b.Features, g.feats[r*nd:(r+1)*nd]...)
		b.Categorical = append(b.Categorical, g.ids[r*nc:(r+1)*nc]...)
		b.Labels = append(b.Labels, g.labels[r])
		b.Index = append(b.Index, base+lo+int64(r))
	}
	return nil
}

// recoverDamage turns a panic of the Parquet library into *err: it trusts
// the lengths and offsets a file declares, so a damaged file can make it
// slice out of range, and one bad file must not kill the worker reading it.
// where prefixes the error (the file, where the caller's errors do not
// name it).
func recoverDamage(err *error, where string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%sdamaged Parquet data: %v", where, r)
	}
}

// readChunk calls fn with the values of rows [lo, lo+n) of a column chunk,
// in order, page by page, through buf; row is the offset of vals[0] from
// lo. It seeks to row lo through the offset index: earlier pages are not
// read.
func readChunk(chunk parquet.ColumnChunk, lo int64, n int, buf []parquet.Value, fn func(row int, vals []parquet.Value)) error {
	pages := chunk.Pages()
	defer pages.Close()
	if err := pages.SeekToRow(lo); err != nil {
		return fmt.Errorf("seek to row %d: %w", lo, err)
	}
	done := 0
	for done < n {
		page, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w (%d values from row %d, want %d)", errNoSuchRows, done, lo, n)
		}
		if err != nil {
			return err
		}
		vr := page.Values()
		for done < n {
			k, err := vr.ReadValues(buf[:min(len(buf), n-done)])
			fn(done, buf[:k])
			done += k
			if errors.Is(err, io.EOF) || (err == nil && k == 0) {
				break
			}
			if err != nil {
				parquet.Release(page)
				return err
			}
		}
		parquet.Release(page) // the values are decoded: their bytes may go back to the pool
	}
	return nil
}

// decodeValue decodes the value of schema column i in row r into g; kind
// is the column's physical type in the file.
func (p *Parquet) decodeValue(i int, kind parquet.Kind, v parquet.Value, r int, g *groupRows) {
	cp := &p.plan.cols[i]
	var err error
	switch cp.kind {
	case Numeric:
		g.feats[r*p.plan.numDense+cp.slot], err = parquetNumber(v, kind)
	case Categorical, Hashed:
		g.ids[r*p.plan.numCategorical+cp.slot] = cp.id(parquetText(v, kind))
	case ID:
		g.ids[r*p.plan.numCategorical+cp.slot], err = parquetID(v, kind)
	case Label:
		g.labels[r], err = parquetLabel(v, kind)
	}
	if err != nil && g.errs[r] == nil {
		g.errs[r] = fmt.Errorf("%v column %d (%s): %w", cp.kind, i, cp.name, err)
	}
}

// parquetNumber is a num column's value: null is 0, as an empty CSV field.
func parquetNumber(v parquet.Value, kind parquet.Kind) (float32, error) {
	if v.IsNull() {
		return 0, nil
	}
	var x float64
	switch kind {
	case parquet.Int32:
		return float32(v.Int32()), nil
	case parquet.Int64:
		return float32(v.Int64()), nil
	case parquet.Float:
		x = float64(v.Float())
	default:
		x = v.Double()
	}
	f := float32(x)
	if math.IsNaN(x) || math.IsInf(float64(f), 0) {
		return 0, fmt.Errorf("non-finite value %v", x) // would poison training
	}
	return f, nil
}

// parquetText is a cat or hash column's value as the CSV reader would see
// it: null is the empty value, numbers their decimal text.
func parquetText(v parquet.Value, kind parquet.Kind) string {
	switch {
	case v.IsNull():
		return ""
	case kind == parquet.Int32:
		return strconv.FormatInt(int64(v.Int32()), 10)
	case kind == parquet.Int64:
		return strconv.FormatInt(v.Int64(), 10)
	}
	return strings.TrimSpace(string(v.ByteArray()))
}

// parquetID is an id column's value: a non-negative integer (parseID).
func parquetID(v parquet.Value, kind parquet.Kind) (int64, error) {
	if v.IsNull() {
		return 0, errors.New("id is null: want an integer from 0 to 2^63-1")
	}
	id := v.Int64()
	if kind == parquet.Int32 {
		id = int64(v.Int32())
	}
	if id < 0 {
		return 0, fmt.Errorf("id %d: want an integer from 0 to 2^63-1", id)
	}
	return id, nil
}

// parquetLabel is the label: an int32, as parseLabel takes it from CSV
// (a float holding an integer included).
func parquetLabel(v parquet.Value, kind parquet.Kind) (int32, error) {
	if v.IsNull() {
		return 0, errors.New("label is null")
	}
	var x float64
	switch kind {
	case parquet.Int32:
		return v.Int32(), nil
	case parquet.Boolean:
		if v.Boolean() {
			return 1, nil
		}
		return 0, nil
	case parquet.Int64:
		if l := v.Int64(); l >= math.MinInt32 && l <= math.MaxInt32 {
			return int32(l), nil
		}
		return 0, fmt.Errorf("label %d is not an int32", v.Int64())
	case parquet.Float:
		x = float64(v.Float())
	default:
		x = v.Double()
	}
	if x != math.Trunc(x) || x < math.MinInt32 || x > math.MaxInt32 {
		return 0, fmt.Errorf("label %v is not an int32", x)
	}
	return int32(x), nil
}

// Close releases the files. Reads after Close fail; Close is idempotent.
func (p *Parquet) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return closeParquetFiles(p.files)
}

func closeParquetFiles(files []*parquetFile) error {
	var errs []error
	for _, f := range files {
		if f.closer != nil {
			errs = append(errs, f.closer.Close())
		}
	}
	return errors.Join(errs...)
}
