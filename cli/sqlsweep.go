package cli

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqlflow"
)

// runsJob says whether a script runs a job (TO TRAIN, TO EVALUATE or TO
// PREDICT): only such a script makes snapshots, and sweeps old ones.
func runsJob(stmts []sqlflow.Statement) bool {
	for _, s := range stmts {
		if _, ok := s.(sqlflow.Standard); !ok {
			return true
		}
	}
	return false
}

// sweepSnapshots drops the database's snapshots last prepared maxAge ago
// or more (sqldb.SweepSnapshots), saying which on standard error. A
// failure is a warning: the script runs all the same.
func sweepSnapshots(ctx context.Context, env Env, db *sql.DB, d sqldb.Dialect, maxAge time.Duration) {
	dropped, err := sqldb.SweepSnapshots(ctx, db, d, time.Now(), maxAge)
	for _, t := range dropped {
		fmt.Fprintf(env.Stderr, "elasticdl sql: dropped snapshot table %s, last prepared over %s ago (--snapshot_max_age)\n", t, maxAge)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "elasticdl sql: warning: sweeping old snapshots: %v\n", err)
	}
}
