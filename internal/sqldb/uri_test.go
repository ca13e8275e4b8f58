package sqldb

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		uri                            string
		dialect                        Dialect
		dsn, table, query, snap, label string
	}{
		{uri: "sqlite:///data/x.db?table=train&label=y", dialect: SQLite,
			dsn: "/data/x.db?_pragma=busy_timeout%2810000%29", table: "train", label: "y"},
		{uri: "sqlite://rel/x.db", dialect: SQLite, dsn: "rel/x.db?_pragma=busy_timeout%2810000%29"},
		{uri: "sqlite://x.db?query=SELECT+a%2C+b+FROM+t+WHERE+a+%3E+1%3B&label=b", dialect: SQLite,
			dsn: "x.db?_pragma=busy_timeout%2810000%29", query: "SELECT a, b FROM t WHERE a > 1", label: "b"},
		{uri: "sqlite://x.db?_pragma=journal_mode(WAL)&table=t", dialect: SQLite,
			dsn: "x.db?_pragma=journal_mode%28WAL%29&_pragma=busy_timeout%2810000%29", table: "t"},
		{uri: "postgres://u:p@127.0.0.1:5432/db?table=census.train&label=income", dialect: Postgres,
			dsn: "postgres://u:p@127.0.0.1:5432/db?connect_timeout=10", table: "census.train", label: "income"},
		{uri: "postgresql://u:p@h/db?sslmode=disable&snapshot=elasticdl_snap_run_1_0123abcd&label=y", dialect: Postgres,
			dsn: "postgres://u:p@h/db?connect_timeout=10&sslmode=disable", snap: "elasticdl_snap_run_1_0123abcd", label: "y"},
		{uri: "mysql://u:p@tcp(127.0.0.1:3306)/db?table=t&label=y", dialect: MySQL,
			dsn: "u:p@tcp(127.0.0.1:3306)/db?timeout=10s", table: "t", label: "y"},
		{uri: "mysql://u:p?@x@tcp(h:1)/db", dialect: MySQL, dsn: "u:p?@x@tcp(h:1)/db?timeout=10s"},
	} {
		ds, err := Parse(c.uri)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.uri, err)
			continue
		}
		got := [...]any{ds.Dialect, ds.DSN, ds.Table, ds.Query, ds.Snapshot, ds.Label}
		want := [...]any{c.dialect, c.dsn, c.table, c.query, c.snap, c.label}
		if got != want {
			t.Errorf("Parse(%q) = %q, want %q", c.uri, got, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ uri, want string }{
		{"x.db", "unknown scheme"},
		{"sqlit://x.db", "unknown scheme"},
		{"sqlite://", "no file or database"},
		{"sqlite:///?table=t", "no file or database"},
		{"postgres://u:p@h:5432/", "no file or database"},
		{"postgres://u:p@h:5432", "want USER:PASSWORD@HOST:PORT/DB"},
		{"postgres://u:p@h:port/db", "invalid port"},
		{"mysql://u:p@127.0.0.1:3306/db", "no address"},
		{"mysql://u:p@tcp(h:1)/", "no file or database"},
		{"mysql://u:p@tcp(h:1)/db?timeout=x", "invalid duration"},
		{"sqlite://x.db?table=t&query=SELECT+1", "give one of table=, query= and snapshot="},
		{"sqlite://x.db?table=", "table= is empty"},
		{"sqlite://x.db?table=t&label=", "label=: an empty column name"},
		{"sqlite://x.db?table=t&table=u", `parameter "table" given 2 times`},
		{"sqlite://x.db?snapshot=t", "not a snapshot's name"},
		{"sqlite://x.db?table=%zz", "parameters: invalid URL escape"},
		{"sqlite://x.db?table=t&order=a,,b", "order=a,,b: an empty column name"},
		{"sqlite://x.db?table=t&ignore=", "ignore=: an empty column name"},
		{"sqlite://x.db?table=t&label=y&ignore=a,y", `label column "y" is ignored too`},
		{"sqlite://x.db?table=t&hash=c", `hash=c: "c": want COLUMN:N`},
		{"sqlite://x.db?table=t&hash=c:0", `want COLUMN:N with N a whole number above 0`},
		{"sqlite://x.db?table=t&hash=:3", `":3": want COLUMN:N`},
		{"sqlite://x.db?table=t&hash=c:x", `"c:x": want COLUMN:N`},
		{"sqlite://x.db?table=t&hash=c:3,c:4", `column "c" is given twice`},
		{"sqlite://x.db?table=t&label=y&hash=y:3", `hash=: column "y" is the label or ignored`},
		{"sqlite://x.db?table=t&ignore=c&hash=c:3", `hash=: column "c" is the label or ignored`},
	} {
		_, err := Parse(c.uri)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", c.uri, err, c.want)
			continue
		}
		if !strings.Contains(err.Error(), URISyntax) || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("Parse(%q) = %v: want one line that ends with the syntax", c.uri, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for _, c := range [][2]string{
		{"postgres://u:secret@h:1/db?table=t", "postgres://u:xxxxx@h:1/db?table=t"},
		{"postgres://u@h:1/db", "postgres://u@h:1/db"},
		{"mysql://u:se@c/r)et@tcp(h:1)/db", "mysql://u:xxxxx@tcp(h:1)/db"},
		{"mysql://u:secret@tcp(h:1)/db?query=a%40b", "mysql://u:xxxxx@tcp(h:1)/db?query=a%40b"},
		{"sqlite:///a@b/x.db", "sqlite:///a@b/x.db"},
		{"x.db", "x.db"},
	} {
		if got := redact(c[0]); got != c[1] {
			t.Errorf("redact(%q) = %q, want %q", c[0], got, c[1])
		}
	}
	for _, uri := range []string{
		"postgres://u:secret@h:x/db",             // net/url's error
		"postgres://u:secret@h:1/db?sslmode=bad", // pgx's
		"mysql://u:secret@tcp(h:1)/db?timeout=x", // the MySQL driver's
		"mysql://u:secret@tcp(h:1)/db?query=%zz", // ours
	} {
		if _, err := Parse(uri); err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("Parse(%q) = %v: want an error without the password", uri, err)
		}
	}
}

