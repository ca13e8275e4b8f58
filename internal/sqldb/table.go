package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
)

// Table is an open snapshot, read by row ranges.
type Table struct {
	ds      *Datasource
	db      *sql.DB
	columns []Column // RowColumn left out
	n       int64
}

// Open opens the snapshot that uri (a URI Prepare returned) names: its
// columns, each with a Kind a model takes, and its number of rows. A URI
// with table= or query= is an error: such rows are read through the
// snapshot that the job's master makes at start.
func Open(ctx context.Context, uri string) (*Table, error) {
	ds, err := Parse(uri)
	if err != nil {
		return nil, err
	}
	if ds.Snapshot == "" {
		return nil, fmt.Errorf("%s: not a snapshot: a table or query is read through the snapshot "+
			"that the job's master makes of it at start (snapshot=NAME)", ds.Name)
	}
	if ds.Label == "" {
		return nil, fmt.Errorf("%s: no label column: want label=COLUMN", ds.Name)
	}
	db, err := connect(ctx, ds)
	if err != nil {
		return nil, err
	}
	t, err := open(ctx, db, ds)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", ds.Name, err)
	}
	return t, nil
}

func open(ctx context.Context, db *sql.DB, ds *Datasource) (*Table, error) {
	d := ds.Dialect
	have, err := tableExists(ctx, db, d, ds.Snapshot)
	if err != nil {
		return nil, err
	}
	if !have {
		return nil, fmt.Errorf("%w %s (its job's end drops it)", errNoSnapshot, ds.Snapshot)
	}
	cols, err := queryColumns(ctx, db, "SELECT * FROM "+d.quote(ds.Snapshot)+" WHERE 1 = 0")
	if err != nil {
		return nil, err
	}
	if len(cols) == 0 || cols[0].Name != RowColumn {
		return nil, fmt.Errorf("snapshot %s: its first column is not %s", ds.Snapshot, RowColumn)
	}
	cols = cols[1:]
	for i := range cols {
		cols[i].Kind = d.classify(cols[i].Type)
	}
	if err := checkColumns(cols, ds); err != nil {
		return nil, err
	}
	t := &Table{ds: ds, db: db, columns: cols}
	if err := db.QueryRowContext(ctx, d.rowCount(ds.Snapshot)).Scan(&t.n); err != nil {
		return nil, fmt.Errorf("count the rows: %w", err)
	}
	return t, nil
}

// Name is the URI with its password hidden.
func (t *Table) Name() string { return t.ds.Name }

// Label is the label column's name.
func (t *Table) Label() string { return t.ds.Label }

// Ignored says whether column name is one of ignore=.
func (t *Table) Ignored(name string) bool { return slices.Contains(t.ds.Ignore, name) }

// Buckets is how many ids column name's values are hashed into (hash=);
// 0 when it is not hashed.
func (t *Table) Buckets(name string) int64 { return t.ds.Hash[name] }

// Columns are the snapshot's columns, in order, without RowColumn.
func (t *Table) Columns() []Column { return append([]Column(nil), t.columns...) }

// Len is the number of rows.
func (t *Table) Len() int64 { return t.n }

// Read calls fn with rows [start, end) in order, each the row's number and
// its values as text (NULL: Valid false); values is reused from row to row.
func (t *Table) Read(ctx context.Context, start, end int64, fn func(row int64, values []sql.NullString) error) error {
	rows, err := t.db.QueryContext(ctx, t.ds.Dialect.readRange(t.ds.Snapshot, t.columns, start, end))
	if err != nil {
		return fmt.Errorf("%s: rows [%d,%d): %w", t.ds.Name, start, end, err)
	}
	defer rows.Close()
	values := make([]sql.NullString, len(t.columns))
	dest := make([]any, len(values)+1)
	var row int64
	dest[0] = &row
	for i := range values {
		dest[i+1] = &values[i]
	}
	want := start
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("%s: row %d: %w", t.ds.Name, want, err)
		}
		if row != want {
			return fmt.Errorf("%s: snapshot %s has no row %d (found %d): it was changed", t.ds.Name, t.ds.Snapshot, want, row)
		}
		if err := fn(row, values); err != nil {
			return err
		}
		want++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: rows [%d,%d): %w", t.ds.Name, start, end, err)
	}
	if want != end {
		return fmt.Errorf("%s: snapshot %s has no row %d: it was changed", t.ds.Name, t.ds.Snapshot, want)
	}
	return nil
}

// Close closes the connections.
func (t *Table) Close() error { return t.db.Close() }
