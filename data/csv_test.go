package data

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func writeCSV(t testing.TB, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data.csv")
	writeFile(t, path, []byte(content))
	return path
}

func openCSV(t *testing.T, content string, opts CSVOptions) *CSV {
	t.Helper()
	c, err := OpenCSV(writeCSV(t, content), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCSVDecode(t *testing.T) {
	cases := []struct {
		name    string
		content string
		opts    CSVOptions
		cols    []string
		label   int
		feats   []float32
		labels  []int32
	}{
		{"no header, label last", "1,2,3\n4,5,6\n", CSVOptions{},
			[]string{"c0", "c1", "c2"}, 2, []float32{1, 2, 4, 5}, []int32{3, 6}},
		{"no header, label by index", "1,2,3\n4,5,6\n", CSVOptions{LabelColumn: "0"},
			[]string{"c0", "c1", "c2"}, 0, []float32{2, 3, 5, 6}, []int32{1, 4}},
		{"header, label by name", "a,y,b\n1,7,2\n3,8,4\n", CSVOptions{HasHeader: true, LabelColumn: "y"},
			[]string{"a", "y", "b"}, 1, []float32{1, 2, 3, 4}, []int32{7, 8}},
		{"header, label by index", "a,y,b\n1,7,2\n", CSVOptions{HasHeader: true, LabelColumn: "1"},
			[]string{"a", "y", "b"}, 1, []float32{1, 2}, []int32{7}},
		{"header, label last", "a,b,y\n1,2,7\n", CSVOptions{HasHeader: true},
			[]string{"a", "b", "y"}, 2, []float32{1, 2}, []int32{7}},
		{"name wins over index", "2,0,1\n5,6,7\n", CSVOptions{HasHeader: true, LabelColumn: "2"},
			[]string{"2", "0", "1"}, 0, []float32{6, 7}, []int32{5}},
		{"quoted fields with commas", "\"x, 1\",\"label, y\"\n\"1.5\",\"3\"\n", CSVOptions{HasHeader: true, LabelColumn: "label, y"},
			[]string{"x, 1", "label, y"}, 1, []float32{1.5}, []int32{3}},
		{"semicolon", "1;2.5;3\n", CSVOptions{Comma: ';'},
			[]string{"c0", "c1", "c2"}, 2, []float32{1, 2.5}, []int32{3}},
		{"tab", "1\t2\t3\n", CSVOptions{Comma: '\t', LabelColumn: "1"},
			[]string{"c0", "c1", "c2"}, 1, []float32{1, 3}, []int32{2}},
		{"multi-byte separator", "a§\"b§\n\"§y\n1§2§3\n", CSVOptions{Comma: '§', HasHeader: true},
			[]string{"a", "b§\n", "y"}, 2, []float32{1, 2}, []int32{3}},
		{"CRLF, blank lines, no final newline", "\r\n1,2\r\n\r\n\n3,4\r\n\n5,6", CSVOptions{},
			[]string{"c0", "c1"}, 1, []float32{1, 3, 5}, []int32{2, 4, 6}},
		{"BOM before header", "\ufeffa,y\n1,2\n", CSVOptions{HasHeader: true, LabelColumn: "a"},
			[]string{"a", "y"}, 0, []float32{2}, []int32{1}},
		{"spaces, float label, exponent", " 1 , -2e-3 ,3.0\n", CSVOptions{},
			[]string{"c0", "c1", "c2"}, 2, []float32{1, -2e-3}, []int32{3}},
		{"label only", "y\n4\n5\n", CSVOptions{HasHeader: true},
			[]string{"y"}, 0, []float32{}, []int32{4, 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := openCSV(t, tc.content, tc.opts)
			if !slices.Equal(c.Columns(), tc.cols) || c.LabelColumn() != tc.label {
				t.Fatalf("columns %q label %d, want %q %d", c.Columns(), c.LabelColumn(), tc.cols, tc.label)
			}
			if c.Len() != int64(len(tc.labels)) || !slices.Equal(c.FeatureShape(), []int{len(tc.cols) - 1}) {
				t.Fatalf("Len %d shape %v", c.Len(), c.FeatureShape())
			}
			b, err := c.Read(0, c.Len())
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Corrupt) > 0 {
				t.Fatalf("corrupt: %v", b.Corrupt[0])
			}
			if b.N != len(tc.labels) || !slices.Equal(b.Features, tc.feats) || !slices.Equal(b.Labels, tc.labels) {
				t.Fatalf("N %d features %v labels %v, want %v %v", b.N, b.Features, b.Labels, tc.feats, tc.labels)
			}
			for i, rec := range b.Index {
				if rec != int64(i) {
					t.Fatalf("Index %v", b.Index)
				}
			}
		})
	}
}

func TestCSVCorruptRecords(t *testing.T) {
	content := "a,b,y\n" +
		"1,2,0\n" + // 0
		"1,2\n" + // 1: too few fields
		"1,x,1\n" + // 2: not a number
		"3,4,5\n" + // 3
		"1,2,cat\n" + // 4: bad label
		"NaN,2,1\n" + // 5: non-finite
		"1,2,3,4\n" + // 6: too many fields
		"1,2\"3,1\n" + // 7: bare quote
		"\"1\"x,2,1\n" + // 8: text after a closing quote
		"1,1e39,1\n" + // 9: overflows float32
		"1,2,2.5\n" + // 10: fractional label
		"7,8,9\n" + // 11
		"1,\"2,\n3\n" // 12: unterminated quote runs to the end
	c := openCSV(t, content, CSVOptions{HasHeader: true})
	if c.Len() != 13 {
		t.Fatalf("Len %d, want 13", c.Len())
	}
	b, err := c.Read(0, 13)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Index, []int64{0, 3, 11}) || !slices.Equal(b.Labels, []int32{0, 5, 9}) ||
		!slices.Equal(b.Features, []float32{1, 2, 3, 4, 7, 8}) || b.N != 3 {
		t.Fatalf("valid records: N %d index %v labels %v features %v", b.N, b.Index, b.Labels, b.Features)
	}
	want := map[int64]string{
		1:  "got 2 fields, want 3",
		2:  `column 1 (b): strconv.ParseFloat: parsing "x": invalid syntax`,
		4:  `label column 2 (y)`,
		5:  `column 0 (a): non-finite value "NaN"`,
		6:  "got 4 fields, want 3",
		7:  `malformed CSV: bare " in non-quoted-field`,
		8:  `malformed CSV: extraneous or missing " in quoted-field`,
		9:  `column 1 (b): strconv.ParseFloat: parsing "1e39": value out of range`,
		10: `label column 2 (y)`,
		12: `malformed CSV`,
	}
	if len(b.Corrupt) != len(want) {
		t.Fatalf("%d corrupt records, want %d: %v", len(b.Corrupt), len(want), b.Corrupt)
	}
	for _, re := range b.Corrupt {
		w, ok := want[re.Record]
		prefix := fmt.Sprintf("%s: record %d: ", c.Name(), re.Record)
		if !ok || !strings.HasPrefix(re.Error(), prefix+w) {
			t.Errorf("corrupt %q, want prefix %q", re, prefix+w)
		}
	}
	if re := b.Corrupt[5]; !errors.Is(re, csv.ErrBareQuote) || re.Record != 7 {
		t.Errorf("record 7 should wrap csv.ErrBareQuote: %v", re)
	}
	// The same records are corrupt when read as small tasks.
	for start := int64(0); start < 13; start += 3 {
		end := min(start+3, 13)
		part, err := c.Read(start, end)
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range part.Corrupt {
			if _, ok := want[re.Record]; !ok || re.Record < start || re.Record >= end {
				t.Errorf("Read(%d,%d): unexpected corrupt record %v", start, end, re)
			}
		}
	}
	// ReadRows is strict about quoting only; the field count is the caller's business.
	rows, err := c.ReadRows(1, 3)
	if err != nil || !slices.Equal(rows[0], []string{"1", "2"}) {
		t.Errorf("ReadRows(1,3) = %q, %v", rows, err)
	}
	var re *RecordError
	if _, err := c.ReadRows(6, 9); !errors.As(err, &re) || re.Record != 7 {
		t.Errorf("ReadRows(6,9): want a RecordError for record 7, got %v", err)
	}
}

