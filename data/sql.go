package data

import (
	"context"
	"database/sql"
	"fmt"

	"elasticdl/internal/sqldb"
)

// SQL reads the snapshot of a database table's or query's rows that the
// job's master made at start (sqldb.Prepare), by ranges of its row number,
// with a Schema made from the columns' types: a number column is Numeric,
// a text column Categorical (cat: hashed ids), a hash=COLUMN:N column
// Hashed (hash(N), its text hashed as a CSV file's), the label= column
// the Label and the ignore= columns Ignore. Values are decoded as SchemaCSV decodes a CSV file's fields, from
// their text, so the same data gives the same records from a table as from
// a CSV file; NULL is an empty field (a Numeric 0, the "missing" id), and a
// record whose label is NULL is corrupt.
type SQL struct {
	table  *sqldb.Table
	schema Schema
	plan   *schemaPlan
	label  int // the label's column
}

// OpenSQL opens the snapshot a sqlite://, postgres:// or mysql:// URI
// with snapshot= and label= names (sqldb.Prepare returns it). A column
// of a type a model cannot take is an error naming it.
func OpenSQL(uri string) (*SQL, error) {
	t, err := sqldb.Open(context.Background(), uri)
	if err != nil {
		return nil, err
	}
	s, err := newSQL(t)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("%s: %w", t.Name(), err)
	}
	return s, nil
}

func newSQL(t *sqldb.Table) (*SQL, error) {
	s := &SQL{table: t}
	for i, c := range t.Columns() {
		col := Column{Name: c.Name}
		switch {
		case c.Name == t.Label():
			col.Kind, s.label = Label, i
		case t.Ignored(c.Name):
			col.Kind = Ignore
		case t.Buckets(c.Name) > 0 && (c.Kind == sqldb.Number || c.Kind == sqldb.Text):
			col.Kind, col.Buckets = Hashed, t.Buckets(c.Name)
		case c.Kind == sqldb.Number:
			col.Kind = Numeric
		case c.Kind == sqldb.Text:
			col.Kind = Categorical
		default:
			return nil, fmt.Errorf("column %q: type %s: not a number or text", c.Name, c.Type)
		}
		s.schema.Columns = append(s.schema.Columns, col)
	}
	var err error
	s.plan, err = s.schema.plan()
	return s, err
}

// Name returns the URI, its password hidden.
func (s *SQL) Name() string { return s.table.Name() }

// Len returns the number of rows.
func (s *SQL) Len() int64 { return s.table.Len() }

// FeatureShape returns [number of numeric columns].
func (s *SQL) FeatureShape() []int { return []int{s.plan.numDense} }

// NumCategorical returns the number of text and hash= columns.
func (s *SQL) NumCategorical() int { return s.plan.numCategorical }

// IDBound is 0 when a text column has unbounded hashed ids, else the hash=
// columns' ids (see Schema).
func (s *SQL) IDBound() int64 { return s.plan.idBound }

// Schema returns the schema the rows are read with.
func (s *SQL) Schema() Schema { return Schema{Columns: append([]Column(nil), s.schema.Columns...)} }

// Read decodes rows [start,end).
func (s *SQL) Read(start, end int64) (*Batch, error) {
	if err := checkRange(s.Name(), start, end, s.Len()); err != nil {
		return nil, err
	}
	b := s.plan.newBatch(int(end - start))
	fields := make([]string, len(s.schema.Columns))
	err := s.table.Read(context.Background(), start, end, func(row int64, values []sql.NullString) error {
		for i, v := range values {
			fields[i] = v.String // NULL: "", as an empty CSV field
		}
		err := s.plan.decode(fields, b)
		if err == nil {
			b.Index = append(b.Index, row)
			return nil
		}
		if !values[s.label].Valid {
			err = fmt.Errorf("label column %q is NULL", s.schema.Columns[s.label].Name)
		}
		b.Corrupt = append(b.Corrupt, &RecordError{Source: s.Name(), Record: row, Err: err})
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.N = len(b.Labels)
	return b, nil
}

// Close closes the database connections.
func (s *SQL) Close() error { return s.table.Close() }
