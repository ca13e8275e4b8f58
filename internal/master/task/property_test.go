package task

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// simWorker is one worker instance in the simulation.
type simWorker struct {
	id   int
	task *Task // held task, nil when idle
	// wake is when a stalled worker (a zombie: the master was never told)
	// reports its task late; zero if it never does.
	wake time.Time
	done bool // got KindDone and exited
}

type simParams struct {
	seed                uint64
	workers             int
	epochs              int
	pFail, pDie, pStall float64 // per busy-worker step
	pLateReply          float64 // chance that a stalled worker reports later
	reuseIDs            bool    // relaunched workers reuse the dead one's id
	evals               int     // evaluation passes interleaved with training
	// pRestart: chance per step that the dispatcher is replaced by one
	// restored from its snapshot (a master failover).
	pRestart float64
	// pBackup: chance that a worker told to wait gets a backup copy of a
	// held training task (backup.go).
	pBackup float64
}

// TestPropertyRandomJobs simulates many workers that die, fail, stall and
// come back, with a fake clock, and checks the dispatcher's promises against
// an independent per-record oracle.
func TestPropertyRandomJobs(t *testing.T) {
	tests := []simParams{
		{seed: 1, workers: 1, epochs: 2, pFail: 0.05},
		{seed: 2, workers: 4, epochs: 3, pFail: 0.05, pDie: 0.03, pStall: 0.02},
		{seed: 3, workers: 16, epochs: 2, pFail: 0.1, pDie: 0.05, pStall: 0.05, reuseIDs: true},
		{seed: 4, workers: 50, epochs: 4, pFail: 0.02, pDie: 0.01, pStall: 0.01, evals: 3},
		{seed: 5, workers: 8, epochs: 3, pFail: 0.05, pDie: 0.02, pStall: 0.05, pLateReply: 0.3},
		{seed: 6, workers: 30, epochs: 2, pFail: 0.05, pDie: 0.05, pStall: 0.1, pLateReply: 0.5, reuseIDs: true, evals: 2},
		{seed: 7, workers: 3, epochs: 5, pDie: 0.2, reuseIDs: true},
		{seed: 8, workers: 100, epochs: 1, pStall: 0.2, pLateReply: 0.9},
		// Master failovers: the dispatcher restored from its snapshot.
		{seed: 9, workers: 8, epochs: 3, pFail: 0.05, pDie: 0.02, pStall: 0.05, pLateReply: 0.3, evals: 3, pRestart: 0.01},
		{seed: 10, workers: 30, epochs: 2, pFail: 0.05, pDie: 0.05, pStall: 0.1, pLateReply: 0.5, reuseIDs: true, evals: 2, pRestart: 0.05},
		// Backup tasks, with and without faults and failovers.
		{seed: 11, workers: 16, epochs: 1, pBackup: 1},
		{seed: 12, workers: 16, epochs: 2, pFail: 0.05, pDie: 0.03, pStall: 0.05, pLateReply: 0.5, pBackup: 0.3, reuseIDs: true},
		{seed: 13, workers: 8, epochs: 3, pFail: 0.05, pDie: 0.02, pStall: 0.05, pLateReply: 0.3, evals: 2, pRestart: 0.02, pBackup: 0.8},
	}
	for _, p := range tests {
		t.Run(fmt.Sprintf("seed%d_w%d", p.seed, p.workers), func(t *testing.T) {
			st := simulate(t, p)
			if p.pLateReply > 0 && p.pBackup == 0 && st.lateSuccesses == 0 {
				t.Errorf("no late success report: the trained-twice path is not exercised")
			}
			if p.pBackup > 0 && (st.backups == 0 || st.superseded == 0) {
				t.Errorf("backups %d, superseded reports %d: the backup path is not exercised", st.backups, st.superseded)
			}
		})
	}
}

// simStats: late successful training reports, backup copies handed out,
// and reports dropped because the other copy won.
type simStats struct{ lateSuccesses, backups, superseded int }

