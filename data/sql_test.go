package data

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// ticdataLike is a CSV file with a header in ticdata's shape (label,
// numbers, text): numbers empty, decimal and negative, text with spaces,
// commas, quotes and empty.
func ticdataLike(t *testing.T, n int) (path, schema string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("caravan,n1,n2,c1,c2\n")
	texts := []string{"Lower class large families", `"a, b"`, `"say ""hi"""`, "", "  padded  ", "é"}
	for i := range n {
		n1 := fmt.Sprint(i % 9)
		if i%5 == 2 {
			n1 = ""
		}
		fmt.Fprintf(&b, "%d,%s,%g,%s,%s\n", i%2, n1, float64(i)/8-3, texts[i%len(texts)], texts[(i*7)%len(texts)])
	}
	path = filepath.Join(t.TempDir(), "train.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, "caravan:label,n{1..2}:num,c{1..2}:cat"
}

// loadCSV makes a table of a CSV file with a header: the label and the
// num columns INTEGER or DOUBLE PRECISION (an empty field NULL), the cat
// columns TEXT (an empty field NULL in every other row, ” in the others).
func loadCSV(t *testing.T, db *sqldbtest.DB, path string, schema Schema, integers bool) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	header, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	defs := []string{"id INTEGER"}
	for _, c := range schema.Columns {
		typ := "TEXT"
		switch {
		case c.Kind == Label || (c.Kind == Numeric && integers):
			typ = "INTEGER"
		case c.Kind == Numeric:
			typ = "DOUBLE PRECISION"
		}
		defs = append(defs, c.Name+" "+typ)
	}
	table := db.NewTable(t, defs...)
	var rows [][]any
	for i := 0; ; i++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		row := []any{i}
		for j, v := range rec {
			row = append(row, v)
			if strings.TrimSpace(v) == "" && (schema.Columns[j].Kind != Categorical || i%2 == 0) {
				row[j+1] = nil
			}
		}
		// SQLite takes up to 32766 values a statement.
		if rows = append(rows, row); len(rows)*len(row) > 30000-len(row) {
			db.Insert(t, table, "id, "+strings.Join(header, ", "), rows...)
			rows = rows[:0]
		}
	}
	db.Insert(t, table, "id, "+strings.Join(header, ", "), rows...)
	return table
}

// sameBatches reads ranges of a CSV file and of a table with the same data,
// and fails where their batches differ.
func sameBatches(t *testing.T, path string, schema Schema, uri string, ranges [][2]int64) {
	t.Helper()
	want, err := OpenCSVSchema(path, schema, CSVOptions{HasHeader: true})
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	src, err := Open(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	got := src.(*SQL)
	wantSchema := Schema{Columns: append([]Column{{Name: "id", Kind: Ignore}}, want.Schema().Columns...)}
	if got.Len() != want.Len() || !reflect.DeepEqual(got.Schema(), wantSchema) {
		t.Fatalf("%d records, schema %v; the CSV file %d, %v", got.Len(), got.Schema(), want.Len(), wantSchema)
	}
	for _, r := range ranges {
		wb, err := want.Read(r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		gb, err := got.Read(r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gb, wb) {
			t.Errorf("records [%d,%d) differ:\ntable %+v\nCSV   %+v", r[0], r[1], gb, wb)
		}
	}
}

func prepareSQL(t *testing.T, uri string) string {
	t.Helper()
	snap, err := sqldb.Prepare(context.Background(), uri, "run-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	snap = sqldb.WithPassword(snap, sqldb.Password(uri)) // Prepare's URI has none
	t.Cleanup(func() { sqldb.Drop(context.Background(), snap) })
	return snap
}

// TestSQLMatchesCSV: the same data gives the same batches from a table as
// from a CSV file.
func TestSQLMatchesCSV(t *testing.T) {
	path, schema := ticdataLike(t, 100)
	sc := mustSchema(t, schema)
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		table := loadCSV(t, db, path, sc, false)
		snap := prepareSQL(t, db.Source("table="+table+"&label=caravan&order=id&ignore=id"))
		sameBatches(t, path, sc, snap, [][2]int64{{0, 100}, {0, 1}, {13, 57}, {99, 100}, {50, 50}})
	})
}

// TestSQLHashMatchesCSV: a hash=COLUMN:N text column gives the ids of a
// CSV schema's hash(N) column.
func TestSQLHashMatchesCSV(t *testing.T) {
	path, _ := ticdataLike(t, 60)
	sc := mustSchema(t, "caravan:label,n{1..2}:num,c1:hash(7),c2:cat")
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		table := loadCSV(t, db, path, sc, false)
		snap := prepareSQL(t, db.Source("table="+table+"&label=caravan&order=id&ignore=id&hash=c1:7"))
		sameBatches(t, path, sc, snap, [][2]int64{{0, 60}, {7, 31}})
	})
}

