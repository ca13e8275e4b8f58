package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// InputRow is the staged input's row number column: 0, 1, ... in the
// query's order. Not RowColumn, which the job's snapshot of the staged
// rows adds.
const InputRow = "_edl_in_row"

// predictBatch is how many predictions one transaction writes.
const predictBatch = 1000

// Staging are TO PREDICT's tables for result table t: the input, the
// predictions, and the result before its rename to t. A killed run
// leaves only these, which the next run for t drops first.
type Staging struct{ In, Pred, Tmp string }

// StagingFor names t's staging tables.
func StagingFor(t string) Staging {
	return Staging{In: t + "__edl_in", Pred: t + "__edl_pred", Tmp: t + "__edl_tmp"}
}

// TableExists says whether table name is in the connection's schema.
func TableExists(ctx context.Context, db *sql.DB, d Dialect, name string) (bool, error) {
	return tableExists(ctx, db, d, name)
}

// DropStaging drops s's tables that are there.
func DropStaging(ctx context.Context, db *sql.DB, d Dialect, s Staging) error {
	for _, t := range []string{s.In, s.Pred, s.Tmp} {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.quote(t)); err != nil {
			return fmt.Errorf("drop %s: %w", t, err)
		}
	}
	return nil
}

// StageInput copies query's rows into s.In, numbered from 0 in InputRow
// in the order the database returns them (see stageInput), and returns the query's
// columns (as Describe). A column named InputRow or RowColumn is refused.
func StageInput(ctx context.Context, db *sql.DB, d Dialect, s Staging, query string) (cols []Column, err error) {
	if cols, err = Describe(ctx, db, d, query); err != nil {
		return nil, err
	}
	for _, c := range cols {
		if c.Name == InputRow || c.Name == RowColumn {
			return nil, fmt.Errorf("column %q: a name TO PREDICT keeps for itself: rename it", c.Name)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	for _, q := range d.stageInput(s.In, query, cols) {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("copy the input rows into %s: %w", s.In, err)
		}
	}
	// The job's row i is the staged row numbered i: 0..n-1, no gaps (a
	// MariaDB auto_increment_increment above 1 would make some).
	var n, end int64
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(MAX("+d.quote(InputRow)+") + 1, 0) FROM "+d.quote(s.In)).Scan(&n, &end); err != nil {
		return nil, fmt.Errorf("count the input rows: %w", err)
	}
	if n != end {
		return nil, fmt.Errorf("the input rows in %s are numbered with gaps (%d rows, the last numbered %d): is auto_increment_increment 1?", s.In, n, end-1)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("copy the input rows into %s: %w", s.In, err)
	}
	return cols, nil
}

// stageInput is the statements that copy query's rows into table,
// numbered from 0 in InputRow. MariaDB drops an ORDER BY in a derived
// table, so there the query is the CREATE TABLE's own SELECT, its order
// kept by an AUTO_INCREMENT key (from 1: shifted down after, in order).
// PostgreSQL and SQLite keep a subquery's ORDER BY for ROW_NUMBER() OVER ().
func (d Dialect) stageInput(table, query string, cols []Column) []string {
	if d != MySQL {
		return d.numberedCopy(table, query, InputRow, cols, nil)
	}
	r := d.quote(InputRow)
	return []string{
		"CREATE TABLE " + d.quote(table) + " (" + r + " BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY) " + query,
		"UPDATE " + d.quote(table) + " SET " + r + " = " + r + " - 1 ORDER BY " + r,
	}
}

// Prediction is one input row's: its class and class probabilities.
type Prediction struct {
	Row   int64
	Class int64
	P1    float64 // class 1's probability (a two-class model's)
}

// createPredictions makes a predictions table.
func (d Dialect) createPredictions(table string) string {
	return "CREATE TABLE " + d.quote(table) + " (" + d.quote(InputRow) + " BIGINT NOT NULL PRIMARY KEY, class BIGINT NOT NULL, p1 " + d.numberType() + ")"
}

// WritePredictions writes ps into a new table s.Pred, predictBatch rows
// a transaction.
func WritePredictions(ctx context.Context, db *sql.DB, d Dialect, s Staging, ps []Prediction) error {
	if _, err := db.ExecContext(ctx, d.createPredictions(s.Pred)); err != nil {
		return fmt.Errorf("create %s: %w", s.Pred, err)
	}
	for start := 0; start < len(ps); start += predictBatch {
		if err := writeBatch(ctx, db, d, s.Pred, ps[start:min(start+predictBatch, len(ps))]); err != nil {
			return fmt.Errorf("write into %s: %w", s.Pred, err)
		}
	}
	return nil
}

func writeBatch(ctx context.Context, db *sql.DB, d Dialect, table string, ps []Prediction) error {
	return inTx(ctx, db, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, "INSERT INTO "+d.quote(table)+" VALUES ("+d.placeholders(3)+")")
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, p := range ps {
			if _, err := stmt.ExecContext(ctx, p.Row, p.Class, p.P1); err != nil {
				return err
			}
		}
		return nil
	})
}

// createResult is the statement that makes s.Tmp: the input's columns in
// input order, then col (the class) and, with p1, col_p1.
func (d Dialect) createResult(s Staging, input []string, col string, p1 bool) string {
	list := make([]string, 0, len(input)+2)
	for _, c := range input {
		list = append(list, "i."+d.quote(c))
	}
	list = append(list, "p.class AS "+d.quote(col))
	if p1 {
		list = append(list, "p.p1 AS "+d.quote(col+"_p1"))
	}
	n := d.quote(InputRow)
	return "CREATE TABLE " + d.quote(s.Tmp) + " AS SELECT " + strings.Join(list, ", ") + " FROM " + d.quote(s.In) + " i JOIN " +
		d.quote(s.Pred) + " p ON p." + n + " = i." + n + " ORDER BY i." + n
}

// FinishPredictions makes result table t from s's input and predictions
// through s.Tmp, renamed to t last so that t only appears complete, and
// drops the staging tables.
func FinishPredictions(ctx context.Context, db *sql.DB, d Dialect, s Staging, t string, input []string, col string, p1 bool) error {
	if _, err := db.ExecContext(ctx, d.createResult(s, input, col, p1)); err != nil {
		return fmt.Errorf("create %s: %w", s.Tmp, err)
	}
	if _, err := db.ExecContext(ctx, d.rename(s.Tmp, t)); err != nil {
		return fmt.Errorf("rename %s to %s: %w", s.Tmp, t, err)
	}
	return DropStaging(ctx, db, d, s)
}
