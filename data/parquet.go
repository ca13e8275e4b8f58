package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/parquet-go/parquet-go"

	"elasticdl/internal/storage"
)

// Why parquet-go/parquet-go and not apache/arrow-go's parquet: it is pure Go
// (no cgo, so the static binary keeps working), it opens a file from its
// footer alone and seeks a column chunk to a row through the offset index
// (page-level random access, which tasks of [start,end) need), it is
// maintained, and it brings no Arrow memory model along.

const parquetScheme = "parquet"

// schemaKey is the key-value metadata entry in which ExportParquet stores
// the schema that reads its file back.
const schemaKey = "elasticdl.schema"

// Parquet reads Parquet files: one file, or every *.parquet file of a
// directory in name order as one source whose record numbers run on from
// file to file. Columns are bound by name to a Schema, with the kinds of the
// schema CSV reader (see SchemaCSV): columns the schema does not name are not
// read. Supported physical types:
//
//   - num: int32, int64, float, double (null is 0, as an empty CSV field);
//   - cat, hash: byte arrays (strings, spaces around trimmed as in CSV), or
//     int32/int64 hashed as their decimal text (null is the empty value's id);
//   - id: int32, int64;
//   - label: int32, int64, boolean, or float/double holding an integer;
//   - ignore: anything (the column need not exist).
//
// Columns must be top-level and not repeated. A record goes to
// Batch.Corrupt where the CSV reader would put its line: a non-finite
// number, a negative id, a null or non-int32 label, a null id.
//
// Without a schema (a bare path), the file's own is used when ExportParquet
// wrote it (key-value metadata "elasticdl.schema"); otherwise it is inferred
// from the first file: the column named "label", or else the last column, is
// the label; int32, int64, float and double columns are num; byte array
// columns cat; any other column is ignored.
//
// Read looks up the row groups that cover the range in the footer's row
// counts and seeks each column chunk to its first row with the offset index,
// so a task reads only its own pages (a file without an offset index: the
// row group's pages up to them). A damaged file is an error naming the file,
// at Open when its footer is, at Read when a page is.
type Parquet struct {
	name   string
	files  []*parquetFile
	starts []int64 // first record of each file; starts[len(files)] is Len
	schema Schema
	plan   *schemaPlan

	mu     sync.RWMutex // Read holds it shared; Close exclusive
	closed bool
}

// parquetFile is one open file and where the schema's columns are in it.
type parquetFile struct {
	path   string
	closer io.Closer
	pf     *parquet.File
	groups []int64 // first row of each row group, then the file's row count
	leaf   []int   // per schema column: its leaf column index, -1 for ignore
	kind   []parquet.Kind
}

// OpenParquet opens a Parquet file, or a directory of *.parquet files, read
// with schema; a schema with no columns means the default (see Parquet).
func OpenParquet(path string, schema Schema) (*Parquet, error) {
	return openParquet(path, path, schema)
}

// OpenParquetURI opens a source named by a URI of the form
//
//	parquet://PATH[?schema=SCHEMA]
//
// PATH is a file or a directory, taken literally up to the '?' as in
// csv:// URIs; SCHEMA is in ParseSchema's syntax and names columns of the
// file. The source's Name is the URI.
func OpenParquetURI(uri string) (*Parquet, error) {
	rest, ok := strings.CutPrefix(uri, parquetScheme+"://")
	if !ok {
		return nil, fmt.Errorf("%s: not a %s:// URI", uri, parquetScheme)
	}
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return nil, fmt.Errorf("%s: no path: want parquet://PATH[?schema=...]", uri)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%s: query: %w", uri, err)
	}
	var schema Schema
	for _, k := range slices.Sorted(maps.Keys(q)) {
		v := q[k]
		switch {
		case len(v) != 1:
			return nil, fmt.Errorf("%s: parameter %q given %d times", uri, k, len(v))
		case k != "schema":
			return nil, fmt.Errorf("%s: unknown parameter %q (want schema)", uri, k)
		}
		if schema, err = ParseSchema(v[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", uri, err)
		}
	}
	return openParquet(uri, path, schema)
}

