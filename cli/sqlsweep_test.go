package cli

import (
	"strings"
	"testing"
	"time"

	"elasticdl/internal/sqldb"
)

// TestSQLSweepsSnapshots: a script that runs a job drops the snapshots
// last prepared --snapshot_max_age ago, saying so on standard error; a
// script of standard statements, or --snapshot_max_age=0, drops none;
// a sweep that fails is a warning, and the script runs.
func TestSQLSweepsSnapshots(t *testing.T) {
	ds := "--datasource=sqlite://" + sqliteFile(t)
	old := sqldb.SnapshotName("run-old", "q")
	long := time.Now().Add(-48 * time.Hour).UTC().Format(time.RFC3339Nano)
	setup := "CREATE TABLE t (x INTEGER, y INTEGER); CREATE TABLE " + old + " (x INTEGER); " +
		"CREATE TABLE " + sqldb.SnapshotsTable + " (name TEXT NOT NULL PRIMARY KEY, seen_at TEXT NOT NULL); " +
		"INSERT INTO " + sqldb.SnapshotsTable + " VALUES ('" + old + "', '" + long + "')"
	if code, _, errOut := runWithStdin(t, "", "sql", ds, "-e", setup); code != 0 {
		t.Fatal(errOut)
	}
	left := func() string {
		_, out, _ := runWithStdin(t, "", "sql", ds, "-e", "SELECT COUNT(*) AS n FROM sqlite_master WHERE name = '"+old+"'")
		return out
	}
	const predict = "SELECT * FROM t TO PREDICT p.y USING no_model"
	for _, args := range [][]string{{"-e", "SELECT 1"}, {"--snapshot_max_age=0", "-e", predict}, {"--snapshot_max_age=72h", "-e", predict}} {
		if _, _, errOut := runWithStdin(t, "", append([]string{"sql", ds}, args...)...); strings.Contains(errOut, "dropped") || !strings.Contains(left(), "\n1\n") {
			t.Errorf("%q dropped it: %s", args, errOut)
		}
	}
	code, _, errOut := runWithStdin(t, "", "sql", ds, "-e", predict)
	if code == 0 || !strings.Contains(errOut, "elasticdl sql: dropped snapshot table "+old+", last prepared over 24h0m0s ago (--snapshot_max_age)\n") ||
		!strings.Contains(errOut, "no model no_model") || !strings.Contains(left(), "\n0\n") {
		t.Errorf("the sweep: exit %d, stderr %q, left %q", code, errOut, left())
	}

	bad := "--datasource=sqlite://" + sqliteFile(t)
	if code, _, errOut := runWithStdin(t, "", "sql", bad, "-e", "CREATE TABLE "+sqldb.SnapshotsTable+" (name TEXT)"); code != 0 {
		t.Fatal(errOut)
	}
	code, _, errOut = runWithStdin(t, "", "sql", bad, "-e", predict)
	if code == 0 || !strings.Contains(errOut, "elasticdl sql: warning: sweeping old snapshots: read "+sqldb.SnapshotsTable) || !strings.Contains(errOut, "no model no_model") {
		t.Errorf("a failed sweep: exit %d, stderr %q", code, errOut)
	}
}
