package data

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// exportParquetFile writes records [start,end) of src to path with row
// groups of rowGroup rows.
func exportParquetFile(t testing.TB, src Source, start, end int64, rowGroup int, path string) string {
	t.Helper()
	var out bytes.Buffer
	schema, corrupt, err := ExportParquet(&out, src, start, end, rowGroup)
	if err != nil || corrupt != 0 {
		t.Fatalf("export: %v, %d corrupt", err, corrupt)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return schema
}

// sameRecords fails unless got holds want's records, got's record numbers
// shifted by offset.
func sameRecords(t *testing.T, what string, got, want *Batch, offset int64) {
	t.Helper()
	index := make([]int64, len(got.Index))
	for i, r := range got.Index {
		index[i] = r + offset
	}
	switch {
	case got.N != want.N:
		t.Fatalf("%s: %d records, want %d", what, got.N, want.N)
	case !slices.Equal(got.Labels, want.Labels):
		t.Fatalf("%s: labels differ", what)
	case !slices.Equal(got.Features, want.Features):
		t.Fatalf("%s: features differ", what)
	case !slices.Equal(got.Categorical, want.Categorical) || got.NumCategorical != want.NumCategorical:
		t.Fatalf("%s: ids differ", what)
	case !slices.Equal(index, want.Index):
		t.Fatalf("%s: record numbers %v.., want %v..", what, index[:min(3, len(index))], want.Index[:min(3, len(want.Index))])
	case len(got.Corrupt) != len(want.Corrupt):
		t.Fatalf("%s: %d corrupt, want %d", what, len(got.Corrupt), len(want.Corrupt))
	}
}

// TestParquetRoundTrip exports generated CTR records to two files of small
// row groups and reads them back, a file alone and the directory as one
// source, over ranges that cross row groups and files.
func TestParquetRoundTrip(t *testing.T) {
	src, err := Open("synthetic-ctr://?records=3000&dense=4&categorical=3&pairs=1&seed=7")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dir := t.TempDir()
	schema := exportParquetFile(t, src, 0, 1700, 256, filepath.Join(dir, "part-0.parquet"))
	exportParquetFile(t, src, 1700, 3000, 256, filepath.Join(dir, "part-1.parquet"))
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("not data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if schema != "label:label,f{1..4}:num,c{1..3}:id" {
		t.Errorf("schema %q", schema)
	}
	for _, tc := range []struct {
		name     string
		len      int64
		offset   int64 // record number of the source's record 0
		from, to int64
	}{
		{dir, 3000, 0, 0, 3000},
		{dir, 3000, 0, 250, 770},   // row groups 0..3
		{dir, 3000, 0, 1600, 1800}, // across the files
		{dir, 3000, 0, 1700, 1701}, // the second file's first record
		{dir, 3000, 0, 2999, 3000},
		{dir, 3000, 0, 42, 42},
		{filepath.Join(dir, "part-0.parquet"), 1700, 0, 511, 1025},
		{"parquet://" + filepath.Join(dir, "part-1.parquet") + "?schema=" + schema, 1300, 1700, 0, 1300},
		// By name: the file's columns in another order, fewer ids.
		{"parquet://" + dir + "?schema=c2:id,f3:num,label:label", 3000, 0, 100, 300},
	} {
		p, err := Open(tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.Len() != tc.len {
			t.Fatalf("%s: %d records, want %d", tc.name, p.Len(), tc.len)
		}
		got, err := p.Read(tc.from, tc.to)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := src.Read(tc.from+tc.offset, tc.to+tc.offset)
		if strings.Contains(tc.name, "c2:id") {
			want = project(want, []int{2}, 1)
		}
		sameRecords(t, fmt.Sprintf("%s [%d,%d)", tc.name, tc.from, tc.to), got, want, tc.offset)
		p.Close()
	}
}

// project keeps feature feat and id column id of each record of b.
func project(b *Batch, feat []int, id int) *Batch {
	out := *b
	nf := len(b.Features) / max(b.N, 1)
	out.Features, out.Categorical, out.NumCategorical = nil, nil, 1
	for r := range b.N {
		for _, f := range feat {
			out.Features = append(out.Features, b.Features[r*nf+f])
		}
		out.Categorical = append(out.Categorical, b.Categorical[r*b.NumCategorical+id])
	}
	return &out
}

// TestParquetConcurrentReads reads overlapping ranges from many goroutines
// at once: each gets the records a lone read gets.
func TestParquetConcurrentReads(t *testing.T) {
	src, err := Open("synthetic-ctr://?records=2000&dense=3&categorical=2&pairs=1&seed=3")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "ctr.parquet")
	exportParquetFile(t, src, 0, 2000, 300, path)
	p, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			lo := int64(g * 97)
			got, err := p.Read(lo, lo+500)
			if err != nil {
				errs <- err
				return
			}
			want, _ := src.Read(lo, lo+500)
			if !slices.Equal(got.Features, want.Features) || !slices.Equal(got.Categorical, want.Categorical) {
				errs <- fmt.Errorf("[%d,%d): records differ", lo, lo+500)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	p.Close()
	if _, err := p.Read(0, 1); !errors.Is(err, os.ErrClosed) {
		t.Errorf("read after close: %v", err)
	}
}

// typedRow is one row of the typed test file; nil is a null.
type typedRow struct {
	clicked       any // int64
	price         any // float64
	count         any // int32
	city, country any // string
	uid           any // int64
}

// writeTypedParquet writes rows with columns of several physical types,
// nullable ones among them, and a column no schema below names.
func writeTypedParquet(t *testing.T, path string, rows []typedRow) {
	t.Helper()
	ps := parquet.NewSchema("t", parquet.Group{
		"clicked": parquet.Optional(parquet.Leaf(parquet.Int64Type)),
		"price":   parquet.Optional(parquet.Leaf(parquet.DoubleType)),
		"count":   parquet.Optional(parquet.Int(32)),
		"city":    parquet.Optional(parquet.String()),
		"country": parquet.Optional(parquet.String()),
		"uid":     parquet.Optional(parquet.Leaf(parquet.Int64Type)),
		"note":    parquet.String(),
	})
	col := func(name string) int { l, _ := ps.Lookup(name); return l.ColumnIndex }
	value := func(name string, v any) parquet.Value {
		c := col(name)
		if v == nil {
			return parquet.NullValue().Level(0, 0, c)
		}
		return parquet.ValueOf(v).Level(0, 1, c)
	}
	var out bytes.Buffer
	w := parquet.NewWriter(&out, ps, parquet.MaxRowsPerRowGroup(3))
	for _, r := range rows {
		row := make(parquet.Row, 7)
		for name, v := range map[string]any{"clicked": r.clicked, "price": r.price, "count": r.count, "city": r.city, "country": r.country, "uid": r.uid} {
			row[col(name)] = value(name, v)
		}
		row[col("note")] = parquet.ValueOf("x").Level(0, 0, col("note"))
		if _, err := w.WriteRows([]parquet.Row{row}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestParquetSchemaByName reads typed, nullable columns by name with every
// column kind, and checks that they give the records the schema CSV reader
// gives for the same values as text (a null as an empty field), corrupt
// records included.
func TestParquetSchemaByName(t *testing.T) {
	rows := []typedRow{
		{int64(1), 2.5, int32(7), " paris ", "fr", int64(5)},
		{int64(0), nil, nil, nil, nil, int64(0)},              // nulls: 0, 0, the empty value's ids
		{nil, 1.0, int32(1), "rome", "it", int64(3)},          // a null label: corrupt
		{int64(1), math.NaN(), int32(1), "x", "y", nil},       // NaN, then a null id: corrupt
		{int64(0), -3.25, int32(-4), "oslo", "no", int64(-1)}, // a negative id: corrupt
		{int64(1 << 40), 1.0, int32(1), "a", "b", int64(1)},   // a label past int32: corrupt
		{int64(1), 1e300, int32(1), "a", "b", int64(1)},       // past float32: corrupt
		{int64(0), 0.1, int32(100), "lima", "pe", int64(1<<62 - 1)},
	}
	csvLines := []string{
		"1,2.5,7, paris ,fr,5", "0,,,,,0", ",1,1,rome,it,3", "1,NaN,1,x,y,", "0,-3.25,-4,oslo,no,-1",
		"1099511627776,1,1,a,b,1", "1,1e300,1,a,b,1", "0,0.1,100,lima,pe,4611686018427387903",
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "typed.parquet")
	writeTypedParquet(t, path, rows)
	csvPath := filepath.Join(dir, "typed.csv")
	if err := os.WriteFile(csvPath, []byte(strings.Join(csvLines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{
		"clicked:label,price:num,count:num,city:cat,country:hash(50),uid:id",
		"clicked:label,price:num,count:num,city:cat(paris|rome|oslo),country:cat,uid:id",
		"clicked:label,price:ignore,count:num,city:hash(3),country:ignore,uid:ignore",
	} {
		p, err := Open("parquet://" + path + "?schema=" + schema)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Open("csv://" + csvPath + "?schema=" + schema)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Read(0, p.Len())
		if err != nil {
			t.Fatal(err)
		}
		want, _ := c.Read(0, c.Len())
		sameRecords(t, schema, got, want, 0)
		for i := range got.Corrupt {
			if got.Corrupt[i].Record != want.Corrupt[i].Record || !strings.Contains(got.Corrupt[i].Error(), "typed.parquet?schema=") {
				t.Errorf("%s: corrupt %v, the CSV reader's %v", schema, got.Corrupt[i], want.Corrupt[i])
			}
		}
		if len(got.Corrupt) > 0 {
			t.Logf("%s: %d records, corrupt: %v", schema, got.N, got.Corrupt[0])
		}
		p.Close()
		c.Close()
	}
}

// TestParquetDefaultSchema infers a schema for a file that ExportParquet
// did not write: the column named label, numbers num, strings cat.
func TestParquetDefaultSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain.parquet")
	type row struct {
		Label int32   `parquet:"label"`
		Age   float64 `parquet:"age"`
		City  string  `parquet:"city"`
		Tags  []int32 `parquet:"tags"` // repeated: ignored
	}
	if err := parquet.WriteFile(path, []row{{1, 30, "a", []int32{1}}, {0, 40.5, "b", nil}}); err != nil {
		t.Fatal(err)
	}
	p, err := OpenParquet(path, Schema{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := p.Schema().String(); got != "age:num,city:cat,label:label,tags:ignore" && got != "label:label,age:num,city:cat,tags:ignore" {
		t.Errorf("inferred schema %q", got)
	}
	// No column named label, and the last one (tags) cannot be one.
	type noLabel struct {
		Age  float64 `parquet:"age"`
		Addr struct {
			City string `parquet:"city"`
		} `parquet:"addr"`
		Tag string `parquet:"tag"`
	}
	other := filepath.Join(filepath.Dir(path), "other.parquet")
	if err := parquet.WriteFile(other, []noLabel{{Age: 1, Tag: "x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(other); err == nil || !strings.Contains(err.Error(), `column "tag" is BYTE_ARRAY, which label columns do not read`) ||
		!strings.Contains(err.Error(), "no schema given, so age:num,addr:ignore,tag:label; give one") {
		t.Errorf("a file whose label cannot be inferred: %v", err)
	}
	if _, err := Open("parquet://" + other + "?schema=tag:cat,addr:num,age:label"); err == nil || !strings.Contains(err.Error(), `column "addr" is a group`) {
		t.Errorf("a group column: %v", err)
	}
	b, err := p.Read(0, 2)
	if err != nil || b.N != 2 || !slices.Equal(b.Labels, []int32{1, 0}) || !slices.Equal(b.Features, []float32{30, 40.5}) {
		t.Fatalf("read: %v, %+v", err, b)
	}
}

// TestParquetBadInput: each structural problem is one error naming the
// file (and the column).
func TestParquetBadInput(t *testing.T) {
	src, err := Open("synthetic-ctr://?records=500&dense=2&categorical=1&pairs=0&seed=1")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	exportParquetFile(t, src, 0, 500, 100, good)
	whole, _ := os.ReadFile(good)
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	notParquet := write("text.parquet", []byte("label,x\n1,2\n"))
	truncated := write("cut.parquet", whole[:len(whole)/2])
	badDir := filepath.Join(dir, "mixed")
	write("mixed/a.parquet", whole)
	write("mixed/b.parquet", whole[:len(whole)-3])
	emptyDir := filepath.Join(dir, "empty")
	os.Mkdir(emptyDir, 0o755)
	for _, tc := range []struct{ uri, want string }{
		{notParquet, notParquet + ": not a Parquet file, or a truncated or damaged one"},
		{truncated, truncated + ": not a Parquet file, or a truncated or damaged one"},
		{badDir, filepath.Join(badDir, "b.parquet") + ": not a Parquet file"},
		{"parquet://" + emptyDir, "no *.parquet file in the directory"},
		{"parquet://" + good + "?schema=label:label,nope:num", good + `: column "nope" (num in the schema) is not in the file`},
		{"parquet://" + good + "?schema=label:label,f1:id", good + `: column "f1" is FLOAT, which id columns do not read`},
		{"parquet://" + good + "?schema=label:label,c1:num&x=1", `unknown parameter "x"`},
		{"parquet://" + good + "?schema=f1:num", "no label column"},
		{filepath.Join(dir, "missing.parquet"), "stat " + filepath.Join(dir, "missing.parquet") + ": no such file"},
	} {
		p, err := Open(tc.uri)
		if err == nil {
			p.Close()
			t.Errorf("%s: opened", tc.uri)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%s:\n got %v\nwant %s", tc.uri, err, tc.want)
		}
	}
	p, err := Open(good)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Read(400, 501); !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), good) {
		t.Errorf("read past the end: %v", err)
	}
	// A damaged page (its header overwritten), the footer whole: an error
	// at Read naming the file, the row group and the column.
	damaged := slices.Clone(whole)
	copy(damaged[4:64], bytes.Repeat([]byte{0xff}, 60))
	p, err = Open(write("damaged.parquet", damaged))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Read(0, 10); err == nil || !strings.Contains(err.Error(), "damaged.parquet: row group 0: column ") {
		t.Errorf("a damaged page: %v", err)
	}
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReaderAt) ReadAt(b []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(b, off)
	c.n.Add(int64(n))
	return n, err
}

// TestParquetReadSkipsEarlierRowGroups reads the last record of a file of
// 50 row groups: it reads that record's pages, not the file.
func TestParquetReadSkipsEarlierRowGroups(t *testing.T) {
	src, err := Open("synthetic-ctr://?records=50000&dense=8&categorical=4&pairs=2&seed=2")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "big.parquet")
	exportParquetFile(t, src, 0, 50000, 1000, path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	counter := &countingReaderAt{r: f}
	pf, err := openParquetReader(path, counter, st.Size(), f)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newParquet(path, []*parquetFile{pf}, Schema{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	footer := counter.n.Swap(0)
	got, err := p.Read(49999, 50000)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := src.Read(49999, 50000)
	sameRecords(t, "last record", got, want, 0)
	read := counter.n.Load()
	t.Logf("file %d bytes; open read %d (footer, page index), Read of the last record %d", st.Size(), footer, read)
	if read > st.Size()/20 || footer > st.Size()/10 {
		t.Errorf("read %d bytes for one record and %d at open, of a %d-byte file: want a few pages", read, footer, st.Size())
	}
}

// TestParquetPagesV1Dictionary reads a file as other writers make them:
// data pages v1, a dictionary-encoded string column, many pages a row
// group; with its offset index and without (then a chunk is read from
// its start): the records the schema CSV reader gives for the same values.
func TestParquetPagesV1Dictionary(t *testing.T) {
	ps := parquet.NewSchema("t", parquet.Group{
		"y": parquet.Leaf(parquet.Int32Type),
		"x": parquet.Leaf(parquet.DoubleType),
		"s": parquet.Encoded(parquet.String(), &parquet.RLEDictionary),
	})
	col := func(name string) int { l, _ := ps.Lookup(name); return l.ColumnIndex }
	var out bytes.Buffer
	var lines []string
	w := parquet.NewWriter(&out, ps, parquet.DataPageVersion(1), parquet.PageBufferSize(512), parquet.MaxRowsPerRowGroup(1500))
	for i := range 5000 {
		y, x, s := int32(i%3), float64(i)*0.25-7, fmt.Sprintf("v%d", i%13)
		row := make(parquet.Row, 3)
		row[col("y")] = parquet.Int32Value(y).Level(0, 0, col("y"))
		row[col("x")] = parquet.DoubleValue(x).Level(0, 0, col("x"))
		row[col("s")] = parquet.ByteArrayValue([]byte(s)).Level(0, 0, col("s"))
		if _, err := w.WriteRows([]parquet.Row{row}); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("%d,%g,%s", y, x, s))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, csvPath := filepath.Join(dir, "v1.parquet"), filepath.Join(dir, "v1.csv")
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(csvPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	schema, _ := ParseSchema("y:label,x:num,s:hash(100)")
	c, err := OpenCSVSchema(csvPath, schema, CSVOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, index := range []bool{true, false} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		pf, err := openParquetReader(path, f, int64(out.Len()), f, parquet.SkipPageIndex(!index))
		if err != nil {
			t.Fatal(err)
		}
		p, err := newParquet(path, []*parquetFile{pf}, schema)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]int64{{0, 5000}, {1499, 1501}, {2222, 3777}, {4999, 5000}, {700, 701}} {
			got, err := p.Read(r[0], r[1])
			if err != nil {
				t.Fatalf("page index %v: %v", index, err)
			}
			want, _ := c.Read(r[0], r[1])
			sameRecords(t, fmt.Sprintf("page index %v, [%d,%d)", index, r[0], r[1]), got, want, 0)
		}
		p.Close()
	}
}