// genCSV makes n records with 3 features and a label, with the usual
// nuisances: quoted numbers, CRLF, blank lines, quoted fields spanning lines,
// and some corrupt records. It returns the content and, per record, the
// label or -1 for a corrupt record.
func genCSV(rng *rand.Rand, n int) (string, []int32) {
	var sb strings.Builder
	sb.WriteString("f0,\"f,1\",f2,label\n")
	labels := make([]int32, n)
	for i := range n {
		nl := "\n"
		if rng.IntN(4) == 0 {
			nl = "\r\n"
		}
		if rng.IntN(10) == 0 {
			sb.WriteString(nl) // blank line: not a record
		}
		labels[i] = int32(rng.IntN(10))
		switch rng.IntN(12) {
		case 0: // a text field spanning lines: parses, but not as a number
			fmt.Fprintf(&sb, "1,\"two\nlines, \"\"quoted\"\"\",3,%d%s", labels[i], nl)
			labels[i] = -1
		case 1:
			fmt.Fprintf(&sb, "1,2,%d%s", labels[i], nl)
			labels[i] = -1
		case 2:
			fmt.Fprintf(&sb, "1,2\"x,3,%d%s", labels[i], nl)
			labels[i] = -1
		default:
			fmt.Fprintf(&sb, "%d,\"%d.5\",-%d,%d%s", i, i, i, labels[i], nl)
		}
	}
	return sb.String(), labels
}

