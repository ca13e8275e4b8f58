package sqldb

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
)

// The parameters of a datasource URI that are ours; any other is the
// driver's (sslmode=disable, _pragma=..., charset=...).
const (
	paramQuery    = "query"
	paramTable    = "table"
	paramLabel    = "label"
	paramSnapshot = "snapshot"
	paramOrder    = "order"
	paramIgnore   = "ignore"
	paramHash     = "hash"
)

var ourParams = map[string]bool{paramQuery: true, paramTable: true, paramLabel: true, paramSnapshot: true, paramOrder: true, paramIgnore: true, paramHash: true}

// URISyntax is the help that errors about a URI end with.
const URISyntax = "want sqlite://PATH, postgres://USER:PASSWORD@HOST:PORT/DB or mysql://USER:PASSWORD@tcp(HOST:PORT)/DB, " +
	"with ?table=NAME or ?query=SQL (URL-escaped) and &label=COLUMN for a data source"

// Datasource is a parsed datasource URI.
type Datasource struct {
	URI      string // as given
	Name     string // the URI with its password hidden: for messages and logs
	Dialect  Dialect
	DSN      string // the driver's data source name
	Table    string // table=: a table's rows, in the order the database returns them
	Query    string // query=: a query's rows
	Snapshot string // snapshot=: a snapshot that Prepare made
	Label    string // label=: the label column
	// Order (order=A,B) numbers the rows by these columns; without, in
	// the order the database returns them, which for PostgreSQL is not
	// the order they were written in.
	Order []string
	// Ignore (ignore=A,B) are columns that are no feature: an id, a
	// date.
	Ignore []string
	// Hash (hash=A:N,B:M) are columns whose values are hashed into N ids
	// each (CATEGORY_HASH), as a CSV schema's hash(N) column.
	Hash map[string]int64

	base   string     // the URI before the '?'
	driver url.Values // the driver's parameters
}

// IsURI says whether uri names a database: its scheme is one of ours.
func IsURI(uri string) bool {
	scheme, _, ok := strings.Cut(uri, "://")
	if !ok {
		return false
	}
	_, known := schemes[scheme]
	return known
}

var schemes = map[string]Dialect{"sqlite": SQLite, "postgres": Postgres, "postgresql": Postgres, "mysql": MySQL}

// Parse parses a datasource URI:
//
//	sqlite://PATH                          (sqlite:///abs/path, sqlite://rel/path)
//	postgres://USER:PASSWORD@HOST:PORT/DB  (also postgresql://)
//	mysql://USER:PASSWORD@tcp(HOST:PORT)/DB
//
// each with optional parameters: table=NAME (schema.table is split at the
// dot) or query=SQL (URL-escaped) for a data source, snapshot=NAME for a
// snapshot that Prepare made, label=COLUMN; any other parameter is passed to
// the driver. Parse does no I/O.
func Parse(uri string) (*Datasource, error) {
	ds, err := parse(uri)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // not the URL: it holds the password
		}
		return nil, fmt.Errorf("datasource %s: %w (%s)", redact(uri), err, URISyntax)
	}
	return ds, nil
}

