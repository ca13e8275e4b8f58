package sqldb_test

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// oneLine fails unless err is one line that says each of want.
func oneLine(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want one with %q", what, want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v\nwant one line with %q", what, err, w)
		}
	}
}

// TestBadSources: each bad data source is one clear error, and leaves no
// snapshot behind.
func TestBadSources(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		table := newTable(t, db, 10)
		nulls := db.NewTable(t, "id INTEGER", "y INTEGER")
		db.Insert(t, nulls, "id, y", []any{0, 1}, []any{1, nil}, []any{2, 0}, []any{3, nil})
		blob := map[string]string{"sqlite": "BLOB", "postgres": "BYTEA", "mysql": "BLOB"}[db.Name]
		odd := db.NewTable(t, "id INTEGER", "d DATE", "b "+blob, "y INTEGER")
		for _, c := range []struct {
			name, params string
			want         []string
		}{
			{"unknown table", "table=no_such_table&label=y", []string{"no_such_table"}},
			{"unknown column", "query=" + url.QueryEscape("SELECT nope FROM "+table) + "&label=y", []string{"nope"}},
			{"unknown label", "table=" + table + "&label=income", []string{`label column "income" is not one of the columns: id, x, c, y`}},
			{"unknown order", "table=" + table + "&label=y&order=id,nope", []string{`order= column "nope" is not one of the columns`}},
			{"unknown ignored", "table=" + table + "&label=y&ignore=nope", []string{`ignore= column "nope" is not one of the columns`}},
			{"NULL label", "table=" + nulls + "&label=y", []string{`label column "y" is NULL in 2 rows, the first of them row 1`}},
			{"a date", "query=" + url.QueryEscape("SELECT id, d, y FROM "+odd) + "&label=y", []string{`column "d" has type`, "a model cannot take"}},
			{"a blob", "query=" + url.QueryEscape("SELECT id, b, y FROM "+odd) + "&label=y", []string{`column "b" has type`}},
			{"the row column", "query=" + url.QueryEscape("SELECT id AS _edl_row, y FROM "+table) + "&label=y", []string{`column "_edl_row"`}},
			{"no label", "table=" + table, []string{"no label column: want label=COLUMN"}},
			{"no data", "label=y", []string{"no data: want table=NAME or query=SQL"}},
		} {
			_, err := sqldb.Prepare(context.Background(), db.Source(c.params), "run-Bad")
			oneLine(t, c.name, err, c.want...)
		}
		// Columns a model cannot take are fine when ignored.
		db.Insert(t, odd, "id, y", []any{1, 0})
		tb := openTable(t, prepare(t, db.Source("table="+odd+"&label=y&ignore=d,b"), "run-Ignore"))
		if tb.Len() != 1 || len(tb.Columns()) != 4 || !tb.Ignored("d") || tb.Ignored("id") {
			t.Errorf("ignore=d,b: %d rows, columns %v", tb.Len(), tb.Columns())
		}
		if left := db.Tables(t, "elasticdl_snap_run_bad"); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
		var n int
		if err := db.SQL.QueryRow("SELECT COUNT(*) FROM " + sqldb.SnapshotsTable + " WHERE name LIKE 'elasticdl_snap_run_bad%'").Scan(&n); err != nil || n != 0 {
			t.Errorf("%d records left in %s, %v", n, sqldb.SnapshotsTable, err)
		}
		_, err := sqldb.Open(context.Background(), db.Source("table="+table+"&label=y"))
		oneLine(t, "Open of a table", err, "not a snapshot")
	})
}

