package data

import (
	"fmt"
	"io"
	"strconv"

	"github.com/parquet-go/parquet-go"
)

// exportPageSize is the size of a page of values before compression: a
// reader seeks to a page and decodes it whole, so a task of 512 records
// should not decode a 64k-row page per column. 4 KiB is 1024 floats (and
// 2% more bytes than 8 KiB pages; reads 10-20% faster).
const exportPageSize = 4 << 10

// DefaultParquetRowGroup is ExportParquet's rows per row group: a task
// (hundreds to thousands of records) reads at most two groups' pages, and a
// group of 20 float columns is about 5 MB, a sensible unit for a ranged GET.
const DefaultParquetRowGroup = 64 << 10

// ExportParquet writes records [start, end) of src as a Parquet file (Snappy
// compressed, rowGroup rows per row group; 0 means DefaultParquetRowGroup)
// with the columns ExportCSV writes, by name: label (int32), f1..fN (float)
// and c1..cK (int64). It returns the schema that reads them back
// (label:label,f{1..N}:num,c{1..K}:id), which it also stores in the file's
// metadata, so OpenParquet without a schema gives the very records src
// gives, corrupt ones left out (counted in the second result).
func ExportParquet(w io.Writer, src Source, start, end int64, rowGroup int) (schema string, corrupt int, err error) {
	if err := checkRange(src.Name(), start, end, src.Len()); err != nil {
		return "", 0, err
	}
	if rowGroup <= 0 {
		rowGroup = DefaultParquetRowGroup
	}
	nf := 1
	for _, d := range src.FeatureShape() {
		nf *= d
	}
	nc := 0
	if cs, ok := src.(CategoricalSource); ok {
		nc = cs.NumCategorical()
	}
	schema = exportSchema(nf, nc)
	ps, cols := exportParquetSchema(nf, nc)
	pw := parquet.NewWriter(w, ps, parquet.MaxRowsPerRowGroup(int64(rowGroup)),
		parquet.PageBufferSize(exportPageSize), parquet.Compression(&parquet.Snappy), parquet.KeyValueMetadata(schemaKey, schema))
	const chunk = 4096
	var rows []parquet.Row
	for lo := start; lo < end; lo += chunk {
		b, err := src.Read(lo, min(lo+chunk, end))
		if err != nil {
			return "", corrupt, err
		}
		corrupt += len(b.Corrupt)
		if b.N > 0 && (len(b.Features) != b.N*nf || b.NumCategorical != nc) {
			return "", corrupt, fmt.Errorf("%s: records [%d,%d): %d features and %d ids a record, want %d and %d (its FeatureShape and NumCategorical)",
				src.Name(), lo, min(lo+chunk, end), len(b.Features)/b.N, b.NumCategorical, nf, nc)
		}
		rows = exportRows(rows[:0], b, cols)
		if _, err := pw.WriteRows(rows); err != nil {
			return "", corrupt, fmt.Errorf("write: %w", err)
		}
	}
	if err := pw.Close(); err != nil {
		return "", corrupt, fmt.Errorf("write: %w", err)
	}
	return schema, corrupt, nil
}

// exportSchema is ExportCSV's schema for nf features and nc ids.
func exportSchema(nf, nc int) string {
	s := "label:label"
	if nf > 0 {
		s += fmt.Sprintf(",f{1..%d}:num", nf)
	}
	if nc > 0 {
		s += fmt.Sprintf(",c{1..%d}:id", nc)
	}
	return s
}

// exportColumns are the leaf indexes of the exported columns: the label's,
// then each feature's, then each id's (a parquet.Group orders its fields by
// name, so f10 comes before f2).
type exportColumns struct {
	label int
	feats []int
	ids   []int
}

func exportParquetSchema(nf, nc int) (*parquet.Schema, exportColumns) {
	g := parquet.Group{"label": parquet.Leaf(parquet.Int32Type)}
	for k := 1; k <= nf; k++ {
		g["f"+strconv.Itoa(k)] = parquet.Leaf(parquet.FloatType)
	}
	for k := 1; k <= nc; k++ {
		g["c"+strconv.Itoa(k)] = parquet.Leaf(parquet.Int64Type)
	}
	ps := parquet.NewSchema("elasticdl", g)
	index := func(name string) int {
		leaf, _ := ps.Lookup(name)
		return leaf.ColumnIndex
	}
	cols := exportColumns{label: index("label"), feats: make([]int, nf), ids: make([]int, nc)}
	for k := range nf {
		cols.feats[k] = index("f" + strconv.Itoa(k+1))
	}
	for k := range nc {
		cols.ids[k] = index("c" + strconv.Itoa(k+1))
	}
	return ps, cols
}

// exportRows appends b's records to rows as Parquet rows, each value at its
// column's leaf index.
func exportRows(rows []parquet.Row, b *Batch, cols exportColumns) []parquet.Row {
	nf, nc := len(cols.feats), len(cols.ids)
	width := 1 + nf + nc
	values := make([]parquet.Value, b.N*width)
	for r := range b.N {
		row := values[r*width : (r+1)*width : (r+1)*width]
		row[cols.label] = parquet.Int32Value(b.Labels[r]).Level(0, 0, cols.label)
		for k, c := range cols.feats {
			row[c] = parquet.FloatValue(b.Features[r*nf+k]).Level(0, 0, c)
		}
		for k, c := range cols.ids {
			row[c] = parquet.Int64Value(b.Categorical[r*nc+k]).Level(0, 0, c)
		}
		rows = append(rows, row)
	}
	return rows
}