func TestCSVRandomAccess(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	content, labels := genCSV(rng, 2000)
	c := openCSV(t, content, CSVOptions{HasHeader: true})
	if !slices.Equal(c.Columns(), []string{"f0", "f,1", "f2", "label"}) || c.Len() != 2000 {
		t.Fatalf("columns %q Len %d", c.Columns(), c.Len())
	}
	full, err := c.Read(0, c.Len())
	if err != nil {
		t.Fatal(err)
	}
	var wantIndex, wantCorrupt []int64
	for i, l := range labels {
		if l < 0 {
			wantCorrupt = append(wantCorrupt, int64(i))
		} else {
			wantIndex = append(wantIndex, int64(i))
		}
	}
	var gotCorrupt []int64
	for _, re := range full.Corrupt {
		gotCorrupt = append(gotCorrupt, re.Record)
	}
	if !slices.Equal(full.Index, wantIndex) || !slices.Equal(gotCorrupt, wantCorrupt) {
		t.Fatalf("full read: %d valid, %d corrupt; want %d, %d", len(full.Index), len(gotCorrupt), len(wantIndex), len(wantCorrupt))
	}
	for k, rec := range full.Index {
		want := []float32{float32(rec), float32(rec) + 0.5, -float32(rec)}
		if full.Labels[k] != labels[rec] || !slices.Equal(full.Features[3*k:3*k+3], want) {
			t.Fatalf("record %d: label %d features %v", rec, full.Labels[k], full.Features[3*k:3*k+3])
		}
	}

	ref := refRecords(t, []byte(content), ',')[1:] // without the header
	for range 300 {
		start := rng.Int64N(c.Len() + 1)
		end := start + rng.Int64N(min(c.Len()-start, 40)+1)
		b, err := c.Read(start, end)
		if err != nil {
			t.Fatal(err)
		}
		lo, _ := slices.BinarySearch(full.Index, start)
		hi, _ := slices.BinarySearch(full.Index, end)
		if !slices.Equal(b.Index, full.Index[lo:hi]) || !slices.Equal(b.Labels, full.Labels[lo:hi]) ||
			!slices.Equal(b.Features, full.Features[3*lo:3*hi]) {
			t.Fatalf("Read(%d,%d) differs from the full read", start, end)
		}
		// Raw rows agree with a sequential encoding/csv pass, where quoting allows.
		rows, err := c.ReadRows(start, end)
		if slices.ContainsFunc(ref[start:end], func(r []string) bool { return r == nil }) {
			if err == nil {
				t.Fatalf("ReadRows(%d,%d): want an error for the malformed record", start, end)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, row := range rows {
			if !slices.Equal(row, ref[start+int64(i)]) {
				t.Fatalf("ReadRows(%d,%d)[%d] = %q, want %q", start, end, i, row, ref[start+int64(i)])
			}
		}
	}
}

// refRecords reads data with one sequential encoding/csv reader, going on
// after parse errors; a nil entry is a record that failed to parse.
func refRecords(t testing.TB, data []byte, comma rune) [][]string {
	t.Helper()
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(data, []byte("\ufeff"))))
	r.Comma = comma
	r.FieldsPerRecord = -1
	var out [][]string
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return out
		}
		var pe *csv.ParseError
		if err != nil && !errors.As(err, &pe) {
			t.Fatalf("encoding/csv: %v", err)
		}
		if err != nil {
			rec = nil
		}
		out = append(out, rec)
	}
}

