package sqldb

import (
	"fmt"
	"regexp"
	"strings"
)

// Dialect is a database's flavour of SQL: all that differs between the
// three is here, so that the rest of the package is written once.
type Dialect int

// The dialects.
const (
	SQLite Dialect = iota + 1
	Postgres
	MySQL
)

func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// driverName is the database/sql driver's name.
func (d Dialect) driverName() string {
	if d == Postgres {
		return "pgx"
	}
	return d.String()
}

// quote quotes an identifier.
func (d Dialect) quote(name string) string {
	if d == MySQL {
		return "`" + strings.ReplaceAll(name, "`", "``") + "`"
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// Quote quotes an identifier.
func (d Dialect) Quote(name string) string { return d.quote(name) }

// quoteName quotes a table name, SCHEMA.TABLE as two identifiers.
func (d Dialect) quoteName(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = d.quote(p)
	}
	return strings.Join(parts, ".")
}

// literal is a string literal (both quote a ' by doubling it).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// tableExists is a query whose one row counts the tables named name in
// the connection's schema or database.
func (d Dialect) tableExists(name string) string {
	switch d {
	case SQLite:
		return "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = " + literal(name)
	case Postgres:
		return "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = " + literal(name)
	}
	return "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = " + literal(name)
}

// columnExists is a query for 1 if table has column, else 0; from the
// catalog, not SELECT *, whose plan PostgreSQL's drivers cache.
func (d Dialect) columnExists(table, column string) string {
	switch d {
	case SQLite:
		return "SELECT COUNT(*) FROM pragma_table_info(" + literal(table) + ") WHERE name = " + literal(column)
	case Postgres:
		return "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = " +
			literal(table) + " AND column_name = " + literal(column)
	}
	return "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = " +
		literal(table) + " AND column_name = " + literal(column)
}

// RowColumn is the snapshot's row number column: 0, 1, ... in the order
// the database returned the query's rows.
const RowColumn = "_edl_row"

// createSnapshot is the statements that copy query's rows, numbered from 0
// in RowColumn by the columns order or else in the order the database
// returns them, into table, with an index on RowColumn.
//   - SQLite has no ALTER TABLE ADD PRIMARY KEY, and its CREATE TABLE AS
//     keeps only the columns' affinities (INT, TEXT, NUM, ...): its table is
//     declared with the query's column types, RowColumn the INTEGER PRIMARY
//     KEY (the rowid).
//   - MariaDB numbers rows for ROW_NUMBER() OVER () in an order of its own
//     (it sorts them for the window), so without order a user variable
//     counts them as they come; the CREATE TABLE declares the key, which MariaDB merges
//     with the selected column of its name.
//   - PostgreSQL may scan a table in parallel, its workers' rows
//     interleaved: the copy is made by one process.
func (d Dialect) createSnapshot(table, query string, cols []Column, order []string) []string {
	return d.numberedCopy(table, query, RowColumn, cols, order)
}

// numberedCopy is createSnapshot with row number column rowCol.
func (d Dialect) numberedCopy(table, query, rowCol string, cols []Column, order []string) []string {
	r := d.quote(rowCol)
	number := "ROW_NUMBER() OVER () - 1"
	if len(order) > 0 {
		by := make([]string, len(order))
		for i, c := range order {
			by[i] = "q." + d.quote(c)
		}
		number = "ROW_NUMBER() OVER (ORDER BY " + strings.Join(by, ", ") + ") - 1"
	}
	switch d {
	case SQLite:
		defs := []string{r + " INTEGER PRIMARY KEY"}
		for _, c := range cols {
			defs = append(defs, strings.TrimSpace(d.quote(c.Name)+" "+c.Type))
		}
		return []string{
			"CREATE TABLE " + d.quote(table) + " (" + strings.Join(defs, ", ") + ")",
			"INSERT INTO " + d.quote(table) + " SELECT " + number + " AS " + r + ", q.* FROM (" + query + ") q",
		}
	case MySQL:
		if len(order) > 0 {
			return []string{"CREATE TABLE " + d.quote(table) + " (" + r + " BIGINT NOT NULL PRIMARY KEY) AS SELECT " +
				number + " AS " + r + ", q.* FROM (" + query + ") q"}
		}
		return []string{"CREATE TABLE " + d.quote(table) + " (" + r + " BIGINT NOT NULL PRIMARY KEY) AS SELECT " +
			"(@edl_row := @edl_row + 1) AS " + r + ", q.* FROM (SELECT @edl_row := -1) edl_init, (" + query + ") q"}
	}
	return []string{
		"SET LOCAL max_parallel_workers_per_gather = 0", // for this transaction
		"CREATE TABLE " + d.quote(table) + " AS SELECT " + number + " AS " + r + ", q.* FROM (" + query + ") q",
		"ALTER TABLE " + d.quote(table) + " ADD PRIMARY KEY (" + r + ")",
	}
}

// rename renames a table (all three take ALTER TABLE ... RENAME TO).
func (d Dialect) rename(from, to string) string {
	return "ALTER TABLE " + d.quote(from) + " RENAME TO " + d.quote(to)
}

// columnsOf is a query with query's columns and no rows.
func (d Dialect) columnsOf(query string) string {
	return "SELECT * FROM (" + query + ") q WHERE 1 = 0"
}

// readRange is the query for rows [start, end) of a snapshot, in order.
// The bounds are written in, not bound: MySQL would prepare, run and close
// a statement for each read, three round trips instead of one.
func (d Dialect) readRange(table string, cols []Column, start, end int64) string {
	names := []string{d.quote(RowColumn)}
	for _, c := range cols {
		names = append(names, d.quote(c.Name))
	}
	r := d.quote(RowColumn)
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s >= %d AND %s < %d ORDER BY %s",
		strings.Join(names, ", "), d.quote(table), r, start, r, end, r)
}