// TestConnectErrors: a refused connection, a wrong password and a missing
// file are each one error that names the datasource, without its password.
func TestConnectErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close() // nothing listens there now
	ctx := context.Background()
	for _, uri := range []string{
		"postgres://u:secret@" + closed + "/db?table=t&label=y",
		"mysql://u:secret@tcp(" + closed + ")/db?table=t&label=y",
	} {
		_, err := sqldb.Prepare(ctx, uri, "run-Refused")
		oneLine(t, uri, err, "connect to", "refused", ":xxxxx@")
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%v: the password shows", err)
		}
	}
	_, err = sqldb.Prepare(ctx, "sqlite://"+t.TempDir()+"/none.db?table=t&label=y", "run-Missing")
	oneLine(t, "a missing SQLite file", err, "none.db", "no such file")

	for name, denied := range map[string]string{"postgres": "password authentication failed", "mysql": "Access denied"} {
		t.Run(name+" password", func(t *testing.T) {
			db := sqldbtest.Open(t, name)
			ds, err := sqldb.Parse(db.URI)
			if err != nil {
				t.Fatal(err)
			}
			pw := passwordOf(db.URI)
			wrong := strings.Replace(db.URI, ":"+pw+"@", ":"+pw+"x@", 1)
			_, err = sqldb.Open(ctx, wrong+"?snapshot=elasticdl_snap_x_01234567&label=y")
			oneLine(t, "a wrong password", err, "connect to "+ds.Name, denied)
			if err != nil && strings.Contains(err.Error(), pw) {
				t.Errorf("%v: the password shows", err)
			}
		})
	}
}

// passwordOf is the password in a server's URI (user:password@...).
func passwordOf(uri string) string {
	_, rest, _ := strings.Cut(uri, "://")
	userinfo := rest[:strings.LastIndex(rest[:strings.IndexAny(rest, "(/")], "@")]
	_, pw, _ := strings.Cut(userinfo, ":")
	return pw
}

// TestPasswordNowhere: no URI Prepare returns and no error holds the
// password; a URI without one takes EnvPassword's, and without it the
// server refuses the connection.
func TestPasswordNowhere(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		ctx := context.Background()
		table := newTable(t, db, 10)
		pw := sqldb.Password(db.URI)
		hides := func(what, s string) {
			t.Helper()
			if pw != "" && strings.Contains(s, pw) {
				t.Errorf("%s holds the password: %s", what, s)
			}
		}
		first, err := sqldb.PrepareSnapshot(ctx, db.Source("table="+table+"&label=y"), "run-Secret")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sqldb.Drop(ctx, sqldb.WithPassword(first.URI, pw)) })
		again, err := sqldb.PrepareSnapshot(ctx, db.Source("table="+table+"&label=y"), "run-Secret")
		if err != nil || !first.Made || again.Made || again.URI != first.URI {
			t.Errorf("PrepareSnapshot twice: %+v then %+v, %v: want made, then found", first, again, err)
		}
		hides("the snapshot's URI", first.URI)
		for _, params := range []string{"table=no_such_table&label=y", "table=" + table + "&label=nope", "label=y"} {
			_, err := sqldb.Prepare(ctx, db.Source(params), "run-SecretBad")
			if err == nil {
				t.Fatalf("%s: no error", params)
			}
			hides("an error", err.Error())
		}
		if pw == "" {
			return // SQLite
		}
		t.Setenv(sqldb.EnvPassword, "")
		_, err = sqldb.Open(ctx, first.URI)
		oneLine(t, "a snapshot's URI without "+sqldb.EnvPassword, err, "connect to")
		t.Setenv(sqldb.EnvPassword, pw)
		if tb := openTable(t, first.URI); tb.Len() != 10 {
			t.Errorf("with %s: %d rows, want 10", sqldb.EnvPassword, tb.Len())
		}
		t.Setenv(sqldb.EnvPassword, pw+"x")
		_, err = sqldb.Open(ctx, first.URI)
		oneLine(t, "a wrong "+sqldb.EnvPassword, err, "connect to")
		hides("an error", err.Error())
		if tb := openTable(t, sqldb.WithPassword(first.URI, pw)); tb.Len() != 10 {
			t.Errorf("the URI's own password goes before %s: %d rows", sqldb.EnvPassword, tb.Len())
		}
	})
}