// checkAgainstReference opens data as a CSV file and checks that every
// record, read on its own by random access, is exactly what a sequential
// encoding/csv pass yields, and that Read accounts for every record.
func checkAgainstReference(t *testing.T, data []byte, comma rune, header bool) {
	t.Helper()
	ref := refRecords(t, data, comma)
	path := filepath.Join(t.TempDir(), "f.csv")
	writeFile(t, path, data)
	c, err := OpenCSV(path, CSVOptions{Comma: comma, HasHeader: header})
	if len(ref) == 0 || ref[0] == nil { // nothing to take the columns from
		if err == nil {
			c.Close()
			t.Fatalf("open succeeded with no parseable first record (ref %q)", ref)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wantCols := ref[0]
	if !header {
		wantCols = make([]string, len(ref[0]))
		for i := range wantCols {
			wantCols[i] = fmt.Sprintf("c%d", i)
		}
	}
	if !slices.Equal(c.Columns(), wantCols) {
		t.Fatalf("columns %q, want %q", c.Columns(), wantCols)
	}
	if header {
		ref = ref[1:]
	}
	if c.Len() != int64(len(ref)) {
		t.Fatalf("Len %d, encoding/csv finds %d records", c.Len(), len(ref))
	}
	for i, want := range ref {
		rows, err := c.ReadRows(int64(i), int64(i+1))
		var re *RecordError
		switch {
		case want == nil && (!errors.As(err, &re) || re.Record != int64(i)):
			t.Fatalf("record %d: want a RecordError, got %v", i, err)
		case want != nil && (err != nil || !slices.Equal(rows[0], want)):
			t.Fatalf("record %d: got %q, %v; want %q", i, rows, err, want)
		}
	}
	b, err := c.Read(0, c.Len())
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, c.Len())
	for _, rec := range b.Index {
		seen[rec] = true
		if w := ref[rec]; w == nil || len(w) != len(c.Columns()) {
			t.Fatalf("record %d (%q) decoded as valid", rec, w)
		}
	}
	for _, re := range b.Corrupt {
		if seen[re.Record] {
			t.Fatalf("record %d both valid and corrupt", re.Record)
		}
		seen[re.Record] = true
	}
	if slices.Contains(seen, false) || b.N != len(b.Index) || len(b.Features) != b.N*(len(c.Columns())-1) {
		t.Fatalf("Read(0,Len) does not account for every record once: N %d corrupt %d of %d", b.N, len(b.Corrupt), c.Len())
	}
}

// Inputs where record boundaries are easy to get wrong.
var trickyCSV = []string{
	"a,b\n\"1\n2\",3\n\n\"x\"\"y\",\"\"\n",
	"\"a\"b,c\n\"d\ne\",f\n",    // text after a closing quote: the line ends the record
	"a\"b,\"c\nd\",e\nf,g\n",    // bare quote: the quote in the next field does not open
	"\"a\"\r\nb\r\n\r\n\rc\r\n", // CR handling
	"x\n\r",
	"x\r\n\r",
	"\r\r\n1\n\r\r",
	"\"unterminated\n1,2\n3,4\n",
	"1,\"2\",\"3\"\"\n\"\n",
	"\ufeff\"a\",b\n",
	"\"\"\"\n\"\n",
	"a,\"\",\"\n\",\"\"\"\"\n",
}

func TestCSVMatchesEncodingCSV(t *testing.T) {
	for i, s := range trickyCSV {
		for _, header := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/header=%v", i, header), func(t *testing.T) {
				checkAgainstReference(t, []byte(s), ',', header)
				for _, comma := range []rune{';', '§', '€', '😀'} {
					checkAgainstReference(t, []byte(strings.ReplaceAll(s, ",", string(comma))), comma, header)
				}
			})
		}
	}
	content, _ := genCSV(rand.New(rand.NewPCG(3, 4)), 300)
	checkAgainstReference(t, []byte(content), ',', true)
}