func parse(uri string) (*Datasource, error) {
	scheme, rest, ok := strings.Cut(uri, "://")
	d, known := schemes[scheme]
	if !ok || !known {
		return nil, errors.New("unknown scheme")
	}
	base, query, err := splitParams(d, rest)
	if err != nil {
		return nil, err
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	ds := &Datasource{URI: uri, Name: redact(uri), Dialect: d, base: scheme + "://" + base, driver: url.Values{}}
	for _, k := range slices.Sorted(maps.Keys(q)) { // sorted: the same URI always gives the same error
		v := q[k]
		if _, ours := ourParams[k]; ours && len(v) != 1 {
			return nil, fmt.Errorf("parameter %q given %d times", k, len(v))
		}
		switch k {
		case paramQuery:
			ds.Query = strings.TrimRight(strings.TrimSpace(v[0]), "; \t\n")
		case paramTable:
			ds.Table = v[0]
		case paramLabel:
			ds.Label = v[0]
		case paramSnapshot:
			ds.Snapshot = v[0]
		case paramOrder:
			ds.Order = splitNames(v[0])
		case paramIgnore:
			ds.Ignore = splitNames(v[0])
		case paramHash:
			if ds.Hash, err = parseHash(v[0]); err != nil {
				return nil, err
			}
		default:
			ds.driver[k] = v
		}
	}
	if err := ds.checkParams(q); err != nil {
		return nil, err
	}
	ds.DSN, err = dsn(d, base, ds.driver)
	return ds, err
}

// splitParams splits the rest of a URI after its scheme at the '?' that
// starts the parameters. MySQL's password may hold a '?', so its
// parameters start after the address, at the first '?' after ")/".
func splitParams(d Dialect, rest string) (base, query string, err error) {
	from := 0
	if d == MySQL {
		i := strings.Index(rest, ")/")
		if i < 0 || !strings.Contains(rest[:i], "(") {
			return "", "", errors.New("no address: want USER:PASSWORD@tcp(HOST:PORT)/DB")
		}
		from = i + 2
	}
	base, query, _ = strings.Cut(rest[from:], "?")
	base = rest[:from] + base
	if strings.TrimPrefix(base, "/") == "" || strings.HasSuffix(base, "/") {
		return "", "", errors.New("no file or database")
	}
	return base, query, nil
}

// checkParams checks the combinations of our parameters.
func (ds *Datasource) checkParams(q url.Values) error {
	n := 0
	for _, k := range []string{paramQuery, paramTable, paramSnapshot} {
		if q.Has(k) {
			if q.Get(k) == "" {
				return fmt.Errorf("%s= is empty", k)
			}
			n++
		}
	}
	if n > 1 {
		return errors.New("give one of table=, query= and snapshot=")
	}
	for _, p := range []struct {
		k     string
		names []string
	}{{paramLabel, []string{ds.Label}}, {paramOrder, ds.Order}, {paramIgnore, ds.Ignore}} {
		if k := p.k; q.Has(k) && slices.Contains(p.names, "") {
			return fmt.Errorf("%s=%s: an empty column name", k, q.Get(k))
		}
	}
	if slices.Contains(ds.Ignore, ds.Label) && ds.Label != "" {
		return fmt.Errorf("label column %q is ignored too", ds.Label)
	}
	for c := range ds.Hash {
		if c == ds.Label || slices.Contains(ds.Ignore, c) {
			return fmt.Errorf("hash=: column %q is the label or ignored", c)
		}
	}
	if q.Has(paramSnapshot) && !IsSnapshotName(ds.Snapshot) {
		return fmt.Errorf("snapshot=%s: not a snapshot's name (%s...)", ds.Snapshot, snapshotPrefix)
	}
	return nil
}

// dsn is the driver's data source name for base, the URI after its scheme
// without our parameters; it checks what the driver would refuse.
func dsn(d Dialect, base string, params url.Values) (string, error) {
	switch d {
	case SQLite:
		p := maps.Clone(params)
		// Writers wait for each other instead of failing at once.
		p.Add("_pragma", "busy_timeout(10000)")
		return base + "?" + p.Encode(), nil
	case Postgres:
		u, err := url.Parse("postgres://" + base)
		if err != nil {
			return "", err
		}
		if u.Host == "" || strings.Trim(u.Path, "/") == "" {
			return "", errors.New("want USER:PASSWORD@HOST:PORT/DB")
		}
		p := maps.Clone(params)
		if !p.Has("connect_timeout") {
			p.Set("connect_timeout", "10") // a dead host is an error, not a hang
		}
		u.RawQuery = p.Encode()
		if _, err := pgx.ParseConfig(u.String()); err != nil {
			return "", err
		}
		return u.String(), nil
	default:
		s := base
		if len(params) > 0 {
			s += "?" + params.Encode()
		}
		cfg, err := mysql.ParseDSN(s)
		if err != nil {
			return "", err
		}
		if cfg.DBName == "" {
			return "", errors.New("no database: want USER:PASSWORD@tcp(HOST:PORT)/DB")
		}
		if cfg.Timeout == 0 {
			cfg.Timeout = connectTimeout
		}
		return cfg.FormatDSN(), nil
	}
}

// splitNames splits a comma-separated list of column names.
func splitNames(s string) []string {
	names := strings.Split(s, ",")
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
	}
	return names
}

// parseHash reads hash=A:N,B:M: column names, each once, with a whole
// number of ids above 0.
func parseHash(s string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, item := range strings.Split(s, ",") {
		name, n, ok := strings.Cut(item, ":")
		name = strings.TrimSpace(name)
		buckets, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		switch {
		case !ok || name == "" || err != nil || buckets < 1:
			return nil, fmt.Errorf("hash=%s: %q: want COLUMN:N with N a whole number above 0", s, item)
		case out[name] != 0:
			return nil, fmt.Errorf("hash=%s: column %q is given twice", s, name)
		}
		out[name] = buckets
	}
	return out, nil
}

// HashParam is hash='s value for columns (name: ids), in name order; ""
// for none.
func HashParam(columns map[string]int64) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(columns)) {
		parts = append(parts, name+":"+strconv.FormatInt(columns[name], 10))
	}
	return strings.Join(parts, ",")
}

