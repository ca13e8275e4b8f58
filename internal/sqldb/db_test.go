package sqldb_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// row is a row as Table.Read gives it.
type row struct {
	n      int64
	values []string // "NULL" for NULL
}

// readAll reads rows [start, end) of a snapshot.
func readAll(t *testing.T, tb *sqldb.Table, start, end int64) []row {
	t.Helper()
	var out []row
	err := tb.Read(context.Background(), start, end, func(n int64, values []sql.NullString) error {
		r := row{n: n}
		for _, v := range values {
			s := v.String
			if !v.Valid {
				s = "NULL"
			}
			r.values = append(r.values, s)
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func openTable(t *testing.T, uri string) *sqldb.Table {
	t.Helper()
	tb, err := sqldb.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// prepare prepares uri's snapshot for runID, dropped when the test ends,
// and returns its URI with uri's password (Prepare's has none).
func prepare(t *testing.T, uri, runID string) string {
	t.Helper()
	snap, err := sqldb.Prepare(context.Background(), uri, runID)
	if err != nil {
		t.Fatal(err)
	}
	snap = sqldb.WithPassword(snap, sqldb.Password(uri))
	t.Cleanup(func() { sqldb.Drop(context.Background(), snap) })
	return snap
}

// newTable makes a table of n rows: id 0..n-1 (the order it was written
// in), x, c (text with a comma, quotes, spaces; NULL in every 7th) and y.
func newTable(t *testing.T, db *sqldbtest.DB, n int) string {
	t.Helper()
	table := db.NewTable(t, "id INTEGER PRIMARY KEY", "x DOUBLE PRECISION", "c TEXT", "y INTEGER")
	var rows [][]any
	for i := range n {
		var c any = fmt.Sprintf(` "v%d", 'x' `, i%5)
		if i%7 == 3 {
			c = nil
		}
		rows = append(rows, []any{i, float64(i) / 4, c, i % 2})
	}
	db.Insert(t, table, "id, x, c, y", rows...)
	return table
}

func TestRangeReads(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		const n = 50 // rows that PostgreSQL returns in the order they were written: one page
		table := newTable(t, db, n)
		tb := openTable(t, prepare(t, db.Source("table="+table+"&label=y"), "run-Ranges"))
		if tb.Len() != n {
			t.Fatalf("Len = %d, want %d", tb.Len(), n)
		}
		var names []string
		for _, c := range tb.Columns() {
			names = append(names, c.Name+":"+c.Kind.String())
		}
		if got := strings.Join(names, ","); got != "id:number,x:number,c:text,y:number" {
			t.Errorf("columns %s", got)
		}
		all := readAll(t, tb, 0, n)
		var parts []row
		for _, r := range [][2]int64{{0, 7}, {7, 20}, {20, 20}, {20, n}} {
			parts = append(parts, readAll(t, tb, r[0], r[1])...)
		}
		if !slices.EqualFunc(all, parts, func(a, b row) bool { return a.n == b.n && slices.Equal(a.values, b.values) }) {
			t.Errorf("range reads differ from the full read:\n%v\n%v", all, parts)
		}
		for i, r := range all {
			want := []string{fmt.Sprint(i), fmt.Sprint(float64(i) / 4), fmt.Sprintf(` "v%d", 'x' `, i%5), fmt.Sprint(i % 2)}
			if i%7 == 3 {
				want[2] = "NULL"
			}
			if r.n != int64(i) || !slices.Equal(r.values, want) {
				t.Fatalf("row %d: %d %q, want %d %q", i, r.n, r.values, i, want)
			}
		}
	})
}

func TestQuerySource(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		table := newTable(t, db, 20)
		q := "SELECT id * 2 AS twice, c, y FROM " + table + " WHERE id >= 10;"
		tb := openTable(t, prepare(t, db.Source("query="+url.QueryEscape(q)+"&label=y"), "run-Query"))
		if tb.Len() != 10 {
			t.Fatalf("Len = %d, want 10", tb.Len())
		}
		if k := tb.Columns()[0].Kind; k != sqldb.Number {
			t.Errorf("an expression's column: kind %v, want number", k)
		}
		seen := map[string]bool{}
		for _, r := range readAll(t, tb, 0, 10) {
			seen[r.values[0]] = true
		}
		for i := 10; i < 20; i++ {
			if !seen[fmt.Sprint(2*i)] {
				t.Errorf("no row with twice = %d: %v", 2*i, seen)
			}
		}
	})
}

// TestConcurrentWriter: rows written while the snapshot is made and
// after are not in it, and it holds a prefix of an append-only table.
func TestConcurrentWriter(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		table := db.NewTable(t, "id INTEGER PRIMARY KEY", "y INTEGER")
		db.Insert(t, table, "id, y", []any{0, 0}, []any{1, 1})
		var written atomic.Int64
		written.Store(2)
		stop, done := make(chan struct{}), make(chan error, 1)
		go func() {
			for i := int64(2); ; i++ {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if _, err := db.SQL.Exec(fmt.Sprintf("INSERT INTO %s (id, y) VALUES (%d, %d)", table, i, i%2)); err != nil {
					done <- err
					return
				}
				written.Store(i + 1)
			}
		}()
		snap := prepare(t, db.Source("table="+table+"&label=y&order=id"), "run-Writer")
		after := written.Load()
		first := openTable(t, snap)
		n := first.Len()
		rows := readAll(t, first, 0, n)
		for written.Load() < after+20 { // the writer goes on
			select {
			case err := <-done:
				t.Fatalf("writer: %v", err)
			default:
			}
		}
		close(stop)
		if err := <-done; err != nil {
			t.Fatalf("writer: %v", err)
		}
		again := openTable(t, snap)
		if again.Len() != n || !slices.EqualFunc(rows, readAll(t, again, 0, n), func(a, b row) bool { return slices.Equal(a.values, b.values) }) {
			t.Fatalf("the snapshot changed: %d rows, then %d", n, again.Len())
		}
		if n < 2 || n > after {
			t.Errorf("snapshot of %d rows: want from 2 to the %d written when Prepare returned", n, after)
		}
		for i, r := range rows {
			if r.values[0] != fmt.Sprint(i) {
				t.Fatalf("row %d has id %s: not a prefix of the table: %v", i, r.values[0], rows)
			}
		}
	})
}

