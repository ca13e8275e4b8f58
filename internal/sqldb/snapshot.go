package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"
)

// connectTimeout bounds a connection's first round trip: a host that
// does not answer is an error, not a hang.
const connectTimeout = 10 * time.Second

const snapshotPrefix = "elasticdl_snap_"

var snapshotName = regexp.MustCompile(`^` + snapshotPrefix + `[a-z0-9_]{0,32}_[0-9a-f]{8}$`)

// SnapshotName is the table that holds run runID's snapshot of the rows of
// source (a query): the run's ID, made a plain lower-case name and cut to
// 32 characters, and a hash of both, so that a run's two data sets have
// two snapshots and the name stays within PostgreSQL's 63 bytes.
func SnapshotName(runID, source string) string {
	h := fnv.New32a()
	h.Write([]byte(runID))
	h.Write([]byte{0})
	h.Write([]byte(source))
	var b strings.Builder
	for _, r := range strings.ToLower(runID) {
		if b.Len() == 32 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return fmt.Sprintf("%s%s_%08x", snapshotPrefix, b.String(), h.Sum32())
}

// IsSnapshotName says whether name is one that SnapshotName makes: Drop
// drops no other table.
func IsSnapshotName(name string) bool { return snapshotName.MatchString(name) }

// connect opens ds's database and checks that it answers. A URI without
// a password takes EnvPassword's (PostgreSQL's driver also reads
// PGPASSWORD and ~/.pgpass when neither gives one).
func connect(ctx context.Context, ds *Datasource) (*sql.DB, error) {
	if ds.Dialect == SQLite {
		// The driver would create a missing file: a typo would be an
		// empty database, and "no such table".
		path, _, _ := strings.Cut(ds.DSN, "?")
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s: %w", ds.Name, err)
		}
	}
	dsn := ds.DSN
	if pw := os.Getenv(EnvPassword); pw != "" && Password(ds.URI) == "" {
		var err error
		if dsn, err = dsnWithPassword(ds.Dialect, dsn, pw); err != nil {
			return nil, fmt.Errorf("%s: %w", ds.Name, err)
		}
	}
	db, err := sql.Open(ds.Dialect.driverName(), dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ds.Name, err)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to %s: %w", ds.Name, flat{err})
	}
	return db, nil
}

// flat is an error of several lines in one: pgx's lists each address and
// TLS mode it tried, one a line, often the same line twice.
type flat struct{ err error }

func (f flat) Error() string {
	var lines []string
	for l := range strings.SplitSeq(f.err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " ")
}

func (f flat) Unwrap() error { return f.err }

// Prepare makes the snapshot of the rows of a data source (a URI with
// table= or query=, and label=) for run runID, and returns the URI that
// reads it (snapshot=). The job's master calls it once at start; a master
// that takes the job over calls it again with the same run ID and finds
// the snapshot made (Prepare is idempotent). The rows are copied, numbered
// from 0 in RowColumn, into a table of another name, which is renamed
// into place last: a snapshot under its own name is complete. A URI that
// already names a snapshot is returned as it is, but for its password:
// no URI Prepare returns holds one.
//
// Prepare fails, leaving nothing behind, when the query fails (an unknown
// table or column), a column has a type a model cannot take, the label
// column is not among the columns or is NULL in a row.
func Prepare(ctx context.Context, uri, runID string) (string, error) {
	s, err := PrepareSnapshot(ctx, uri, runID)
	return s.URI, err
}

// Snapshot is a snapshot that PrepareSnapshot made or found.
type Snapshot struct {
	URI string // what reads it (snapshot=), without a password
	// Made: this call copied the rows; false when it found them copied
	// (by a master before, for the same run).
	Made bool
}

// PrepareSnapshot is Prepare, and says whether it copied the rows.
func PrepareSnapshot(ctx context.Context, uri, runID string) (Snapshot, error) {
	ds, err := Parse(uri)
	if err != nil {
		return Snapshot{}, err
	}
	if ds.Snapshot != "" {
		return Snapshot{URI: StripPassword(uri)}, nil
	}
	if err := ds.needSource(); err != nil {
		return Snapshot{}, err
	}
	if runID == "" {
		return Snapshot{}, fmt.Errorf("%s: prepare a snapshot: no run ID", ds.Name)
	}
	db, err := connect(ctx, ds)
	if err != nil {
		return Snapshot{}, err
	}
	defer db.Close()
	name := SnapshotName(runID, ds.identity())
	have, err := tableExists(ctx, db, ds.Dialect, name)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%s: %w", ds.Name, err)
	}
	// Its time, for sweeps (SweepSnapshots): first, so that a copy
	// killed midway is a leftover of a known age too.
	if err := touchSnapshot(ctx, db, ds.Dialect, name, time.Now()); err != nil {
		return Snapshot{}, fmt.Errorf("%s: %w", ds.Name, err)
	}
	if !have {
		if err := materialize(ctx, db, ds, name); err != nil {
			if ferr := forgetSnapshot(context.WithoutCancel(ctx), db, ds.Dialect, name); ferr != nil {
				err = fmt.Errorf("%w (and %v)", err, ferr)
			}
			return Snapshot{}, fmt.Errorf("%s: snapshot %s: %w", ds.Name, name, err)
		}
	}
	return Snapshot{URI: ds.WithSnapshot(name), Made: !have}, nil
}

// needSource checks that ds names a data source and its label.
func (ds *Datasource) needSource() error {
	if ds.Table == "" && ds.Query == "" {
		return fmt.Errorf("%s: no data: want table=NAME or query=SQL (%s)", ds.Name, URISyntax)
	}
	if ds.Label == "" {
		return fmt.Errorf("%s: no label column: want label=COLUMN", ds.Name)
	}
	return nil
}

