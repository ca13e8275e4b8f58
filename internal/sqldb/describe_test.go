package sqldb_test

import (
	"context"
	"testing"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// TestDescribe: a query's columns and kinds without its rows, and a
// projection that casts them, on each database.
func TestDescribe(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		ctx := context.Background()
		table := db.NewTable(t, "x DOUBLE PRECISION", "n INTEGER", "c TEXT")
		db.Insert(t, table, "x, n, c", []any{1.5, 3, "7"})
		kinds := func(q string) []sqldb.Kind {
			t.Helper()
			cols, err := sqldb.Describe(ctx, db.SQL, db.Dialect, q)
			if err != nil {
				t.Fatal(err)
			}
			var ks []sqldb.Kind
			for _, c := range cols {
				ks = append(ks, c.Kind)
			}
			return ks
		}
		q := "SELECT * FROM " + table
		if got, want := kinds(q), []sqldb.Kind{sqldb.Number, sqldb.Number, sqldb.Text}; !equalKinds(got, want) {
			t.Errorf("kinds %v, want %v", got, want)
		}
		p := db.Dialect.Project(q, []sqldb.Projected{{Name: "x"}, {Name: "n", Cast: sqldb.Text}, {Name: "c", Cast: sqldb.Number}})
		if got, want := kinds(p), []sqldb.Kind{sqldb.Number, sqldb.Text, sqldb.Number}; !equalKinds(got, want) {
			t.Errorf("projected kinds %v, want %v", got, want)
		}
		res, _, err := sqldb.Run(ctx, db.SQL, p)
		if err != nil || len(res.Rows) != 1 || res.Rows[0][1].String != "3" {
			t.Errorf("projected rows %v, %v", res.Rows, err)
		}
		if _, err := sqldb.Describe(ctx, db.SQL, db.Dialect, "SELECT nope FROM "+table); err == nil {
			t.Error("described an unknown column")
		}
	})
}

func equalKinds(a, b []sqldb.Kind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