// TestPrepareIdempotent: a master that takes over prepares again with the
// same run ID and gets the same snapshot, not a new one; one left half
// made is made again.
func TestPrepareIdempotent(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		table := newTable(t, db, 10)
		src := db.Source("table=" + table + "&label=y")
		snap := prepare(t, src, "run-Same")
		db.Insert(t, table, "id, x, c, y", []any{10, 1.0, "z", 1})
		if again := prepare(t, src, "run-Same"); again != snap {
			t.Errorf("second Prepare: %s, want %s", again, snap)
		}
		if n := openTable(t, snap).Len(); n != 10 {
			t.Errorf("after the second Prepare %d rows, want the first's 10", n)
		}
		if s := prepare(t, snap, "run-Other"); s != snap {
			t.Errorf("Prepare of a snapshot's URI = %s, want it unchanged", s)
		}
		other := prepare(t, src, "run-Other")
		if other == snap || openTable(t, other).Len() != 11 {
			t.Errorf("another run's snapshot %s: want a new one of 11 rows", other)
		}
		// A Prepare killed half way leaves the temp table, never the snapshot.
		killed := prepare(t, src, "run-Killed")
		if err := sqldb.Drop(context.Background(), killed); err != nil {
			t.Fatal(err)
		}
		ds, err := sqldb.Parse(killed)
		if err != nil {
			t.Fatal(err)
		}
		name := ds.Snapshot
		db.Exec(t, "CREATE TABLE "+name+"_tmp (junk INTEGER)")
		if again := prepare(t, src, "run-Killed"); again != killed {
			t.Fatalf("Prepare after a killed one: %s, want %s", again, killed)
		}
		if tb := openTable(t, killed); tb.Len() != 11 || len(tb.Columns()) != 4 {
			t.Errorf("after a half-made snapshot: %d rows, %d columns; want 11, 4", tb.Len(), len(tb.Columns()))
		}
		if left := db.Tables(t, name+"_tmp"); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
}

func TestDrop(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		table := newTable(t, db, 3)
		snap := prepare(t, db.Source("table="+table+"&label=y"), "run-Drop")
		ctx := context.Background()
		for range 2 { // dropping a dropped snapshot is fine
			if err := sqldb.Drop(ctx, snap); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := sqldb.Open(ctx, snap); err == nil || !strings.Contains(err.Error(), "no such snapshot") {
			t.Errorf("Open of a dropped snapshot: %v", err)
		}
		if err := sqldb.Drop(ctx, db.Source("table="+table)); err == nil || !strings.Contains(err.Error(), "not a snapshot") {
			t.Errorf("Drop of a table: %v", err)
		}
		if len(db.Tables(t, table)) != 1 {
			t.Errorf("table %s is gone", table)
		}
	})
}
