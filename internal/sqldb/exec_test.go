package sqldb_test

import (
	"context"
	"strings"
	"testing"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

func TestReturnsRows(t *testing.T) {
	for stmt, want := range map[string]bool{
		"SELECT 1": true, "  select * from t": true, "(SELECT 1) UNION (SELECT 2)": true, "WITH a AS (SELECT 1) SELECT * FROM a": true,
		"SHOW TABLES": true, "describe t": true, "PRAGMA table_info(t)": true, "VALUES (1)": true, "EXPLAIN SELECT 1": true,
		"-- a comment\nSELECT 1": true, "/* c */ SELECT 1": true, "/* open": false,
		"CREATE TABLE t (a INT)": false, "INSERT INTO t VALUES (1)": false, "DELETE FROM t": false, "UPDATE t SET a = 1": false,
		"DROP TABLE t": false, "": false, "SELECTED": false,
	} {
		if got := sqldb.ReturnsRows(stmt); got != want {
			t.Errorf("ReturnsRows(%q) = %v, want %v", stmt, got, want)
		}
	}
}

// TestRun: on each database, a statement's count, a query's columns and
// rows with NULL, and an error for a bad statement.
func TestRun(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		ctx := context.Background()
		conn, ds, err := sqldb.Connect(ctx, db.URI)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if ds.Dialect != db.Dialect {
			t.Errorf("dialect %v, want %v", ds.Dialect, db.Dialect)
		}
		name := db.NewTable(t, "id INTEGER", "word VARCHAR(20)") // unique: servers are shared
		if _, _, err := sqldb.Run(ctx, conn, "INSERT INTO "+name+" VALUES (1, 'one'), (2, NULL), (3, 'three')"); err != nil {
			t.Fatal(err)
		}
		res, truncated, err := sqldb.Run(ctx, conn, "UPDATE "+name+" SET word = 'x' WHERE id >= 2")
		if err != nil || res.Query || res.Affected != 2 || truncated {
			t.Errorf("UPDATE: %+v %v %v, want 2 rows changed", res, truncated, err)
		}
		res, _, err = sqldb.Run(ctx, conn, "SELECT id, word FROM "+name+" WHERE id < 3 ORDER BY id")
		if err != nil || !res.Query || strings.Join(res.Columns, ",") != "id,word" || len(res.Rows) != 2 ||
			res.Rows[0][1].String != "one" || res.Rows[1][1].String != "x" {
			t.Errorf("SELECT: %+v %v", res, err)
		}
		res, _, err = sqldb.Run(ctx, conn, "SELECT NULL AS n")
		if err != nil || len(res.Rows) != 1 || res.Rows[0][0].Valid {
			t.Errorf("SELECT NULL: %+v %v", res, err)
		}
		if _, _, err := sqldb.Run(ctx, conn, "SELECT * FROM no_such_table_here"); err == nil {
			t.Error("a missing table is no error")
		}
	})
}