func TestWithSnapshot(t *testing.T) {
	for _, c := range [][2]string{
		{"sqlite:///d/x.db?query=SELECT+1&label=y", "sqlite:///d/x.db?label=y&snapshot=S"},
		{"postgres://u:p@h:1/db?sslmode=disable&table=t&label=y", "postgres://u@h:1/db?label=y&snapshot=S&sslmode=disable"},
		{"mysql://u:p@tcp(h:1)/db?table=t&label=y&order=id&ignore=id,+d", "mysql://u@tcp(h:1)/db?ignore=id%2Cd&label=y&snapshot=S"},
		{"mysql://u:p?@x@tcp(h:1)/db?table=t&label=y", "mysql://u@tcp(h:1)/db?label=y&snapshot=S"},
		{"sqlite://x.db?table=t&label=y&hash=+c:7,b:3", "sqlite://x.db?hash=b%3A3%2Cc%3A7&label=y&snapshot=S"},
	} {
		ds, err := Parse(c[0])
		if err != nil {
			t.Fatal(err)
		}
		if got := ds.WithSnapshot("S"); got != c[1] {
			t.Errorf("%s: WithSnapshot = %q, want %q", c[0], got, c[1])
		}
	}
}

func TestIsURI(t *testing.T) {
	for uri, want := range map[string]bool{
		"sqlite://x.db": true, "postgres://h/db": true, "postgresql://h/db": true, "mysql://u@tcp(h)/db": true,
		"csv://x.csv?schema=a:label": false, "x.db": false, "synthetic-ctr://": false,
	} {
		if IsURI(uri) != want {
			t.Errorf("IsURI(%q) = %v, want %v", uri, !want, want)
		}
	}
}

// TestPasswords: the password of each URI form is found, stripped, put
// back and given to the driver, and no URI meant for names holds it.
func TestPasswords(t *testing.T) {
	for _, c := range []struct {
		uri, password, stripped string
	}{
		{"postgres://u:s%40c%2Fr%3Aet@h:1/db?table=t", "s@c/r:et", "postgres://u@h:1/db?table=t"},
		{"postgresql://u:secret@h:1/db", "secret", "postgresql://u@h:1/db"},
		{"postgres://u@h:1/db?table=t", "", "postgres://u@h:1/db?table=t"},
		{"mysql://u:se@c/r)et@tcp(h:1)/db?table=t", "se@c/r)et", "mysql://u@tcp(h:1)/db?table=t"},
		{"mysql://u@tcp(h:1)/db", "", "mysql://u@tcp(h:1)/db"},
		{"sqlite:///a@b/x.db?table=t", "", "sqlite:///a@b/x.db?table=t"},
	} {
		if got := Password(c.uri); got != c.password {
			t.Errorf("Password(%q) = %q, want %q", c.uri, got, c.password)
		}
		if got := StripPassword(c.uri); got != c.stripped {
			t.Errorf("StripPassword(%q) = %q, want %q", c.uri, got, c.stripped)
		}
		if c.password == "" {
			continue
		}
		back := WithPassword(c.stripped, c.password)
		if Password(back) != c.password || StripPassword(back) != c.stripped {
			t.Errorf("WithPassword(%q) = %q: password %q, want %q", c.stripped, back, Password(back), c.password)
		}
		if got := WithPassword(c.uri, "other"); got != c.uri {
			t.Errorf("WithPassword of a URI with a password = %q, want it unchanged", got)
		}
		want, err := Parse(c.uri)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := Parse(c.stripped)
		if err != nil {
			t.Fatal(err)
		}
		if dsn, err := dsnWithPassword(ds.Dialect, ds.DSN, c.password); err != nil || dsn != want.DSN {
			t.Errorf("%s: the driver's DSN with the password = %q, %v; want %q", c.stripped, dsn, err, want.DSN)
		}
	}
	if got := WithPassword("sqlite:///x.db", "pw"); got != "sqlite:///x.db" {
		t.Errorf("WithPassword of an SQLite URI = %q", got)
	}
	if got := Redact("/data/a:b@c.csv"); got != "/data/a:b@c.csv" {
		t.Errorf("Redact of a file path = %q", got)
	}
}
