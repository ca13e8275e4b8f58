package sqldb_test

import (
	"context"
	"testing"
	"time"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// TestWriteEvaluation: the table is made on the first write and appended
// to after; a table of another shape is an error naming it, and nothing
// of the failed write stays.
func TestWriteEvaluation(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		ctx := context.Background()
		table := db.NewTable(t, "x INTEGER")
		db.Exec(t, "DROP TABLE "+table) // a name of the test's own, dropped at its end
		e := sqldb.Evaluation{Model: "m", At: time.Unix(0, 0), Records: 10, Metrics: []sqldb.Metric{{Name: "AUC", Value: 0.75}, {Name: "Loss", Value: 0.5}}}
		for range 2 {
			if err := sqldb.WriteEvaluation(ctx, db.SQL, db.Dialect, table, e); err != nil {
				t.Fatal(err)
			}
		}
		var n int
		var sum float64
		if err := db.SQL.QueryRow("SELECT COUNT(*), SUM(value) FROM "+table+" WHERE model = 'm' AND records = 10").Scan(&n, &sum); err != nil || n != 4 || sum != 2.5 {
			t.Errorf("%d rows summing to %v, %v; want 4 summing to 2.5", n, sum, err)
		}
		other := db.NewTable(t, "x INTEGER")
		if err := sqldb.WriteEvaluation(ctx, db.SQL, db.Dialect, other, e); err == nil {
			t.Error("writing into a table of another shape: no error")
		}
		if err := db.SQL.QueryRow("SELECT COUNT(*) FROM " + other).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s holds %d rows, %v; want none", other, n, err)
		}
	})
}
