package task

import (
	"errors"
	"testing"
	"time"
)

// drainedWithHeld: baseConfig's four tasks held by workers 1..4, nothing
// queued; returns the dispatcher and the tasks by holder.
func drainedWithHeld(t *testing.T, cfg Config) (*Dispatcher, map[int]Task) {
	t.Helper()
	d := mustNew(t, cfg)
	held := map[int]Task{}
	for w := 1; w <= 4; w++ {
		if w == 4 && len(d.BackupCandidates()) != 0 {
			t.Fatalf("backup candidates while a task is queued: %v", d.BackupCandidates())
		}
		held[w] = mustGet(t, d, w, t0.Add(time.Duration(w)*time.Second))
	}
	return d, held
}

func TestBackupCandidates(t *testing.T) {
	d, held := drainedWithHeld(t, baseConfig())
	c := d.BackupCandidates()
	if len(c) != 4 || c[0].Owner != 1 || c[3].Owner != 4 || c[0].Task.ID != held[1].ID || !c[0].Since.Equal(t0.Add(time.Second)) {
		t.Fatalf("candidates %+v, want the four held tasks, oldest first", c)
	}
	now := t0.Add(time.Minute)
	if _, err := d.AssignBackup(1, held[1].ID, now); err == nil {
		t.Fatal("a backup of its own task for worker 1")
	}
	if _, err := d.AssignBackup(5, 99, now); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("backup of an unknown task: %v", err)
	}
	a, err := d.AssignBackup(5, held[1].ID, now)
	if err != nil || a.Kind != KindTask || a.Task.ID != held[1].ID {
		t.Fatalf("AssignBackup = %+v, %v", a, err)
	}
	if _, err := d.AssignBackup(6, held[1].ID, now); err == nil {
		t.Fatal("a second backup of one task")
	}
	if c := d.BackupCandidates(); len(c) != 3 || c[0].Owner != 2 {
		t.Fatalf("candidates after a backup %+v, want the other three", c)
	}
	if got := d.Held(5); len(got) != 1 || got[0].ID != held[1].ID {
		t.Fatalf("Held(5) = %v", got)
	}
	if since, ok := d.HeldSince(5); !ok || !since.Equal(now) {
		t.Fatalf("HeldSince(5) = %v %v, want the backup's start", since, ok)
	}
}

// TestBackupRace: whichever copy reports first wins, once; the other's
// report is dropped; a failed or lost copy leaves the task to the other.
func TestBackupRace(t *testing.T) {
	type step struct {
		worker int    // 1: the owner, 5: the backup
		what   string // "ok", "fail", "lost", "timeout"
		want   error  // of a report
	}
	tests := []struct {
		name  string
		steps []step
		// state after the steps, and whether the job has failed
		state   State
		attempt int
	}{
		{"backup first", []step{{5, "ok", nil}, {1, "ok", ErrSuperseded}}, Done, 0},
		{"owner first", []step{{1, "ok", nil}, {5, "ok", ErrSuperseded}}, Done, 0},
		{"loser fails after", []step{{1, "ok", nil}, {5, "fail", ErrSuperseded}}, Done, 0},
		{"backup fails, owner goes on", []step{{5, "fail", nil}, {1, "ok", nil}}, Done, 1},
		{"owner fails, backup goes on", []step{{1, "fail", nil}, {5, "ok", nil}}, Done, 1},
		{"both fail: back to todo", []step{{1, "fail", nil}, {5, "fail", nil}}, Todo, 2},
		{"owner lost, backup goes on", []step{{1, "lost", nil}, {5, "ok", nil}}, Done, 0},
		{"backup lost, owner goes on", []step{{5, "lost", nil}, {1, "ok", nil}}, Done, 0},
		{"owner timed out, backup goes on", []step{{1, "timeout", nil}, {5, "ok", nil}, {1, "ok", ErrNotOwner}}, Done, 0},
		{"both timed out: back to todo", []step{{0, "timeout", nil}}, Todo, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.TaskTimeout = time.Hour
			d, held := drainedWithHeld(t, cfg)
			task := held[1]
			mustNoErr(t, backupOf(d, 5, task.ID, t0.Add(30*time.Minute)))
			for _, s := range tc.steps {
				now := t0.Add(40 * time.Minute)
				switch s.what {
				case "ok", "fail":
					r := ok(task)
					if s.what == "fail" {
						r = Result{Err: "boom"}
					}
					if err := d.Report(s.worker, task.ID, r, now); !errors.Is(err, s.want) || (err != nil) != (s.want != nil) {
						t.Fatalf("report by %d: %v, want %v", s.worker, err, s.want)
					}
				case "lost":
					if back := d.WorkerLost(s.worker, now); len(back) != 0 {
						t.Fatalf("lost a copy: %v requeued, want none", back)
					}
				case "timeout":
					at := t0.Add(time.Hour + 2*time.Second) // the owner's hold only
					if s.worker == 0 {
						at = t0.Add(2 * time.Hour) // both copies'
					}
					d.Tick(at)
				}
			}
			st, _ := d.TaskState(task.ID)
			info, _ := d.TaskInfo(task.ID)
			if st != tc.state || info.Attempt != tc.attempt {
				t.Fatalf("task %v attempt %d, want %v attempt %d", st, info.Attempt, tc.state, tc.attempt)
			}
			if len(d.Held(5)) != 0 && st != Doing {
				t.Fatalf("worker 5 still holds %v", d.Held(5))
			}
			if st == Done {
				// A copy that timed out is a former holder: its late success
				// counts as trained again, as any late report does (the
				// PS's minibatch ledger says what applied).
				twice := int64(0)
				if tc.name == "owner timed out, backup goes on" {
					twice = task.Records()
				}
				if c, _ := d.EpochCoverage(1); c.RecordsTrainedTwice != twice {
					t.Fatalf("coverage %+v: a backed-up task counted twice", c)
				}
				if p := d.Progress(); p.TasksDone != 1 || p.RecordsReported != task.Records() {
					t.Fatalf("progress %+v: the task counted more than once", p)
				}
			}
		})
	}
}

func backupOf(d *Dispatcher, worker int, id int64, now time.Time) error {
	_, err := d.AssignBackup(worker, id, now)
	return err
}

func mustNoErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestBackupSnapshot: a backup and a superseded copy survive a restore.
func TestBackupSnapshot(t *testing.T) {
	d, held := drainedWithHeld(t, baseConfig())
	mustNoErr(t, backupOf(d, 5, held[1].ID, t0.Add(time.Minute)))
	mustNoErr(t, backupOf(d, 6, held[2].ID, t0.Add(time.Minute)))
	mustReport(t, d, 6, held[2], ok(held[2]), t0.Add(2*time.Minute))
	r, err := Restore(baseConfig(), d.Snapshot())
	mustNoErr(t, err)
	if _, backup, ok := r.HeldBy(5, held[1].ID); !ok || !backup {
		t.Fatal("the backup of task 1 is lost in the restore")
	}
	if err := r.Report(2, held[2].ID, ok(held[2]), t0.Add(3*time.Minute)); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the superseded copy's report after a restore: %v", err)
	}
	mustReport(t, r, 1, held[1], ok(held[1]), t0.Add(3*time.Minute))
	if err := r.Report(5, held[1].ID, ok(held[1]), t0.Add(3*time.Minute)); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the backup's report after the owner's: %v", err)
	}
}
