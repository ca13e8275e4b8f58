package local

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// sqlTable makes a table of n rows of a problem ctr.wide_and_deep
// (dense=2;fields=1) learns: y is 1 when x1 + x2 and c's push pass a
// noisy threshold. seed picks the rows.
func sqlTable(t *testing.T, db *sqldbtest.DB, n int, seed uint64) string {
	t.Helper()
	table := db.NewTable(t, "x1 DOUBLE PRECISION", "x2 DOUBLE PRECISION", "c TEXT", "y INTEGER")
	rng := rand.New(rand.NewPCG(seed, 1))
	push := map[string]float64{"a": 1, "b": -1, "c": 0.3, "d": -0.3}
	var rows [][]any
	for range n {
		x1, x2, c := rng.NormFloat64(), rng.NormFloat64(), []string{"a", "b", "c", "d"}[rng.IntN(4)]
		y := 0
		if x1+0.5*x2+push[c]+0.3*rng.NormFloat64() > 0 {
			y = 1
		}
		if rows = append(rows, []any{x1, x2, c, y}); len(rows) == 5000 { // within SQLite's values a statement
			db.Insert(t, table, "x1, x2, c, y", rows...)
			rows = rows[:0]
		}
	}
	db.Insert(t, table, "x1, x2, c, y", rows...)
	return table
}

// sqlArgs trains ctr.wide_and_deep on a table of train rows, evaluated on
// one of 2,000.
func sqlArgs(t *testing.T, db *sqldbtest.DB, train int, epochs string) []string {
	return []string{"--model_def=ctr.wide_and_deep", "--model_params=dense=2;fields=1", "--optimizer=adam:learning_rate=0.01",
		"--training_data=" + db.Source("table="+sqlTable(t, db, train, 1)+"&label=y"),
		"--validation_data=" + db.Source("table="+sqlTable(t, db, 2000, 2)+"&label=y"),
		"--num_epochs=" + epochs, "--minibatch_size=64"}
}

var snapshotRE = regexp.MustCompile(`elasticdl_snap_[a-z0-9_]*_[0-9a-f]{8}`)

// jobText is everything a job wrote: its output, its logs and every file
// under its output directory (the persisted state, the summary).
func (j *job) jobText(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(j.stdout.String() + j.stderr.String())
	err := filepath.Walk(j.out, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		b.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// snapshotsGone fails unless the job made a snapshot of each of its two
// tables and none is left.
func snapshotsGone(t *testing.T, db *sqldbtest.DB, logs string) {
	t.Helper()
	var made []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "data snapshot made") {
			made = append(made, snapshotRE.FindString(line))
		}
	}
	slices.Sort(made)
	if made = slices.Compact(made); len(made) != 2 || made[0] == "" {
		t.Errorf("snapshots made %v, want one of each table", made)
	}
	have := db.Tables(t, "elasticdl_snap_")
	for _, s := range made {
		if slices.Contains(have, s) {
			t.Errorf("snapshot %s was not dropped", s)
		}
	}
}

// TestSQLTable trains from database tables on each database: exactly
// once, to a held-out AUC, the snapshots dropped at the end. The server's
// URIs hold a password, which must be nowhere the job wrote.
func TestSQLTable(t *testing.T) {
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		const train = 4000
		j := startJob(t, append(sqlArgs(t, db, train, "2"), "--num_workers=2")...)
		s := j.succeeded(2 * time.Minute)
		assertExactlyOnce(t, s, 2, train)
		if s.Eval == nil || s.Eval.AUC == nil || *s.Eval.AUC < 0.9 || s.Eval.Records != 2000 {
			t.Errorf("eval %+v: want an AUC of at least 0.9 on 2000 records", s.Eval)
		}
		if state, _ := filepath.Glob(filepath.Join(j.out, "master", "state*")); len(state) == 0 {
			t.Errorf("no persisted state to look in under %s/master", j.out)
		}
		text := j.jobText(t)
		snapshotsGone(t, db, text)
		if pw := sqldb.Password(db.URI); pw != "" && strings.Contains(text, pw) {
			t.Errorf("the password shows in what the job wrote (stdout, stderr, %s)", j.out)
		}
	})
}

// TestSQLTableMasterAndWorkerKilled: the master and a worker killed -9
// mid-training from an SQLite table: the new master finds the snapshot
// the dead one made, and the ledger is exact.
func TestSQLTableMasterAndWorkerKilled(t *testing.T) {
	db := sqldbtest.Open(t, "sqlite")
	const train, epochs = 20000, 6
	j := startJob(t, append(sqlArgs(t, db, train, "6"), "--num_workers=3", "--log_interval=200ms")...)
	var killed []int
	for _, role := range []string{"master", "worker"} {
		var victim int
		waitFor(t, 2*time.Minute, "training progress to kill the "+role, func() bool {
			ms, ws := j.children("master"), j.children("worker")
			if j.recordsDone() < int64(len(killed)+1)*train || len(ms) != 1 || len(ws) != 3 || contains(killed, ms[0]) {
				return false
			}
			victim = append(ms, ws...)[len(killed)]
			return true
		})
		if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed = append(killed, victim)
		t.Logf("killed the %s, pid %d, at %d records", role, victim, j.recordsDone())
	}
	s := j.succeeded(3 * time.Minute)
	assertExactlyOnce(t, s, epochs, train)
	if s.MasterRestarts != 1 || s.Workers.Lost != 1 {
		t.Errorf("master restarts %d, workers lost %d: want 1 and 1", s.MasterRestarts, s.Workers.Lost)
	}
	text := j.jobText(t)
	if !strings.Contains(text, "data snapshot found") {
		t.Error("the new master did not find the snapshot the dead one made")
	}
	snapshotsGone(t, db, text)
}
