// Package sqldb reads training data from SQL databases: SQLite (a pure-Go
// driver, so the static binary keeps working), PostgreSQL and MySQL or
// MariaDB, all through database/sql (docs/design-sql.md, decisions 3 and 7).
//
// Dynamic sharding reads record ranges [start, end) of a data set that does
// not change while the job runs, alike for every worker, a relaunched one
// and a master that took over. A query's rows have no such ranges, so the
// job's master copies them once, at start, into a snapshot table with a row
// number (Prepare), which workers read by ranges of it (Open, Table.Read)
// and the job's end drops (Drop). All that differs between the databases'
// SQL is in Dialect.
package sqldb
