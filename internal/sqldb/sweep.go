package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// SnapshotsTable records when each snapshot was last prepared (made, or
// found by a master taking its job over), or first seen by a sweep: a
// snapshot's table name holds no time, and PostgreSQL's and SQLite's
// catalogs keep none.
const SnapshotsTable = "elasticdl_snapshots"

func (d Dialect) createSnapshots() string {
	return "CREATE TABLE IF NOT EXISTS " + d.quote(SnapshotsTable) + " (name " + d.keyType() + " NOT NULL PRIMARY KEY, seen_at " + d.keyType() + " NOT NULL)"
}

// tableNames is a query for the names of the connection's tables.
func (d Dialect) tableNames() string {
	switch d {
	case SQLite:
		return "SELECT name FROM sqlite_master WHERE type = 'table'"
	case Postgres:
		return "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
	}
	return "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
}

// touchSnapshot records that snapshot name was prepared at now. A
// concurrent touch of the same name is no error.
func touchSnapshot(ctx context.Context, db *sql.DB, d Dialect, name string, now time.Time) error {
	// MariaDB commits a CREATE TABLE at once: it is made before the
	// transaction.
	if _, err := db.ExecContext(ctx, d.createSnapshots()); err != nil {
		return fmt.Errorf("create %s: %w", SnapshotsTable, err)
	}
	at := now.UTC().Format(time.RFC3339Nano)
	err := inTx(ctx, db, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+d.quote(SnapshotsTable)+" WHERE name = "+d.placeholders(1), name); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+d.quote(SnapshotsTable)+" (name, seen_at) VALUES ("+d.placeholders(2)+")", name, at)
		return err
	})
	if err != nil {
		var n int
		qerr := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+d.quote(SnapshotsTable)+" WHERE name = "+d.placeholders(1), name).Scan(&n)
		if qerr == nil && n > 0 {
			return nil // the other touch's row
		}
		return fmt.Errorf("record snapshot %s in %s: %w", name, SnapshotsTable, err)
	}
	return nil
}

// Touch records the snapshot that uri (a URI Prepare returned) names as
// prepared now: a running job's master does so every so often, so that a
// sweep leaves its snapshot however long the job runs.
func Touch(ctx context.Context, uri string) error {
	ds, err := Parse(uri)
	if err != nil {
		return err
	}
	if ds.Snapshot == "" {
		return fmt.Errorf("%s: not a snapshot's URI (no snapshot=)", ds.Name)
	}
	db, err := connect(ctx, ds)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := touchSnapshot(ctx, db, ds.Dialect, ds.Snapshot, time.Now()); err != nil {
		return fmt.Errorf("%s: %w", ds.Name, err)
	}
	return nil
}

// forgetSnapshot deletes snapshot name's row of SnapshotsTable, if there.
func forgetSnapshot(ctx context.Context, db *sql.DB, d Dialect, name string) error {
	have, err := tableExists(ctx, db, d, SnapshotsTable)
	if err != nil || !have {
		return err
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM "+d.quote(SnapshotsTable)+" WHERE name = "+d.placeholders(1), name); err != nil {
		return fmt.Errorf("forget snapshot %s in %s: %w", name, SnapshotsTable, err)
	}
	return nil
}

// SweepPlan is what a sweep of leftover snapshots does.
type SweepPlan struct {
	Drop     []string // tables to drop: snapshots, and the _tmp tables of killed copies
	Register []string // snapshots first seen: recorded as seen now
	Forget   []string // SnapshotsTable rows to delete: dropped, or their table gone
}

// PlanSweep decides which snapshot tables are leftovers: those whose
// snapshot was last prepared (seen: SnapshotsTable's times) maxAge or
// more before now. A snapshot with no time (an older version's) is
// registered, not dropped: its age counts from now. A job's masters
// record their snapshots at start, at each takeover and every hour while
// the job runs (Touch), so a maxAge above that drops no live job's.
// maxAge <= 0 sweeps nothing. tables are the connection's tables.
func PlanSweep(tables []string, seen map[string]time.Time, now time.Time, maxAge time.Duration) SweepPlan {
	var p SweepPlan
	if maxAge <= 0 {
		return p
	}
	old := func(name string) bool {
		at, ok := seen[name]
		return ok && now.Sub(at) >= maxAge
	}
	have := map[string]bool{}
	for _, t := range tables {
		snap := strings.TrimSuffix(t, "_tmp")
		if !IsSnapshotName(snap) {
			continue
		}
		have[snap] = true
		if _, ok := seen[snap]; !ok && !slices.Contains(p.Register, snap) {
			p.Register = append(p.Register, snap)
		}
		if old(snap) {
			p.Drop = append(p.Drop, t)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(seen)) {
		if old(name) {
			p.Forget = append(p.Forget, name)
		}
	}
	slices.Sort(p.Drop)
	slices.Sort(p.Register)
	return p
}

// SweepSnapshots drops the leftover snapshots of the database db (PlanSweep:
// those last prepared maxAge or more before now, such as those of a job
// killed as a whole), and registers those it sees first. It returns the
// tables it dropped.
func SweepSnapshots(ctx context.Context, db *sql.DB, d Dialect, now time.Time, maxAge time.Duration) ([]string, error) {
	if maxAge <= 0 {
		return nil, nil
	}
	tables, err := listTables(ctx, db, d)
	if err != nil {
		return nil, err
	}
	seen := map[string]time.Time{}
	if slices.Contains(tables, SnapshotsTable) {
		if seen, err = readSeen(ctx, db, d); err != nil {
			return nil, err
		}
	}
	p := PlanSweep(tables, seen, now, maxAge)
	for _, name := range p.Register {
		if err := touchSnapshot(ctx, db, d, name, now); err != nil {
			return nil, err
		}
	}
	var dropped []string
	for _, t := range p.Drop {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.quote(t)); err != nil {
			return dropped, fmt.Errorf("drop leftover snapshot %s: %w", t, err)
		}
		dropped = append(dropped, t)
	}
	for _, name := range p.Forget {
		if err := forgetSnapshot(ctx, db, d, name); err != nil {
			return dropped, err
		}
	}
	return dropped, nil
}

func listTables(ctx context.Context, db *sql.DB, d Dialect) ([]string, error) {
	rows, err := db.QueryContext(ctx, d.tableNames())
	if err != nil {
		return nil, fmt.Errorf("list the tables: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list the tables: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// readSeen reads SnapshotsTable; a time that does not parse is left out,
// so its snapshot is registered afresh.
func readSeen(ctx context.Context, db *sql.DB, d Dialect) (map[string]time.Time, error) {
	rows, err := db.QueryContext(ctx, "SELECT name, seen_at FROM "+d.quote(SnapshotsTable))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", SnapshotsTable, err)
	}
	defer rows.Close()
	seen := map[string]time.Time{}
	for rows.Next() {
		var name, at string
		if err := rows.Scan(&name, &at); err != nil {
			return nil, fmt.Errorf("read %s: %w", SnapshotsTable, err)
		}
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			seen[name] = t
		}
	}
	return seen, rows.Err()
}