// parquetPaths lists the files of a source: path itself, or a directory's
// *.parquet files sorted by name.
func parquetPaths(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, e := range entries { // ReadDir sorts by name
		if !e.IsDir() && strings.EqualFold(filepath.Ext(e.Name()), ".parquet") {
			paths = append(paths, filepath.Join(path, e.Name()))
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no *.parquet file in the directory")
	}
	return paths, nil
}

// isParquetDir says whether path is a directory holding a *.parquet file.
func isParquetDir(path string) bool {
	paths, err := parquetPaths(path)
	return err == nil && len(paths) > 0 && paths[0] != path
}

func openParquet(name, path string, schema Schema) (*Parquet, error) {
	if storage.IsRemote(path) {
		files, err := openParquetObjects(context.Background(), path)
		if err != nil {
			return nil, err
		}
		p, err := newParquet(name, files, schema)
		if err != nil {
			closeParquetFiles(files)
			return nil, err
		}
		return p, nil
	}
	paths, err := parquetPaths(path)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Path == name {
		return nil, err // it names the file already
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var files []*parquetFile
	for _, fp := range paths {
		f, err := openParquetFile(fp)
		if err != nil {
			closeParquetFiles(files)
			return nil, err
		}
		files = append(files, f)
	}
	p, err := newParquet(name, files, schema)
	if err != nil {
		closeParquetFiles(files)
		return nil, err
	}
	return p, nil
}

// newParquet binds open files to schema (the default when it has no
// columns).
func newParquet(name string, files []*parquetFile, schema Schema) (*Parquet, error) {
	p := &Parquet{name: name, files: files, starts: []int64{0}}
	for _, f := range files {
		p.starts = append(p.starts, p.starts[len(p.starts)-1]+f.groups[len(f.groups)-1])
	}
	var err error
	inferred := ""
	if schema.Columns == nil {
		if schema, err = defaultParquetSchema(files[0]); err != nil {
			return nil, err
		}
		inferred = fmt.Sprintf(" (no schema given, so %s; give one: parquet://PATH?schema=...)", schema)
	}
	if p.plan, err = schema.plan(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.schema = Schema{Columns: slices.Clone(schema.Columns)}
	for _, f := range files {
		if err := f.bind(schema); err != nil {
			return nil, fmt.Errorf("%w%s", err, inferred)
		}
	}
	return p, nil
}

// openParquetFile opens a file and reads its footer (metadata and page
// index); no data page is read.
func openParquetFile(path string) (*parquetFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // it names the path
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	pf, err := openParquetReader(path, f, st.Size(), f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return pf, nil
}

// openParquetReader reads the footer of a file of size bytes through r.
// Without an offset index (pyarrow writes none by default) a column chunk
// is read from its start to the task's first row: the row group's earlier
// pages are read, not the earlier row groups.
func openParquetReader(path string, r io.ReaderAt, size int64, closer io.Closer, opts ...parquet.FileOption) (_ *parquetFile, err error) {
	defer recoverDamage(&err, path+": ")
	pf, err := parquet.OpenFile(r, size, append(opts, parquet.SkipBloomFilters(true))...)
	if err != nil {
		return nil, fmt.Errorf("%s: not a Parquet file, or a truncated or damaged one: %w", path, err)
	}
	f := &parquetFile{path: path, closer: closer, pf: pf, groups: []int64{0}}
	for _, rg := range pf.RowGroups() {
		f.groups = append(f.groups, f.groups[len(f.groups)-1]+rg.NumRows())
	}
	if n := f.groups[len(f.groups)-1]; n != pf.NumRows() {
		return nil, fmt.Errorf("%s: corrupt footer: the row groups hold %d rows, the file says %d", path, n, pf.NumRows())
	}
	return f, nil
}

// defaultParquetSchema is the schema of a file read without one (see
// Parquet).
func defaultParquetSchema(f *parquetFile) (Schema, error) {
	if text, ok := f.pf.Lookup(schemaKey); ok {
		s, err := ParseSchema(text)
		if err != nil {
			return Schema{}, fmt.Errorf("%s: metadata %s: %w", f.path, schemaKey, err)
		}
		return s, nil
	}
	fields := f.pf.Schema().Fields()
	label := len(fields) - 1
	for i, fd := range fields {
		if fd.Name() == "label" {
			label = i
		}
	}
	var s Schema
	for i, fd := range fields {
		col := Column{Name: fd.Name(), Kind: Ignore}
		switch {
		case i == label:
			col.Kind = Label
		case !fd.Leaf() || fd.Repeated():
		case slices.Contains([]parquet.Kind{parquet.Int32, parquet.Int64, parquet.Float, parquet.Double}, fd.Type().Kind()):
			col.Kind = Numeric
		case fd.Type().Kind() == parquet.ByteArray:
			col.Kind = Categorical
		}
		s.Columns = append(s.Columns, col)
	}
	if err := s.Validate(); err != nil {
		return Schema{}, fmt.Errorf("%s: no schema given, and the inferred one %q: %w (give one: parquet://PATH?schema=...)", f.path, s, err)
	}
	return s, nil
}

// parquetKinds are the physical types each column kind reads.
var parquetKinds = map[ColumnKind][]parquet.Kind{
	Numeric:     {parquet.Int32, parquet.Int64, parquet.Float, parquet.Double},
	Categorical: {parquet.ByteArray, parquet.Int32, parquet.Int64},
	Hashed:      {parquet.ByteArray, parquet.Int32, parquet.Int64},
	ID:          {parquet.Int32, parquet.Int64},
	Label:       {parquet.Int32, parquet.Int64, parquet.Boolean, parquet.Float, parquet.Double},
}

// bind finds the schema's columns in the file by name and checks their
// types.
func (f *parquetFile) bind(s Schema) error {
	f.leaf = make([]int, len(s.Columns))
	f.kind = make([]parquet.Kind, len(s.Columns))
	for i, c := range s.Columns {
		f.leaf[i] = -1
		if c.Kind == Ignore {
			continue
		}
		leaf, ok := f.pf.Schema().Lookup(c.Name)
		switch {
		case !ok && slices.Contains(fieldNames(f.pf), c.Name):
			return fmt.Errorf("%s: column %q is a group: want a top-level column of values", f.path, c.Name)
		case !ok:
			return fmt.Errorf("%s: column %q (%v in the schema) is not in the file (it has %s)", f.path, c.Name, c.Kind, strings.Join(fieldNames(f.pf), ", "))
		case leaf.MaxRepetitionLevel > 0:
			return fmt.Errorf("%s: column %q is repeated: want one value per row", f.path, c.Name)
		}
		k := leaf.Node.Type().Kind()
		if !slices.Contains(parquetKinds[c.Kind], k) {
			return fmt.Errorf("%s: column %q is %v, which %v columns do not read (it reads %v)", f.path, c.Name, k, c.Kind, parquetKinds[c.Kind])
		}
		f.leaf[i], f.kind[i] = leaf.ColumnIndex, k
		for g, rg := range f.pf.RowGroups() {
			// A column of one value per row has as many values as its rows,
			// nulls included: what Read trusts (and a damaged footer breaks).
			if nv, nr := rg.ColumnChunks()[leaf.ColumnIndex].NumValues(), rg.NumRows(); nv != nr {
				return fmt.Errorf("%s: row group %d: column %q holds %d values for %d rows: a damaged footer", f.path, g, c.Name, nv, nr)
			}
		}
	}
	return nil
}

// fieldNames are the file's top-level columns.
func fieldNames(pf *parquet.File) []string {
	var names []string
	for _, fd := range pf.Schema().Fields() {
		names = append(names, fd.Name())
	}
	return names
}

// Name returns the path or URI the source was opened with.
func (p *Parquet) Name() string { return p.name }

// Len returns the number of records of all files.
func (p *Parquet) Len() int64 { return p.starts[len(p.starts)-1] }

// FeatureShape returns [number of numeric columns].
func (p *Parquet) FeatureShape() []int { return []int{p.plan.numDense} }

// NumCategorical returns the number of categorical, hashed and id columns.
func (p *Parquet) NumCategorical() int { return p.plan.numCategorical }

// IDBound returns the size of the id space, or 0 if unbounded (see
// SchemaCSV.IDBound).
func (p *Parquet) IDBound() int64 { return p.plan.idBound }

// Schema returns the schema the files are read with.
func (p *Parquet) Schema() Schema {
	return p.schema.clone()
}

// Read decodes records [start,end), reading only the row groups and pages
// that hold them.
func (p *Parquet) Read(start, end int64) (*Batch, error) {
	if err := checkRange(p.name, start, end, p.Len()); err != nil {
		return nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, fmt.Errorf("%s: read: %w", p.name, os.ErrClosed)
	}
	b := p.plan.newBatch(int(end - start))
	vals := make([]parquet.Value, min(end-start, 1024))
	// The file holding start: the last one starting at or before it.
	fi := sort.Search(len(p.files), func(i int) bool { return p.starts[i+1] > start })
	for ; start < end; fi++ {
		f, base := p.files[fi], p.starts[fi]
		hi := min(end, p.starts[fi+1])
		if err := p.readFile(f, start-base, hi-base, base, b, vals); err != nil {
			return nil, err
		}
		start = hi
	}
	b.N = len(b.Labels)
	return b, nil
}

// readFile appends the file's rows [lo,hi) to b; base is the record number
// of its row 0.
func (p *Parquet) readFile(f *parquetFile, lo, hi, base int64, b *Batch, vals []parquet.Value) error {
	groups := f.pf.RowGroups()
	gi := sort.Search(len(groups), func(i int) bool { return f.groups[i+1] > lo })
	for ; lo < hi; gi++ {
		g0 := f.groups[gi]
		ghi := min(hi, f.groups[gi+1])
		if err := p.readGroup(f, groups[gi], lo-g0, ghi-g0, base+g0, b, vals); err != nil {
			return fmt.Errorf("%s: row group %d: %w", f.path, gi, err)
		}
		lo = ghi
	}
	return nil
}

// errNoSuchRows is returned for a column chunk that ends before the rows
// its row group's metadata promised.
var errNoSuchRows = errors.New("the column chunk holds fewer rows than the row group")
