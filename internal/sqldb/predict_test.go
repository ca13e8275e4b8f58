package sqldb_test

import (
	"context"
	"strings"
	"testing"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// TestPredictTables: the input staged in the query's order, 2,500
// predictions written (three transactions), the result made of both in
// input order and renamed into place, the staging tables gone; a result
// with no p1 column; and each failure.
func TestPredictTables(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		ctx := context.Background()
		src := db.NewTable(t, "id INTEGER", "name TEXT")
		var rows [][]any
		for i := range 2500 {
			rows = append(rows, []any{(i * 7) % 2500, "n"})
		}
		db.Insert(t, src, "id, name", rows...)
		result := db.NewTable(t, "x INTEGER")
		db.Exec(t, "DROP TABLE "+result) // a name of the test's own, dropped at its end
		st := sqldb.StagingFor(result)
		t.Cleanup(func() { sqldb.DropStaging(context.Background(), db.SQL, db.Dialect, st) })
		cols, err := sqldb.StageInput(ctx, db.SQL, db.Dialect, st, "SELECT id, name FROM "+src+" ORDER BY id DESC")
		if err != nil || len(cols) != 2 || cols[0].Kind != sqldb.Number || cols[1].Kind != sqldb.Text {
			t.Fatalf("StageInput: %+v, %v", cols, err)
		}
		ps := make([]sqldb.Prediction, 2500)
		for i := range ps {
			ps[i] = sqldb.Prediction{Row: int64(i), Class: int64(i % 2), P1: float64(i) / 4}
		}
		if err := sqldb.WritePredictions(ctx, db.SQL, db.Dialect, st, ps); err != nil {
			t.Fatal(err)
		}
		if err := sqldb.FinishPredictions(ctx, db.SQL, db.Dialect, st, result, []string{"id", "name"}, "y", true); err != nil {
			t.Fatal(err)
		}
		r, err := db.SQL.Query("SELECT id, y, y_p1 FROM " + result)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for r.Next() {
			var id, y int64
			var p1 float64
			if err := r.Scan(&id, &y, &p1); err != nil {
				t.Fatal(err)
			}
			if id != int64(2499-n) || y != int64(n%2) || p1 != float64(n)/4 {
				t.Fatalf("row %d: id %d, y %d, p1 %v", n, id, y, p1)
			}
			n++
		}
		if r.Close(); n != 2500 {
			t.Errorf("%d rows, want 2500", n)
		}
		if left := db.Tables(t, result+"__edl_"); len(left) > 0 {
			t.Errorf("staging tables left: %q", left)
		}
		// Many classes: no p1 column.
		many := db.NewTable(t, "x INTEGER")
		db.Exec(t, "DROP TABLE "+many)
		st2 := sqldb.StagingFor(many)
		t.Cleanup(func() { sqldb.DropStaging(context.Background(), db.SQL, db.Dialect, st2) })
		if _, err := sqldb.StageInput(ctx, db.SQL, db.Dialect, st2, "SELECT id FROM "+src+" WHERE id < 3"); err != nil {
			t.Fatal(err)
		}
		if err := sqldb.WritePredictions(ctx, db.SQL, db.Dialect, st2, ps[:3]); err != nil {
			t.Fatal(err)
		}
		if err := sqldb.FinishPredictions(ctx, db.SQL, db.Dialect, st2, many, []string{"id"}, "k", false); err != nil {
			t.Fatal(err)
		}
		if r, err := db.SQL.Query("SELECT * FROM " + many); err != nil {
			t.Fatal(err)
		} else if c, _ := r.Columns(); r.Close() != nil || strings.Join(c, ",") != "id,k" {
			t.Errorf("columns %q, want id, k", c)
		}
		predictFailures(t, db, src, result)
	})
}

// predictFailures: a bad query, a column of a reserved name, a table
// already there: errors that name what is wrong.
func predictFailures(t *testing.T, db *sqldbtest.DB, src, taken string) {
	ctx := context.Background()
	st := sqldb.StagingFor("never")
	t.Cleanup(func() { sqldb.DropStaging(context.Background(), db.SQL, db.Dialect, st) })
	for _, c := range []struct{ query, err string }{
		{"SELECT nope FROM " + src, "query"},
		{"SELECT id AS _edl_in_row FROM " + src, `column "_edl_in_row": a name TO PREDICT keeps for itself`},
		{"SELECT id AS _edl_row FROM " + src, `column "_edl_row"`},
	} {
		if _, err := sqldb.StageInput(ctx, db.SQL, db.Dialect, st, c.query); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.query, err, c.err)
		}
	}
	if left := db.Tables(t, "never__edl_"); len(left) > 0 {
		t.Errorf("a failed StageInput left %q", left)
	}
	if err := sqldb.WritePredictions(ctx, db.SQL, db.Dialect, sqldb.Staging{Pred: taken}, nil); err == nil || !strings.Contains(err.Error(), "create "+taken) {
		t.Errorf("predictions into a table there: %v", err)
	}
	bad := sqldb.Staging{In: "never__edl_in", Pred: "never__edl_pred", Tmp: "never__edl_tmp"}
	if err := sqldb.FinishPredictions(ctx, db.SQL, db.Dialect, bad, "never", []string{"id"}, "y", true); err == nil || !strings.Contains(err.Error(), "create never__edl_tmp") {
		t.Errorf("a result of no staged input: %v", err)
	}
	ok, err := sqldb.TableExists(ctx, db.SQL, db.Dialect, taken)
	if err != nil || !ok {
		t.Errorf("TableExists(%s): %v, %v", taken, ok, err)
	}
}