// identity is what makes a snapshot: its rows and their order.
func (ds *Datasource) identity() string {
	return ds.source() + "\x00" + strings.Join(ds.Order, ",")
}

// source is the SQL whose rows the data source has.
func (ds *Datasource) source() string {
	if ds.Query != "" {
		return ds.Query
	}
	return "SELECT * FROM " + ds.Dialect.quoteName(ds.Table)
}

// WithSnapshot is the URI of snapshot name of this datasource: the same
// database and label, the driver's parameters kept, and no password: the
// URI becomes task names, persisted state and log lines (a reader takes
// the password from EnvPassword).
func (ds *Datasource) WithSnapshot(name string) string {
	p := maps.Clone(ds.driver)
	p.Set(paramSnapshot, name)
	if ds.Label != "" {
		p.Set(paramLabel, ds.Label)
	}
	if len(ds.Ignore) > 0 {
		p.Set(paramIgnore, strings.Join(ds.Ignore, ","))
	}
	if len(ds.Hash) > 0 {
		p.Set(paramHash, HashParam(ds.Hash))
	}
	return StripPassword(ds.base) + "?" + p.Encode()
}

// redact hides the password of a URI.
func redact(uri string) string {
	scheme, rest, at, ok := userInfo(uri)
	if !ok {
		return uri
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// Redact is uri with its password hidden when it names a database, else
// uri: for messages about any data source.
func Redact(uri string) string {
	if !IsURI(uri) {
		return uri
	}
	return redact(uri)
}

// StripPassword is uri without its password (USER:PASSWORD@ becomes
// USER@); a URI with none is returned as it is.
func StripPassword(uri string) string {
	scheme, rest, at, ok := userInfo(uri)
	if !ok {
		return uri
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + rest[at:]
}

// Password is the password a database URI holds ("" for none): the
// master hands it to its workers in EnvPassword.
func Password(uri string) string {
	scheme, rest, at, ok := userInfo(uri)
	if !ok {
		return ""
	}
	_, pw, _ := strings.Cut(rest[:at], ":")
	if scheme != "mysql" { // a URL's user information is escaped; MySQL's DSN is not
		if u, err := url.PathUnescape(pw); err == nil {
			pw = u
		}
	}
	return pw
}

// WithPassword is uri, a database URI without a password, with password
// in its user information (escaped as the URI's syntax wants): what the
// master opens its snapshots with when the user's URI held the password.
func WithPassword(uri, password string) string {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok || password == "" || Password(uri) != "" {
		return uri
	}
	at := strings.LastIndex(rest[:userEnd(scheme, rest)], "@")
	if at < 0 {
		return uri // no user to give it to
	}
	if scheme != "mysql" {
		password = strings.TrimPrefix(url.UserPassword("", password).String(), ":")
	}
	return scheme + "://" + rest[:at] + ":" + password + rest[at:]
}

// EnvPassword is the environment variable a database URI without a
// password takes it from: the user's, so that --training_data need not
// hold it, and the one a master sets for the workers it launches.
const EnvPassword = "ELASTICDL_DB_PASSWORD"

// dsnWithPassword is a driver's data source name dsn with password put
// in; SQLite has none.
func dsnWithPassword(d Dialect, dsn, password string) (string, error) {
	switch d {
	case Postgres:
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("bad URL") // not err: it holds the DSN
		}
		u.User = url.UserPassword(u.User.Username(), password)
		return u.String(), nil
	case MySQL:
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return "", errors.New("bad DSN")
		}
		cfg.Passwd = password
		return cfg.FormatDSN(), nil
	}
	return dsn, nil
}

// userInfo finds the end of a URI's user information, USER:PASSWORD: rest
// is the URI after its scheme, at the index of the '@' that ends it; ok is
// false without a password.
func userInfo(uri string) (scheme, rest string, at int, ok bool) {
	scheme, rest, ok = strings.Cut(uri, "://")
	if !ok {
		return "", "", 0, false
	}
	at = strings.LastIndex(rest[:userEnd(scheme, rest)], "@")
	if at < 0 || !strings.Contains(rest[:at], ":") {
		return "", "", 0, false
	}
	return scheme, rest, at, true
}

// userEnd is where the user information of rest, a URI after its scheme,
// may end at the latest.
func userEnd(scheme, rest string) int {
	if scheme == "mysql" {
		if i := strings.Index(rest, ")/"); i >= 0 {
			return i
		}
	} else if i := strings.IndexAny(rest, "/?"); i >= 0 {
		return i
	}
	return len(rest)
}
