// Package sqldbtest gives tests the databases to run on: a new SQLite file
// always, and the PostgreSQL and MariaDB servers whose datasource URIs are
// in ELASTICDL_TEST_POSTGRES and ELASTICDL_TEST_MYSQL (eval "$(hack/db.sh
// up)" sets them). Without them a test skips those two, unless
// ELASTICDL_REQUIRE_DB=1 (CI's hack/test.sh), when it fails. Tests make
// tables of unique names and drop them at the end, so that several runs can
// share one server.
package sqldbtest

import (
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"elasticdl/internal/sqldb"
)

// DB is one database to test on.
type DB struct {
	Name    string // sqlite, postgres, mysql
	URI     string // its datasource URI, without parameters
	Dialect sqldb.Dialect
	SQL     *sql.DB // for the test's own statements
}

// The environment variables that name the servers.
const (
	EnvPostgres = "ELASTICDL_TEST_POSTGRES"
	EnvMySQL    = "ELASTICDL_TEST_MYSQL"
	EnvRequire  = "ELASTICDL_REQUIRE_DB"
)

// Each runs f as a subtest on each database.
func Each(t *testing.T, f func(t *testing.T, db *DB)) {
	t.Helper()
	for _, name := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(name, func(t *testing.T) { f(t, Open(t, name)) })
	}
}

// Open opens database name (sqlite, postgres or mysql) for the test, or
// skips it (see the package comment).
func Open(t *testing.T, name string) *DB {
	t.Helper()
	var uri string
	switch name {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "test.db")
		if err := os.WriteFile(path, nil, 0o644); err != nil { // an empty file is an empty database
			t.Fatal(err)
		}
		uri = "sqlite://" + path
	case "postgres":
		uri = serverURI(t, EnvPostgres)
	case "mysql":
		uri = serverURI(t, EnvMySQL)
	default:
		t.Fatalf("no database %q", name)
	}
	ds, err := sqldb.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	driver := map[sqldb.Dialect]string{sqldb.SQLite: "sqlite", sqldb.Postgres: "pgx", sqldb.MySQL: "mysql"}[ds.Dialect]
	db, err := sql.Open(driver, ds.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("%s: %v", ds.Name, err)
	}
	return &DB{Name: name, URI: uri, Dialect: ds.Dialect, SQL: db}
}

func serverURI(t *testing.T, env string) string {
	t.Helper()
	uri := os.Getenv(env)
	if uri == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s is not set, and %s=1: start the servers with eval \"$(hack/db.sh up)\"", env, EnvRequire)
		}
		t.Skipf("%s is not set: eval \"$(hack/db.sh up)\" to test on this database too", env)
	}
	return uri
}

// Exec runs statements, failing the test on an error.
func (db *DB) Exec(t testing.TB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.SQL.Exec(s); err != nil {
			t.Fatalf("%s: %s: %v", db.Name, s, err)
		}
	}
}

// NewTable makes a table of a unique name with columns (column
// definitions, e.g. "id INTEGER PRIMARY KEY"), dropped when the test ends.
// INTEGER, DOUBLE PRECISION and TEXT mean the same in all three.
func (db *DB) NewTable(t testing.TB, columns ...string) string {
	t.Helper()
	name := "t_" + strings.ToLower(rand.Text()[:12])
	db.Exec(t, "CREATE TABLE "+name+" ("+strings.Join(columns, ", ")+")")
	t.Cleanup(func() { db.SQL.Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

// Insert inserts rows into table's columns (comma-separated), in one
// statement.
func (db *DB) Insert(t testing.TB, table, columns string, rows ...[]any) {
	t.Helper()
	if len(rows) == 0 {
		return
	}
	var values []string
	var args []any
	for _, r := range rows {
		ph := make([]string, len(r))
		for i, v := range r {
			args = append(args, v)
			ph[i] = "?"
			if db.Dialect == sqldb.Postgres {
				ph[i] = fmt.Sprintf("$%d", len(args))
			}
		}
		values = append(values, "("+strings.Join(ph, ", ")+")")
	}
	q := "INSERT INTO " + table + " (" + columns + ") VALUES " + strings.Join(values, ", ")
	if _, err := db.SQL.Exec(q, args...); err != nil {
		t.Fatalf("%s: insert into %s: %v", db.Name, table, err)
	}
}

// Source is the URI of a data source over the database with params
// (e.g. "table=t&label=y").
func (db *DB) Source(params string) string { return db.URI + "?" + params }

// Tables lists the tables whose names start with prefix.
func (db *DB) Tables(t testing.TB, prefix string) []string {
	t.Helper()
	q := map[sqldb.Dialect]string{
		sqldb.SQLite:   "SELECT name FROM sqlite_master WHERE type = 'table'",
		sqldb.Postgres: "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()",
		sqldb.MySQL:    "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()",
	}[db.Dialect]
	rows, err := db.SQL.Query(q)
	if err != nil {
		t.Fatalf("%s: %v", db.Name, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}