// simulate runs one job to completion and returns what it went through.
func simulate(t *testing.T, p simParams) simStats {
	r := rand.New(rand.NewPCG(p.seed, 0x5eed))
	var shards []Shard
	for i := range 1 + r.IntN(4) {
		shards = append(shards, Shard{fmt.Sprintf("s%d", i), 1 + r.Int64N(3000)})
	}
	// A live worker is picked about once every p.workers steps (1s each);
	// the timeout is long enough that only stalled workers hit it, in
	// practice, and short enough to recover their tasks quickly.
	timeout := time.Duration(p.workers) * 40 * time.Second
	cfg := Config{
		Training:       shards,
		RecordsPerTask: 1 + r.Int64N(100),
		NumEpochs:      p.epochs,
		MaxAttempts:    1000, // random failures must not fail the job
		MaxRequeues:    1000,
		TaskTimeout:    timeout,
		Shuffle:        r.IntN(2) == 0,
		Seed:           int64(p.seed),
	}
	d := mustNew(t, cfg)

	// Oracle: per epoch, shard and record, accepted and late successes.
	accepted := make([]map[string][]int, p.epochs+1)
	late := make([]map[string][]int, p.epochs+1)
	for e := 1; e <= p.epochs; e++ {
		accepted[e], late[e] = map[string][]int{}, map[string][]int{}
		for _, s := range shards {
			accepted[e][s.Name] = make([]int, s.Records)
			late[e][s.Name] = make([]int, s.Records)
		}
	}
	mark := func(m []map[string][]int, task Task) {
		for i := task.Start; i < task.End; i++ {
			m[task.Epoch][task.Shard][i]++
		}
	}

	nextID := 0
	spawn := func() *simWorker { nextID++; return &simWorker{id: nextID} }
	var pool []*simWorker
	for range p.workers {
		pool = append(pool, spawn())
	}
	var zombies []*simWorker
	evalsLeft := p.evals
	var evalVersion int64
	lateSuccesses, restarts := 0, 0
	var st simStats
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	// report reports w's task; false when the report was refused as late.
	report := func(w *simWorker, res Result) {
		err := d.Report(w.id, w.task.ID, res, now)
		switch {
		case err == nil:
			if res.Err == "" && w.task.Type == Training {
				mark(accepted, *w.task)
			}
		case errors.Is(err, ErrSuperseded):
			st.superseded++ // the other copy won: counted nowhere
		case errors.Is(err, ErrNotOwner):
			// Timed out meanwhile, or declared lost.
			if res.Err == "" && w.task.Type == Training {
				mark(late, *w.task)
				lateSuccesses++
			}
		default:
			t.Fatalf("report of %v by worker %d: %v", *w.task, w.id, err)
		}
	}

	for step := 0; !d.Finished(); step++ {
		if step > 1_000_000 {
			t.Fatalf("no progress after %d steps: %+v", step, d.Progress())
		}
		if d.Err() != nil {
			t.Fatalf("job failed: %v", d.Err())
		}
		now = now.Add(time.Second)
		if step%10 == 0 {
			d.Tick(now)
		}
		if r.Float64() < p.pRestart {
			d = restart(t, cfg, d)
			restarts++
		}
		if step%7 == 0 {
			wantFullScan(t, d) // the same dispatcher, snapshotted again and again
		}
		if evalsLeft > 0 && r.IntN(200) == 0 {
			evalsLeft--
			evalVersion++
			if err := d.AddEvaluation([]Shard{{"eval", 1 + r.Int64N(100)}}, 10, evalVersion); err != nil {
				t.Fatal(err)
			}
		}
		// Zombies wake up and report late, most often after their task
		// timed out (then it is rejected but counts as trained).
		for zi := 0; zi < len(zombies); zi++ {
			z := zombies[zi]
			if now.Before(z.wake) {
				continue
			}
			zombies = append(zombies[:zi], zombies[zi+1:]...)
			zi--
			report(z, ok(*z.task)) // most often refused: timed out
		}

		i := r.IntN(len(pool))
		w := pool[i]
		if w.done {
			continue
		}
		if w.task == nil {
			a := d.Get(w.id, now)
			switch a.Kind {
			case KindTask:
				task := a.Task
				w.task = &task
			case KindWait:
				if d.Progress().TasksDoing == 0 {
					t.Fatalf("wait with nothing in flight: %+v", d.Progress())
				}
				if r.Float64() < p.pBackup {
					if task, ok := backup(t, d, w.id, now); ok {
						w.task = &task
						st.backups++
					}
				}
			case KindDone:
				if !d.Finished() {
					t.Fatalf("done before finished: %+v", d.Progress())
				}
				w.done = true
			}
			continue
		}
		x := r.Float64()
		switch {
		case x < p.pDie:
			d.WorkerLost(w.id, now)
			nw := spawn()
			if p.reuseIDs {
				nw.id = w.id
			}
			pool[i] = nw
		case x < p.pDie+p.pStall:
			if r.Float64() < p.pLateReply {
				// Wake within two timeouts: before or after the timeout.
				w.wake = now.Add(time.Duration(r.Int64N(int64(2 * timeout))))
				zombies = append(zombies, w)
			}
			pool[i] = spawn() // the master notices nothing; Tick must recover
		case x < p.pDie+p.pStall+p.pFail:
			report(w, Result{Err: "random failure"})
			w.task = nil
		case x < 0.8:
			report(w, ok(*w.task)) // it may have timed out while "working" slowly
			w.task = nil
		default: // still working
		}
	}

	// Every live worker is now told it is done.
	for _, w := range pool {
		if w.task == nil && !w.done {
			if a := d.Get(w.id, now); a.Kind != KindDone {
				t.Fatalf("finished but Get = %v", a.Kind)
			}
		}
	}
	cov := d.Coverage()
	if len(cov) != p.epochs {
		t.Fatalf("coverage for %d epochs, want %d", len(cov), p.epochs)
	}
	for _, c := range cov {
		var twice int64
		for _, s := range shards {
			acc, lt := accepted[c.Epoch][s.Name], late[c.Epoch][s.Name]
			for rec := range acc {
				if acc[rec] != 1 {
					t.Fatalf("epoch %d shard %s record %d accepted %d times, want exactly 1", c.Epoch, s.Name, rec, acc[rec])
				}
				if acc[rec]+lt[rec] >= 2 {
					twice++
				}
			}
		}
		if c.RecordsTrained != c.Records || c.RecordsMissed != 0 || !c.Finished {
			t.Errorf("epoch %d coverage %+v: want all records trained, none missed", c.Epoch, c)
		}
		if c.RecordsTrainedTwice != twice {
			t.Errorf("epoch %d: RecordsTrainedTwice = %d, oracle %d", c.Epoch, c.RecordsTrainedTwice, twice)
		}
		if lateSuccesses == 0 && c.RecordsTrainedTwice != 0 {
			t.Errorf("epoch %d: %d records trained twice without late reports", c.Epoch, c.RecordsTrainedTwice)
		}
	}
	pr := d.Progress()
	if pr.RecordsDone != pr.RecordsTotal || pr.TasksTodo != 0 || pr.TasksDoing != 0 || pr.TasksFailed != 0 {
		t.Errorf("final progress %+v", pr)
	}
	for v := int64(1); v <= evalVersion; v++ {
		if st, _ := d.Evaluation(v); !st.Complete || st.TasksDone != st.Tasks {
			t.Errorf("evaluation %d incomplete: %+v", v, st)
		}
	}
	t.Logf("%d tasks/epoch: requeues %d failures %d late %d (successes %d), restarts %d, backups %d (superseded %d)",
		d.epochs[0].tasks, pr.Requeues, pr.Failures, pr.LateReports, lateSuccesses, restarts, st.backups, st.superseded)
	st.lateSuccesses = lateSuccesses
	return st
}

