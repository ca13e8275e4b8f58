package master

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/master/job"
	"elasticdl/internal/sqldb/sqldbtest"
)

func TestSQLDataSets(t *testing.T) {
	const db, db2 = "sqlite:///x.db?table=t&label=y", "postgres://u:pw@h:1/d?table=t&label=y"
	for _, c := range []struct {
		name      string
		cfg       Config
		flags     []string
		password  string
		errorWith string
	}{
		{"files", Config{Mode: ModeTrain, TrainingData: "a.csv", ValidationData: "b.csv"}, nil, "", ""},
		{"train on a table", Config{Mode: ModeTrain, TrainingData: db, ValidationData: "b.csv"}, []string{"training_data"}, "", ""},
		{"both tables", Config{TrainingData: db, ValidationData: db2}, []string{"training_data", "validation_data"}, "pw", ""},
		{"evaluate", Config{Mode: ModeEvaluate, TrainingData: db, ValidationData: db2}, []string{"validation_data"}, "pw", ""},
		{"predict", Config{Mode: ModePredict, PredictionData: db2}, []string{"prediction_data"}, "pw", ""},
		{"one password", Config{TrainingData: db2, ValidationData: db2}, []string{"training_data", "validation_data"}, "pw", ""},
		{"two passwords", Config{TrainingData: db2, ValidationData: strings.Replace(db2, ":pw@", ":other@", 1)},
			[]string{"training_data", "validation_data"}, "", "--training_data and --validation_data hold different passwords"},
	} {
		sets := sqlDataSets(&c.cfg)
		var flags []string
		for _, s := range sets {
			flags = append(flags, s.flag)
		}
		if strings.Join(flags, ",") != strings.Join(c.flags, ",") {
			t.Errorf("%s: data sets %v, want %v", c.name, flags, c.flags)
		}
		pw, err := sqlPassword(sets)
		if pw != c.password || (err == nil) != (c.errorWith == "") || (err != nil && !strings.Contains(err.Error(), c.errorWith)) {
			t.Errorf("%s: password %q, %v; want %q, an error with %q", c.name, pw, err, c.password, c.errorWith)
		}
		if err != nil && strings.Contains(err.Error(), "other") {
			t.Errorf("%s: the error shows a password: %v", c.name, err)
		}
	}
}

// sqlJob is a ctr.wide_and_deep job on a new SQLite table of n rows.
func sqlJob(t *testing.T, n int) (Config, *sqldbtest.DB, string) {
	t.Helper()
	db := sqldbtest.Open(t, "sqlite")
	table := db.NewTable(t, "x1 DOUBLE PRECISION", "x2 DOUBLE PRECISION", "c TEXT", "y INTEGER")
	var rows [][]any
	for i := range n {
		rows = append(rows, []any{float64(i%7) / 7, float64(i%3) - 1, []string{"a", "b"}[i%2], i % 2})
	}
	db.Insert(t, table, "x1, x2, c, y", rows...)
	cfg := DefaultConfig()
	cfg.ModelDef, cfg.ModelParams, cfg.Output = "ctr.wide_and_deep", "dense=2;fields=1", t.TempDir()
	cfg.TrainingData = db.Source("table=" + table + "&label=y")
	return cfg, db, table
}

