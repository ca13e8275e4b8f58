package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Connect opens the database that uri names and checks that it answers;
// the URI's table, query and label parameters play no part.
func Connect(ctx context.Context, uri string) (*sql.DB, *Datasource, error) {
	ds, err := Parse(uri)
	if err != nil {
		return nil, nil, err
	}
	db, err := connect(ctx, ds)
	if err != nil {
		return nil, nil, err
	}
	return db, ds, nil
}

// inTx runs fn in one transaction: committed when fn returns nil, rolled
// back otherwise (so an error leaves nothing half-written).
func inTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Result is what a statement gave: a query's columns and rows (NULL is
// an invalid NullString), or the rows a statement changed.
type Result struct {
	Query    bool
	Columns  []string
	Rows     [][]sql.NullString
	Affected int64 // -1 when the driver does not say
}

// MaxRows is the most rows Run keeps of a query: a statement typed at a
// terminal that selects a whole table must not fill the memory.
const MaxRows = 10000

// Run runs one standard statement as written. A statement that returns
// rows (ReturnsRows) is a query: its first MaxRows rows are kept and
// Truncated says whether there were more.
func Run(ctx context.Context, db *sql.DB, stmt string) (res Result, truncated bool, err error) {
	if !ReturnsRows(stmt) {
		r, err := db.ExecContext(ctx, stmt)
		if err != nil {
			return Result{}, false, err
		}
		n, err := r.RowsAffected()
		if err != nil {
			n = -1
		}
		return Result{Affected: n}, false, nil
	}
	rows, err := db.QueryContext(ctx, stmt)
	if err != nil {
		return Result{}, false, err
	}
	defer rows.Close()
	res = Result{Query: true}
	if res.Columns, err = rows.Columns(); err != nil {
		return Result{}, false, err
	}
	for rows.Next() {
		if len(res.Rows) == MaxRows {
			truncated = true
			break
		}
		row := make([]sql.NullString, len(res.Columns))
		ptrs := make([]any, len(row))
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return Result{}, false, fmt.Errorf("row %d: %w", len(res.Rows)+1, err)
		}
		res.Rows = append(res.Rows, row)
	}
	return res, truncated, rows.Err()
}

// rowWords start the statements that return rows; any other statement
// is run with Exec, which reports the rows it changed.
var rowWords = []string{"SELECT", "WITH", "VALUES", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "PRAGMA", "TABLE"}

// ReturnsRows says whether stmt is a query, from its first word
// (parentheses and comments before it skipped). An INSERT … RETURNING is
// not: its count is what is printed.
func ReturnsRows(stmt string) bool {
	s := strings.TrimLeft(stmt, " \t\r\n(")
	for strings.HasPrefix(s, "--") || strings.HasPrefix(s, "/*") {
		end := "\n"
		if strings.HasPrefix(s, "/*") {
			end = "*/"
		}
		i := strings.Index(s, end)
		if i < 0 {
			return false
		}
		s = strings.TrimLeft(s[i+len(end):], " \t\r\n(")
	}
	word := s
	if i := strings.IndexFunc(s, func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') }); i >= 0 {
		word = s[:i]
	}
	for _, w := range rowWords {
		if strings.EqualFold(word, w) {
			return true
		}
	}
	return false
}
