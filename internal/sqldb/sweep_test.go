package sqldb_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// TestPlanSweep: only snapshots last prepared maxAge or more ago go
// (their _tmp tables too); one never seen is registered, not dropped;
// other tables are never touched.
func TestPlanSweep(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	oldSnap, newSnap, unseen := sqldb.SnapshotName("run-a", "q"), sqldb.SnapshotName("run-b", "q"), sqldb.SnapshotName("run-c", "q")
	gone := sqldb.SnapshotName("run-d", "q")
	seen := map[string]time.Time{oldSnap: now.Add(-day), newSnap: now.Add(-day + time.Second), gone: now.Add(-2 * day)}
	for _, c := range []struct {
		name   string
		tables []string
		seen   map[string]time.Time
		maxAge time.Duration
		want   sqldb.SweepPlan
	}{
		{name: "nothing", want: sqldb.SweepPlan{}},
		{name: "disabled", tables: []string{oldSnap}, seen: seen, maxAge: 0, want: sqldb.SweepPlan{}},
		{name: "old and its tmp dropped, new kept, gone forgotten", tables: []string{"users", oldSnap, oldSnap + "_tmp", newSnap, sqldb.SnapshotsTable},
			seen: seen, maxAge: day, want: sqldb.SweepPlan{Drop: []string{oldSnap, oldSnap + "_tmp"}, Forget: []string{oldSnap, gone}}},
		{name: "unseen registered, its tmp too", tables: []string{unseen + "_tmp", unseen}, seen: seen, maxAge: day,
			want: sqldb.SweepPlan{Register: []string{unseen}, Forget: []string{oldSnap, gone}}},
		{name: "a longer age keeps them", tables: []string{oldSnap, newSnap}, seen: seen, maxAge: 3 * day, want: sqldb.SweepPlan{}},
		{name: "look-alikes", tables: []string{"elasticdl_snap_x", "elasticdl_snapshots", "elasticdl_snap_run_12345678_tmp2"}, maxAge: day, want: sqldb.SweepPlan{}},
	} {
		got := sqldb.PlanSweep(c.tables, c.seen, now, c.maxAge)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

// TestSweepSnapshots: a snapshot Prepare made is recorded; a sweep drops
// it once it is maxAge old, not before, and leaves the other tables; a
// snapshot an older version made (no record) is kept by the first sweep
// and dropped once its record is maxAge old. (The servers are shared:
// the records are aged, not the clock moved, so that only this test's
// snapshots and real leftovers are old.)
func TestSweepSnapshots(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		ctx := context.Background()
		table := db.NewTable(t, "x INTEGER", "y INTEGER")
		db.Insert(t, table, "x, y", []any{1, 0}, []any{2, 1})
		uri, err := sqldb.Prepare(ctx, db.Source("table="+table+"&label=y"), "run-sweep-"+db.Name)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := sqldb.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		snap := ds.Snapshot
		t.Cleanup(func() { db.SQL.Exec("DROP TABLE IF EXISTS " + snap) })
		legacy := sqldb.SnapshotName("run-legacy-"+db.Name, "q")
		db.Exec(t, "CREATE TABLE "+legacy+" (x INTEGER)")
		t.Cleanup(func() { db.SQL.Exec("DROP TABLE IF EXISTS " + legacy) })
		has := func(name string) bool { return slices.Contains(db.Tables(t, name), name) }

		dropped, err := sqldb.SweepSnapshots(ctx, db.SQL, db.Dialect, time.Now(), time.Hour)
		if err != nil || slices.Contains(dropped, snap) || slices.Contains(dropped, legacy) || !has(snap) || !has(legacy) {
			t.Fatalf("a fresh sweep dropped %v, %v", dropped, err)
		}
		age := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)
		db.Exec(t, "UPDATE "+sqldb.SnapshotsTable+" SET seen_at = '"+age+"' WHERE name IN ('"+snap+"', '"+legacy+"')")
		dropped, err = sqldb.SweepSnapshots(ctx, db.SQL, db.Dialect, time.Now(), time.Hour)
		if err != nil || !slices.Contains(dropped, snap) || !slices.Contains(dropped, legacy) || has(snap) || has(legacy) || !has(table) {
			t.Fatalf("two hours on dropped %v, %v; want %s and %s", dropped, err, snap, legacy)
		}
		var n int
		err = db.SQL.QueryRow("SELECT COUNT(*) FROM " + sqldb.SnapshotsTable + " WHERE name IN ('" + snap + "', '" + legacy + "')").Scan(&n)
		if err != nil || n != 0 {
			t.Errorf("%s has %d of their rows, %v; want none", sqldb.SnapshotsTable, n, err)
		}
		if dropped, err = sqldb.SweepSnapshots(ctx, db.SQL, db.Dialect, time.Now(), 0); err != nil || dropped != nil {
			t.Errorf("maxAge 0: %v, %v", dropped, err)
		}
	})
}

// TestDropForgetsSnapshot: Drop deletes the snapshot's record too.
func TestDropForgetsSnapshot(t *testing.T) {
	db := sqldbtest.Open(t, "sqlite")
	ctx := context.Background()
	table := db.NewTable(t, "x INTEGER", "y INTEGER")
	db.Insert(t, table, "x, y", []any{1, 0})
	uri, err := sqldb.Prepare(ctx, db.Source("table="+table+"&label=y"), "run-drop")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.SQL.QueryRow("SELECT COUNT(*) FROM " + sqldb.SnapshotsTable).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after Prepare: %d records, %v", n, err)
	}
	if err := sqldb.Drop(ctx, uri); err != nil {
		t.Fatal(err)
	}
	if err := db.SQL.QueryRow("SELECT COUNT(*) FROM " + sqldb.SnapshotsTable).Scan(&n); err != nil || n != 0 {
		t.Errorf("after Drop: %d records, %v", n, err)
	}
}

// TestTouch: a snapshot touched is recorded as prepared now, so a sweep
// that would have dropped it keeps it; a URI of no snapshot is an error.
func TestTouch(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		ctx := context.Background()
		table := db.NewTable(t, "x INTEGER", "y INTEGER")
		db.Insert(t, table, "x, y", []any{1, 0})
		uri, err := sqldb.Prepare(ctx, db.Source("table="+table+"&label=y"), "run-touch-"+db.Name)
		if err != nil {
			t.Fatal(err)
		}
		uri = sqldb.WithPassword(uri, sqldb.Password(db.URI))
		t.Cleanup(func() { sqldb.Drop(context.Background(), uri) })
		ds, _ := sqldb.Parse(uri)
		db.Exec(t, "UPDATE "+sqldb.SnapshotsTable+" SET seen_at = '2001-01-01T00:00:00Z' WHERE name = '"+ds.Snapshot+"'")
		if err := sqldb.Touch(ctx, uri); err != nil {
			t.Fatal(err)
		}
		if dropped, err := sqldb.SweepSnapshots(ctx, db.SQL, db.Dialect, time.Now(), time.Hour); err != nil || slices.Contains(dropped, ds.Snapshot) {
			t.Errorf("a touched snapshot swept: %v, %v", dropped, err)
		}
		if err := sqldb.Touch(ctx, db.Source("table="+table)); err == nil || !strings.Contains(err.Error(), "no snapshot=") {
			t.Errorf("Touch of a table's URI: %v", err)
		}
	})
}