// TestSQLSnapshots: a master reads a table through its snapshot, which
// the master that takes over (resuming the persisted state) finds rather
// than copying the rows again; the job's end drops it, and so does a start
// that fails after making it.
func TestSQLSnapshots(t *testing.T) {
	cfg, db, table := sqlJob(t, 100)
	cfg.RunID = "run-sql"
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	store := &memStore{}
	m, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: zooRegistry(t), Logger: logger, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	snap := m.cfg.TrainingData
	if !strings.Contains(snap, "snapshot=elasticdl_snap_run_sql_") || len(db.Tables(t, "elasticdl_snap_run_sql_")) != 1 {
		t.Fatalf("training data %s, snapshots %v: want one", snap, db.Tables(t, "elasticdl_snap_"))
	}
	m.step(context.Background(), job.Start{})
	data, _, err := m.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	store.data = data

	// Rows written now are not the job's: the next master finds the
	// snapshot of the first.
	db.Insert(t, table, "x1, x2, c, y", []any{0.5, 0, "a", 1})
	next, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: zooRegistry(t), Logger: logger, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if !next.failover.resuming || next.cfg.TrainingData != snap || len(next.sql.made) != 0 {
		t.Fatalf("next master: resuming %v, data %s, made %v; want it to resume on %s, made by the first", next.failover.resuming,
			next.cfg.TrainingData, next.sql.made, snap)
	}
	if n, err := countRecords(next.sql.opened(snap), next.spec); n != 100 || err != nil {
		t.Errorf("the next master's data: %d records, %v; want the snapshot's 100", n, err)
	}
	if got := strings.Count(logs.String(), "data snapshot made"); got != 1 || !strings.Contains(logs.String(), "data snapshot found") {
		t.Errorf("want one snapshot made and then found:\n%s", logs.String())
	}
	next.conclude(time.Now())
	if left := db.Tables(t, "elasticdl_snap_"); len(left) != 0 {
		t.Errorf("after the job's end: %v", left)
	}

	// A start that fails after the copy drops it.
	cfg.RunID, cfg.CheckpointDirForInit = "run-bad-init", t.TempDir()
	if _, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: zooRegistry(t), Logger: logger}); err == nil {
		t.Fatal("an empty --checkpoint_dir_for_init: no error")
	}
	cfg.RunID, cfg.CheckpointDirForInit, cfg.ListenAddr = "run-bad-listen", "", "127.0.0.1:-1"
	bad, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: zooRegistry(t), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Run(context.Background()); err == nil {
		t.Fatal("Run on a bad address: no error")
	}
	if left := db.Tables(t, "elasticdl_snap_"); len(left) != 0 {
		t.Errorf("after failed starts: %v", left)
	}
}

// TestSQLKeepSnapshot: with --keep_snapshot the job's end keeps its
// snapshot and logs its name.
func TestSQLKeepSnapshot(t *testing.T) {
	cfg, db, _ := sqlJob(t, 10)
	cfg.RunID, cfg.KeepSnapshot = "run-keep", true
	var logs bytes.Buffer
	m, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: zooRegistry(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m.conclude(time.Now())
	kept := db.Tables(t, "elasticdl_snap_run_keep_")
	if len(kept) != 1 || !strings.Contains(logs.String(), "data snapshot kept (--keep_snapshot)") || !strings.Contains(logs.String(), kept[0]) {
		t.Errorf("after the job's end: snapshots %v, logs:\n%s", kept, logs.String())
	}
}

// TestSQLRefresh: a running master records each of its snapshots as
// prepared, again and again, until its context ends; a failed record is a
// warning.
func TestSQLRefresh(t *testing.T) {
	cfg, _, _ := sqlJob(t, 10)
	cfg.RunID = "run-refresh"
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	sd, err := prepareSQL(context.Background(), &cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sd.dropAll(logger)
	touched := make(chan string)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	sd.refresh(ctx, time.Millisecond, func(ctx context.Context, uri string) error {
		select {
		case touched <- uri:
		case <-ctx.Done():
		}
		if calls++; calls == 1 {
			return errors.New("no database") // logged before the second call
		}
		return nil
	}, logger)
	for range 2 {
		select {
		case u := <-touched:
			if u != sd.opened(cfg.TrainingData) {
				t.Errorf("touched %s, want %s", u, sd.opened(cfg.TrainingData))
			}
		case <-time.After(time.Minute):
			t.Fatal("no snapshot recorded")
		}
	}
	cancel()
	if !strings.Contains(logs.String(), "recording a data snapshot as in use") {
		t.Errorf("no warning:\n%s", logs.String())
	}
	var none *sqlData
	none.refresh(ctx, time.Millisecond, nil, logger) // no snapshots: nothing to do
}