// backup hands worker a backup copy of a random candidate it does not
// hold, checking that one is offered only when nothing is queued.
func backup(t *testing.T, d *Dispatcher, worker int, now time.Time) (Task, bool) {
	t.Helper()
	var mine []Straggler
	for _, c := range d.BackupCandidates() {
		if c.Owner != worker {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		return Task{}, false
	}
	c := mine[int(now.Unix())%len(mine)]
	a, err := d.AssignBackup(worker, c.Task.ID, now)
	if err != nil {
		t.Fatalf("backup of %v for worker %d: %v", c.Task, worker, err)
	}
	if _, err := d.AssignBackup(worker, c.Task.ID, now); err == nil {
		t.Fatalf("a second backup of %v", c.Task)
	}
	if since, isBackup, ok := d.HeldBy(worker, c.Task.ID); !ok || !isBackup || !since.Equal(now) {
		t.Fatalf("HeldBy(%d, %d) = %v %v %v after a backup", worker, c.Task.ID, since, isBackup, ok)
	}
	return a.Task, true
}

// TestPropertyRandomParams runs the simulation over seeded random parameter
// sets, to reach combinations nobody thought of writing down.
func TestPropertyRandomParams(t *testing.T) {
	r := rand.New(rand.NewPCG(2024, 11))
	for i := range 30 {
		p := simParams{
			seed:       uint64(100 + i),
			workers:    1 + r.IntN(64),
			epochs:     1 + r.IntN(4),
			pFail:      r.Float64() * 0.1,
			pDie:       r.Float64() * 0.1,
			pStall:     r.Float64() * 0.1,
			pLateReply: r.Float64(),
			reuseIDs:   r.IntN(2) == 0,
			evals:      r.IntN(3),
		}
		if i%3 != 0 {
			p.pBackup = r.Float64()
		}
		if i%2 == 1 {
			p.pRestart = r.Float64() * 0.02
		}
		t.Run(fmt.Sprintf("p%02d", i), func(t *testing.T) {
			t.Logf("%+v", p)
			simulate(t, p)
		})
	}
}
