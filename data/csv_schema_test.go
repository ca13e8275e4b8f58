package data

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

const testSchema = "y:label,i1:num,c1:cat,skip:ignore,i2:num,c2:hash(10),c3:cat(a|b)"

func mustSchema(t testing.TB, s string) Schema {
	t.Helper()
	sc, err := ParseSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func mustID(t testing.TB, s Schema, col int, value string) int64 {
	t.Helper()
	id, err := s.CategoricalID(col, value)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSchemaCSVDecode(t *testing.T) {
	sc := mustSchema(t, testSchema)
	body := "1,0.5,foo,zzz,,bar,b\n" +
		" 0 , -2e-3 , foo ,, 3 ,  bar , c \n" +
		"7,1e3,,\"q,uoted\",-1,,a\n"
	for _, header := range []bool{false, true} {
		content := body
		if header {
			content = "y, i1 ,c1,skip,i2,c2,c3\n" + body // spaces around header names are ignored
		}
		path := writeCSV(t, content)
		s, err := OpenCSVSchema(path, sc, CSVOptions{HasHeader: header})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if s.Len() != 3 || !slices.Equal(s.FeatureShape(), []int{2}) || s.NumCategorical() != 3 || s.IDBound() != 0 || s.Name() != path {
			t.Fatalf("header %v: Len %d shape %v categorical %d bound %d name %q", header,
				s.Len(), s.FeatureShape(), s.NumCategorical(), s.IDBound(), s.Name())
		}
		b, err := s.Read(0, 3)
		if err != nil {
			t.Fatal(err)
		}
		foo, bar := mustID(t, sc, 2, "foo"), mustID(t, sc, 5, "bar")
		// c2 owns ids [0,10), c3 [10,13): a=10, b=11, anything else 12.
		wantIDs := []int64{foo, bar, 11, foo, bar, 12, mustID(t, sc, 2, ""), mustID(t, sc, 5, ""), 10}
		if bar < 0 || bar >= 10 || foo < 1<<62 {
			t.Fatalf("ids out of their ranges: c1 %d, c2 %d", foo, bar)
		}
		if b.N != 3 || len(b.Corrupt) != 0 ||
			!slices.Equal(b.Features, []float32{0.5, 0, -2e-3, 3, 1e3, -1}) ||
			!slices.Equal(b.Labels, []int32{1, 0, 7}) || !slices.Equal(b.Index, []int64{0, 1, 2}) ||
			b.NumCategorical != 3 || !slices.Equal(b.Categorical, wantIDs) {
			t.Errorf("header %v: batch %+v\nwant ids %v", header, b, wantIDs)
		}
		if b, err := s.Read(1, 2); err != nil || !slices.Equal(b.Categorical, wantIDs[3:6]) || !slices.Equal(b.Index, []int64{1}) {
			t.Errorf("header %v: Read(1,2) = %+v, %v", header, b, err)
		}
	}
	// Without a cat column the id space is bounded: 10 hash ids + 2+1 vocabulary ids.
	bounded := mustSchema(t, "y:label,c2:hash(10),c3:cat(a|b)")
	s, err := OpenCSVSchema(writeCSV(t, "1,x,a\n"), bounded, CSVOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.IDBound() != 13 || !slices.Equal(s.FeatureShape(), []int{0}) {
		t.Errorf("IDBound %d shape %v, want 13 [0]", s.IDBound(), s.FeatureShape())
	}
	if !reflect.DeepEqual(s.Schema(), bounded) {
		t.Errorf("Schema() = %v, want %v", s.Schema(), bounded)
	}
}

func TestSchemaCSVCorruptRecords(t *testing.T) {
	sc := mustSchema(t, testSchema)
	content := "1,0.5,foo,z,1,bar,b\n" + // 0 good
		"1,0.5,foo,z,1,bar\n" + // 1 too few fields
		"1,abc,foo,z,1,bar,b\n" + // 2 numeric not a number
		"1,0.5,foo,z,NaN,bar,b\n" + // 3 non-finite
		",0.5,foo,z,1,bar,b\n" + // 4 empty label
		"x,0.5,foo,z,1,bar,b\n" + // 5 label not a number
		"1,0.5,f\"oo,z,1,bar,b\n" + // 6 bad quote
		"0,2,,z,3,,a\n" // 7 good
	s, err := OpenCSVSchema(writeCSV(t, content), sc, CSVOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := s.Read(0, s.Len())
	if err != nil {
		t.Fatal(err)
	}
	if b.N != 2 || !slices.Equal(b.Index, []int64{0, 7}) || !slices.Equal(b.Labels, []int32{1, 0}) ||
		!slices.Equal(b.Features, []float32{0.5, 1, 2, 3}) || len(b.Categorical) != 2*3 || b.Categorical[5] != 10 {
		t.Fatalf("corrupt records left traces in the batch: %+v", b)
	}
	want := []struct {
		rec  int64
		text string
	}{
		{1, "got 6 fields, want 7"},
		{2, `num column 1 (i1): strconv.ParseFloat: parsing "abc"`},
		{3, `num column 4 (i2): non-finite value "NaN"`},
		{4, `label column 0 (y)`},
		{5, `label column 0 (y): strconv.ParseInt: parsing "x"`},
		{6, "malformed CSV"},
	}
	if len(b.Corrupt) != len(want) {
		t.Fatalf("corrupt records %v, want %d", b.Corrupt, len(want))
	}
	for i, w := range want {
		e := b.Corrupt[i]
		if e.Record != w.rec || e.Source != s.Name() || !strings.Contains(e.Error(), w.text) {
			t.Errorf("corrupt %d: %v, want record %d with %q", i, e, w.rec, w.text)
		}
	}
}

func TestSchemaCSVOpenErrors(t *testing.T) {
	sc := mustSchema(t, "y:label,i1:num,c1:cat")
	cases := []struct {
		name, content string
		opts          CSVOptions
		want          string
	}{
		{"header too long", "y,i1,c1,extra\n1,2,3,4\n", CSVOptions{HasHeader: true},
			`the header has 4 columns but the schema has 3: header column 3 "extra" is not in the schema`},
		{"header too short", "y,i1\n1,2\n", CSVOptions{HasHeader: true},
			`the header has 2 columns but the schema has 3: schema column 2 "c1" is not in the header`},
		{"header names differ", "y,c1,i1\n1,2,3\n", CSVOptions{HasHeader: true},
			`header column 1 is "c1" but schema column 1 is "i1"`},
		{"header shifted and longer", "id,y,i1,c1\n0,1,2,3\n", CSVOptions{HasHeader: true},
			`the header has 4 columns but the schema has 3: header column 0 is "id" but schema column 0 is "y"`},
		{"first record too short", "1,2\n", CSVOptions{},
			`the first record has 2 fields but the schema has 3 columns: schema column 2 "c1" has no field`},
		{"first record too long", "1,2,3,4\n", CSVOptions{},
			"the first record has 4 fields but the schema has 3 columns: field 3 has no schema column"},
		{"label column option", "1,2,3\n", CSVOptions{LabelColumn: "y"}, "schema's label column is used"},
		{"empty file", "", CSVOptions{}, "empty file"},
	}
	for _, tc := range cases {
		path := writeCSV(t, tc.content)
		s, err := OpenCSVSchema(path, sc, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: OpenCSVSchema = %v, %v; want an error naming the file and containing %q", tc.name, s, err, tc.want)
		}
	}
	if _, err := OpenCSVSchema(writeCSV(t, "1\n"), Schema{Columns: []Column{{Name: "a", Kind: Numeric}}}, CSVOptions{}); err == nil ||
		!strings.Contains(err.Error(), "no label column") {
		t.Errorf("schema without label: %v", err)
	}
	if _, err := OpenCSVSchema(filepath.Join(t.TempDir(), "none.csv"), sc, CSVOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestSchemaCSVURI(t *testing.T) {
	dir := t.TempDir()
	tsv := filepath.Join(dir, "train.txt") // no .csv: the URI, not the name, picks the reader
	writeFile(t, tsv, []byte("1\t0.5\tab\n0\t\tcd\n"))
	uri := "csv://" + tsv + "?comma=tab&schema=" + url.QueryEscape("y:label,i{1..1}:num,c1:hash(100)")
	src, err := Open(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	s, ok := src.(*SchemaCSV)
	if !ok || s.Name() != uri || s.Len() != 2 || s.IDBound() != 100 {
		t.Fatalf("Open(%q) = %T %+v", uri, src, src)
	}
	b, err := s.Read(0, 2)
	if err != nil || !slices.Equal(b.Features, []float32{0.5, 0}) || !slices.Equal(b.Labels, []int32{1, 0}) || len(b.Categorical) != 2 {
		t.Fatalf("Read = %+v, %v", b, err)
	}

	semi := filepath.Join(dir, "h.csv")
	writeFile(t, semi, []byte("y;c\n1;x\n"))
	s2, err := OpenCSVURI("csv://" + semi + "?header=true&comma=%3B&schema=y:label,c:cat(x)")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if b, err := s2.Read(0, 1); err != nil || !slices.Equal(b.Categorical, []int64{0}) {
		t.Errorf("header+semicolon: %+v, %v", b, err)
	}

	for _, tc := range []struct{ uri, want string }{
		{"csv://" + tsv, "no schema"},
		{"csv://?schema=y:label", "no file path"},
		{"csv://" + tsv + "?schema=y:label&sep=x", `unknown parameter "sep"`},
		{"csv://" + tsv + "?schema=y:label&header=maybe", `header="maybe"`},
		{"csv://" + tsv + "?schema=y:label&comma=ab", `comma="ab"`},
		{"csv://" + tsv + "?schema=y:label&schema=y:label", `parameter "schema" given 2 times`},
		{"csv://" + tsv + "?schema=y:nope", `unknown kind "nope"`},
		{"csv://" + tsv + "?schema=y:label;x", "query"},
		{"csv://" + filepath.Join(dir, "none") + "?schema=y:label", "no such file"},
	} {
		src, err := Open(tc.uri)
		if src != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, %v; want an error containing %q", tc.uri, src, err, tc.want)
		}
	}
}

func TestSchemaCSVCloseAndConcurrentReads(t *testing.T) {
	var sb strings.Builder
	for i := range 500 {
		sb.WriteString(strings.Repeat("x", i%7) + "," + string(rune('0'+i%2)) + "\n")
	}
	s, err := OpenCSVSchema(writeCSV(t, sb.String()), mustSchema(t, "c:hash(50),y:label"), CSVOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.Read(0, s.Len())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for lo := int64(w); lo < s.Len(); lo += 37 {
				hi := min(lo+37, s.Len())
				b, err := s.Read(lo, hi)
				if err != nil {
					t.Error(err)
					return
				}
				if !slices.Equal(b.Categorical, want.Categorical[lo:hi]) || !slices.Equal(b.Labels, want.Labels[lo:hi]) {
					t.Errorf("Read(%d,%d) differs from the whole read", lo, hi)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(0, 1); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
	if _, err := s.Read(0, s.Len()+1); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("Read past the end: %v", err)
	}
}

// FuzzSchemaCSV checks that arbitrary bytes never panic the schema reader,
// that every batch is consistent (no partial records from corrupt ones),
// and that records do not depend on the range they are read in.
func FuzzSchemaCSV(f *testing.F) {
	for _, s := range trickyCSV {
		f.Add([]byte(s))
	}
	f.Add([]byte("1,0.5,foo,zzz,,bar,b\n0,x,,,,,\n,1,2,3,4,5,6\n1,2,3\n"))
	sc := mustSchema(f, testSchema)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := OpenCSVSchema(writeCSV(t, string(data)), sc, CSVOptions{})
		if err != nil {
			return
		}
		defer s.Close()
		all, err := s.Read(0, s.Len())
		if err != nil {
			t.Fatalf("Read of the whole file: %v", err)
		}
		if all.N+len(all.Corrupt) != int(s.Len()) || len(all.Labels) != all.N || len(all.Index) != all.N ||
			len(all.Features) != 2*all.N || len(all.Categorical) != 3*all.N {
			t.Fatalf("inconsistent batch: N %d, %d corrupt of %d, %d features, %d ids",
				all.N, len(all.Corrupt), s.Len(), len(all.Features), len(all.Categorical))
		}
		for k, rec := range all.Index {
			one, err := s.Read(rec, rec+1)
			if err != nil || one.N != 1 || one.Labels[0] != all.Labels[k] ||
				!slices.Equal(one.Features, all.Features[2*k:2*k+2]) || !slices.Equal(one.Categorical, all.Categorical[3*k:3*k+3]) {
				t.Fatalf("record %d read alone differs: %+v, %v", rec, one, err)
			}
		}
	})
}