// The index is built in chunks; a quote, separator or CRLF split across
// chunks must not change it.
func TestCSVIndexChunkBoundaries(t *testing.T) {
	content, _ := genCSV(rand.New(rand.NewPCG(5, 6)), 200)
	inputs := append(slices.Clone(trickyCSV), content)
	for _, s := range inputs {
		for _, comma := range []rune{',', '§', '😀'} {
			s := strings.ReplaceAll(s, ",", string(comma))
			want, err := indexCSV(strings.NewReader(s), comma, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			for chunk := 1; chunk <= 9; chunk++ {
				got, err := indexCSV(strings.NewReader(s), comma, chunk)
				if err != nil || !slices.Equal(got, want) {
					t.Fatalf("chunk %d, %q: %v, %v; want %v", chunk, s, got, err, want)
				}
			}
		}
	}
}

func TestCSVOpenErrors(t *testing.T) {
	cases := []struct {
		name, content string
		opts          CSVOptions
		want          string
	}{
		{"empty", "", CSVOptions{}, "empty file"},
		{"blank lines only", "\n\r\n\n", CSVOptions{HasHeader: true}, "empty file"},
		{"label name not found", "a,b\n1,2\n", CSVOptions{HasHeader: true, LabelColumn: "y"},
			`label column "y" not found: want a header name or a zero-based index (columns: a, b)`},
		{"label name without header", "1,2\n", CSVOptions{LabelColumn: "y"}, `label column "y" not found`},
		{"label index out of range", "1,2\n", CSVOptions{LabelColumn: "2"}, "label column 2 out of range: have 2 columns"},
		{"long column list", "c0,c1,c2,c3,c4,c5,c6,c7,c8,c9,c10,c11\n", CSVOptions{HasHeader: true, LabelColumn: "z"},
			"c9, ... (12 columns)"},
		{"bad separator", "1,2\n", CSVOptions{Comma: '"'}, "invalid CSV separator"},
		{"malformed header", "a,\"b\n", CSVOptions{HasHeader: true}, "cannot read the column names"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeCSV(t, tc.content)
			_, err := OpenCSV(path, tc.opts)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s and containing %q", err, path, tc.want)
			}
		})
	}
	if _, err := OpenCSV(filepath.Join(t.TempDir(), "none.csv"), CSVOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: got %v", err)
	}
}

func TestCSVRangeAndClose(t *testing.T) {
	c := openCSV(t, "a,y\n", CSVOptions{HasHeader: true}) // header only: zero records is fine
	if c.Len() != 0 {
		t.Fatalf("Len %d", c.Len())
	}
	if b, err := c.Read(0, 0); err != nil || b.N != 0 || !slices.Equal(b.FeatureShape, []int{1}) {
		t.Fatalf("Read(0,0) = %+v, %v", b, err)
	}
	c = openCSV(t, "1,2\n3,4\n", CSVOptions{})
	for _, r := range [][2]int64{{1, 0}, {-1, 1}, {0, 3}, {3, 3}} {
		if _, err := c.Read(r[0], r[1]); !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), c.Name()) {
			t.Errorf("Read(%d,%d): got %v", r[0], r[1], err)
		}
		if _, err := c.ReadRows(r[0], r[1]); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("ReadRows(%d,%d): got %v", r[0], r[1], err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(0, 1); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
	if _, err := c.ReadRows(0, 1); !errors.Is(err, os.ErrClosed) {
		t.Errorf("ReadRows after Close: %v", err)
	}
}

func TestCSVShrunkAfterOpen(t *testing.T) {
	path := writeCSV(t, "1,2\n3,4\n5,6\n7,8\n")
	c, err := OpenCSV(path, CSVOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := os.Truncate(path, 9); err != nil { // record 2 cut short
		t.Fatal(err)
	}
	_, err = c.Read(1, 4)
	var re *RecordError
	if !errors.As(err, &re) || re.Record != 2 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("want a RecordError for record 2 wrapping io.ErrUnexpectedEOF, got %v", err)
	}
}

func TestCSVConcurrentReads(t *testing.T) {
	content, _ := genCSV(rand.New(rand.NewPCG(7, 8)), 1000)
	c := openCSV(t, content, CSVOptions{HasHeader: true})
	full, err := c.Read(0, c.Len())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 50 {
				start := rng.Int64N(c.Len())
				end := min(start+64, c.Len())
				b, err := c.Read(start, end)
				if err != nil {
					t.Error(err)
					return
				}
				lo, _ := slices.BinarySearch(full.Index, start)
				hi, _ := slices.BinarySearch(full.Index, end)
				if !slices.Equal(b.Index, full.Index[lo:hi]) || !slices.Equal(b.Features, full.Features[3*lo:3*hi]) {
					t.Errorf("Read(%d,%d) differs from the full read", start, end)
					return
				}
			}
		})
	}
	wg.Wait()
}