func tableExists(ctx context.Context, db *sql.DB, d Dialect, name string) (bool, error) {
	var n int
	if err := db.QueryRowContext(ctx, d.tableExists(name)).Scan(&n); err != nil {
		return false, fmt.Errorf("look for table %s: %w", name, err)
	}
	return n > 0, nil
}

// materialize copies ds's rows into table name, through name_tmp.
func materialize(ctx context.Context, db *sql.DB, ds *Datasource, name string) (err error) {
	d := ds.Dialect
	cols, err := queryColumns(ctx, db, d.columnsOf(ds.source()))
	if err != nil {
		return err
	}
	if err := resolveKinds(ctx, db, ds.Dialect, ds.source(), cols); err != nil {
		return err
	}
	if err := checkColumns(cols, ds); err != nil {
		return err
	}
	tmp := name + "_tmp" // what a killed Prepare left behind goes first
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.quote(tmp)); err != nil {
		return fmt.Errorf("drop %s: %w", tmp, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
			// MySQL commits each DDL statement: its table stays.
			db.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+d.quote(tmp))
		}
	}()
	for _, s := range d.createSnapshot(tmp, ds.source(), cols, ds.Order) {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("copy the rows: %w", err)
		}
	}
	var first sql.NullInt64
	var nulls int64
	if err := tx.QueryRowContext(ctx, d.firstNull(tmp, ds.Label)).Scan(&first, &nulls); err != nil {
		return fmt.Errorf("look for NULL labels: %w", err)
	}
	if nulls > 0 {
		return fmt.Errorf("label column %q is NULL in %d rows, the first of them row %d of the query (from 0): give them a label, or leave them out (WHERE %s IS NOT NULL)",
			ds.Label, nulls, first.Int64, ds.Label)
	}
	if _, err := tx.ExecContext(ctx, d.rename(tmp, name)); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return tx.Commit()
}

// Column is a column of a data source.
type Column struct {
	Name string
	Type string // as the driver names it: INT4, VARCHAR(10), DECIMAL, ...
	Kind Kind   // 0: a type a model cannot take
}

// queryColumns runs q (a query with no rows) for its columns.
func queryColumns(ctx context.Context, db *sql.DB, q string) ([]Column, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, fmt.Errorf("query's columns: %w", err)
	}
	cols := make([]Column, len(types))
	for i, t := range types {
		cols[i] = Column{Name: t.Name(), Type: t.DatabaseTypeName()}
	}
	return cols, rows.Err()
}

// resolveKinds sets each column's Kind from its type; an SQLite column of
// no declared type (an expression's) from its values.
func resolveKinds(ctx context.Context, db *sql.DB, d Dialect, query string, cols []Column) error {
	for i := range cols {
		c := &cols[i]
		if c.Kind = d.classify(c.Type); c.Kind != byValues {
			continue
		}
		classes, err := strings1(ctx, db, valueTypes(query, c.Name))
		if err != nil {
			return fmt.Errorf("column %q: its values' types: %w", c.Name, err)
		}
		c.Kind, c.Type = kindOfValues(classes)
	}
	return nil
}

// strings1 is the first column of q's rows.
func strings1(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s sql.NullString
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s.String)
	}
	return out, rows.Err()
}

// checkColumns checks that every column's type is one a model takes (but
// for those ignored), that none is named RowColumn, and that the label,
// order and ignore= columns are among them.
func checkColumns(cols []Column, ds *Datasource) error {
	var names []string
	for _, c := range cols {
		switch {
		case c.Name == RowColumn:
			return fmt.Errorf("column %q: the name of the snapshot's own row number column: rename it", c.Name)
		case c.Kind == 0 && !slices.Contains(ds.Ignore, c.Name):
			return fmt.Errorf("column %q has type %s, which a model cannot take: ignore=%s, or cast it in a query (CAST(%s AS INTEGER), CAST(%s AS VARCHAR(100)))",
				c.Name, c.Type, c.Name, c.Name, c.Name)
		}
		names = append(names, c.Name)
	}
	for _, want := range []struct {
		what  string
		names []string
	}{{"label column", []string{ds.Label}}, {"order= column", ds.Order}, {"ignore= column", ds.Ignore}, {"hash= column", slices.Sorted(maps.Keys(ds.Hash))}} {
		for _, n := range want.names {
			if n != "" && !slices.Contains(names, n) {
				return fmt.Errorf("%s %q is not one of the columns: %s", want.what, n, strings.Join(names, ", "))
			}
		}
	}
	return nil
}

// Drop drops the snapshot that uri (a URI Prepare returned) names, if it
// is there. It drops only tables named as SnapshotName names them.
func Drop(ctx context.Context, uri string) error {
	ds, err := Parse(uri)
	if err != nil {
		return err
	}
	if ds.Snapshot == "" {
		return fmt.Errorf("%s: drop: not a snapshot's URI (no snapshot=)", ds.Name)
	}
	db, err := connect(ctx, ds)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+ds.Dialect.quote(ds.Snapshot)); err != nil {
		return fmt.Errorf("%s: drop: %w", ds.Name, err)
	}
	if err := forgetSnapshot(ctx, db, ds.Dialect, ds.Snapshot); err != nil {
		return fmt.Errorf("%s: drop: %w", ds.Name, err)
	}
	return nil
}

// errNoSnapshot is wrapped by Open's error for a snapshot that is not
// there.
var errNoSnapshot = errors.New("no such snapshot")