// rowCount is the query for a snapshot's number of rows: its rows are
// numbered 0..n-1, and the index has the largest number at hand.
func (d Dialect) rowCount(table string) string {
	r := d.quote(RowColumn)
	return "SELECT COALESCE(MAX(" + r + ") + 1, 0) FROM " + d.quote(table)
}

// firstNull is the query for the first row (and how many) where col is NULL.
func (d Dialect) firstNull(table, col string) string {
	return fmt.Sprintf("SELECT MIN(%s), COUNT(*) FROM %s WHERE %s IS NULL", d.quote(RowColumn), d.quote(table), d.quote(col))
}

// valueTypes is SQLite's query for the storage classes of a column's
// values (a column of no declared type: an expression's).
func valueTypes(query, col string) string {
	return "SELECT DISTINCT typeof(" + SQLite.quote(col) + ") FROM (" + query + ") q"
}

// Kind is what a column's values are to a model.
type Kind int

// The kinds: numbers are dense features, text is categorical.
const (
	Number Kind = iota + 1
	Text
	// byValues: an SQLite column with no declared type, whose values
	// decide (see kindOfValues).
	byValues
)

func (k Kind) String() string {
	switch k {
	case Number:
		return "number"
	case Text:
		return "text"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// typeArgs matches a type's size or precision: VARCHAR(10), DECIMAL(10, 2).
var typeArgs = regexp.MustCompile(`\s*\(.*\)`)

// classify is the kind of a column of type typ, as the driver names it
// (DatabaseTypeName), or 0 for a type a model cannot take (dates, binary,
// booleans, JSON, ...).
func (d Dialect) classify(typ string) Kind {
	t := strings.ToUpper(strings.TrimSpace(typeArgs.ReplaceAllString(typ, "")))
	switch d {
	case SQLite:
		return sqliteKind(t)
	case Postgres:
		switch t {
		case "INT2", "INT4", "INT8", "FLOAT4", "FLOAT8", "NUMERIC":
			return Number
		case "TEXT", "VARCHAR", "BPCHAR", "NAME", "CHAR":
			return Text
		}
		return 0
	}
	switch strings.TrimPrefix(t, "UNSIGNED ") {
	case "TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT", "DECIMAL", "FLOAT", "DOUBLE", "YEAR":
		return Number
	case "CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT", "ENUM", "SET":
		return Text
	}
	return 0
}

// sqliteKind follows SQLite's rules for a declared type's affinity
// (sqlite.org/datatype3.html, 3.1), except that dates and times, which
// would have NUMERIC affinity, are refused, and booleans (0 and 1 in
// SQLite) are numbers.
func sqliteKind(t string) Kind {
	switch {
	case t == "":
		return byValues
	case strings.Contains(t, "INT"):
		return Number
	case strings.Contains(t, "CHAR"), strings.Contains(t, "CLOB"), strings.Contains(t, "TEXT"):
		return Text
	case strings.Contains(t, "BLOB"):
		return 0
	case strings.Contains(t, "REAL"), strings.Contains(t, "FLOA"), strings.Contains(t, "DOUB"):
		return Number
	case strings.Contains(t, "DATE"), strings.Contains(t, "TIME"):
		return 0
	}
	return Number // NUMERIC affinity: NUMERIC, DECIMAL, BOOLEAN, ...
}

// kindOfValues is the kind of an SQLite column of no declared type from
// its values' storage classes: text if any is text, a number if all are
// numbers (or NULL), and 0 if any is a blob.
func kindOfValues(classes []string) (Kind, string) {
	k := Number
	for _, c := range classes {
		switch c {
		case "blob":
			return 0, "BLOB"
		case "text":
			k = Text
		}
	}
	if k == Text {
		return Text, "TEXT"
	}
	return Number, "NUMERIC"
}

// Project is the query for cols of query's rows, in that order, each cast
// to its Cast kind: a COLUMN clause that takes an integer column as
// categorical ids, or a text column as numbers.
func (d Dialect) Project(query string, cols []Projected) string {
	list := make([]string, len(cols))
	for i, c := range cols {
		q := "q." + d.quote(c.Name)
		switch c.Cast {
		case Number:
			q = "CAST(" + q + " AS " + d.numberType() + ") AS " + d.quote(c.Name)
		case Text:
			q = "CAST(" + q + " AS " + d.textType() + ") AS " + d.quote(c.Name)
		}
		list[i] = q
	}
	return "SELECT " + strings.Join(list, ", ") + " FROM (" + query + ") q"
}

// numberType and textType are the types CAST takes for a number and text.
func (d Dialect) numberType() string {
	switch d {
	case SQLite:
		return "REAL"
	case MySQL:
		return "DOUBLE"
	}
	return "DOUBLE PRECISION"
}

func (d Dialect) textType() string {
	if d == MySQL {
		return "CHAR"
	}
	return "TEXT"
}

// blobType is the type of a column of bytes as large as a model's
// checkpoint: MariaDB's BLOB holds 64 KiB.
func (d Dialect) blobType() string {
	switch d {
	case Postgres:
		return "BYTEA"
	case MySQL:
		return "LONGBLOB"
	}
	return "BLOB"
}

// keyType is the type of a text primary key: MariaDB indexes only a
// VARCHAR of a bounded length.
func (d Dialect) keyType() string {
	if d == MySQL {
		return "VARCHAR(255)"
	}
	return "TEXT"
}

// textColumn is the type of a column of text of any length (MariaDB's
// TEXT holds 64 KiB).
func (d Dialect) textColumn() string {
	if d == MySQL {
		return "LONGTEXT"
	}
	return "TEXT"
}

// placeholders are n bind parameters: $1, $2, ... for PostgreSQL, ? for
// the others.
func (d Dialect) placeholders(n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "?"
		if d == Postgres {
			ps[i] = fmt.Sprintf("$%d", i+1)
		}
	}
	return strings.Join(ps, ", ")
}
