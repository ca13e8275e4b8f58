package sqldb

import (
	"context"
	"database/sql"
	"fmt"
)

// Describe is query's columns, each with its type and the Kind a model
// takes it as (0: a type a model cannot take), without reading its rows:
// what a TO TRAIN statement needs to know before it starts a job.
func Describe(ctx context.Context, db *sql.DB, d Dialect, query string) ([]Column, error) {
	cols, err := queryColumns(ctx, db, d.columnsOf(query))
	if err != nil {
		return nil, err
	}
	if err := resolveKinds(ctx, db, d, query, cols); err != nil {
		return nil, err
	}
	for _, c := range cols {
		if c.Name == RowColumn {
			return nil, fmt.Errorf("column %q: the name of the snapshot's own row number column: rename it", c.Name)
		}
	}
	return cols, nil
}

// Projected is a column of a projection (Dialect.Project): its name and
// the kind its values are cast to (0: as they are).
type Projected struct {
	Name string
	Cast Kind
}