// TestSQLMatchesTicdata: ticdata (hack/ticdata.sh) from a table and from
// its CSV file.
func TestSQLMatchesTicdata(t *testing.T) {
	dir := os.Getenv("ELASTICDL_TICDATA")
	if dir == "" {
		cache, _ := os.UserCacheDir()
		dir = filepath.Join(cache, "elasticdl-data", "ticdata")
	}
	path := filepath.Join(dir, "train.csv")
	schema, err := os.ReadFile(filepath.Join(dir, "schema"))
	if err != nil {
		t.Skipf("no ticdata in %s (hack/ticdata.sh makes it): %v", dir, err)
	}
	sc := mustSchema(t, strings.TrimSpace(string(schema)))
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		table := loadCSV(t, db, path, sc, true)
		snap := prepareSQL(t, db.Source("table="+table+"&label=caravan&order=id&ignore=id"))
		sameBatches(t, path, sc, snap, [][2]int64{{0, 5822}, {1000, 1500}})
	})
}

// TestSQLCorruptRecords: a NULL label (a snapshot changed by hand: Prepare
// refuses one) and a number that is not one (SQLite takes any value in any
// column) are corrupt records, as in a CSV file.
func TestSQLCorruptRecords(t *testing.T) {
	db := sqldbtest.Open(t, "sqlite")
	table := db.NewTable(t, "y INTEGER", "x DOUBLE PRECISION", "c TEXT")
	db.Insert(t, table, "y, x, c", []any{1, 1.5, "a"}, []any{0, "abc", "b"}, []any{1, 2, "c"}, []any{0, 3, "d"})
	snap := prepareSQL(t, db.Source("table="+table+"&label=y"))
	ds, err := sqldb.Parse(snap)
	if err != nil {
		t.Fatal(err)
	}
	db.Exec(t, "UPDATE "+ds.Snapshot+" SET y = NULL WHERE _edl_row = 2")
	src, err := Open(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	b, err := src.Read(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if b.N != 2 || !reflect.DeepEqual(b.Index, []int64{0, 3}) || len(b.Corrupt) != 2 {
		t.Fatalf("N %d, index %v, corrupt %v: want records 0 and 3, and 1 and 2 corrupt", b.N, b.Index, b.Corrupt)
	}
	for i, want := range []string{`record 1: num column 1 (x): strconv.ParseFloat: parsing "abc"`, `record 2: label column "y" is NULL`} {
		if got := b.Corrupt[i].Error(); !strings.Contains(got, want) {
			t.Errorf("corrupt record %d: %s, want %s", i, got, want)
		}
	}
	if _, err := src.Read(3, 5); err == nil {
		t.Error("Read past the end: no error")
	}
}

// TestOpenSQLErrors: data.Open of a database URI that is not a snapshot's,
// or of a snapshot whose column a schema cannot name.
func TestOpenSQLErrors(t *testing.T) {
	db := sqldbtest.Open(t, "sqlite")
	table := db.NewTable(t, "y INTEGER", `"a=b" INTEGER`)
	if _, err := Open(db.Source("table=" + table + "&label=y")); err == nil || !strings.Contains(err.Error(), "not a snapshot") {
		t.Errorf("Open of a table: %v", err)
	}
	snap := prepareSQL(t, db.Source("table="+table+"&label=y"))
	if _, err := Open(snap); err == nil || !strings.Contains(err.Error(), `"a=b"`) {
		t.Errorf("Open of a column named a=b: %v, want an error naming it", err)
	}
}
