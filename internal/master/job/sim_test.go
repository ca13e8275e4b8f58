package job

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/policy"
	"elasticdl/internal/master/task"
)

// The simulator drives whole jobs through the core, as a cluster and its
// workers would, with faults chosen by a seeded random source: workers
// killed, preempted, OOM-killed or failing, parameter servers lost,
// workers that hang, slow workers (marked slow, their tasks backed up at
// the end) and slow tasks that time out, late and repeated
// reports from workers the master gave up on, flaky tasks, time jumping.
// After every job it checks the invariants the system promises: the job
// ends and succeeds; every record of every epoch was trained exactly once
// in the ledger (by the core's count and by the simulator's own); no task
// is left todo or held; a predict job's rows came once each, in input
// order; the evaluation covered the validation data; live-worker counts
// went out in generation order.
//
// SIM_SEED=n go test -run TestSimulatedJobs -v ./internal/master/job
// replays job n with a trace of every event.

const simJobs = 10000

func TestSimulatedJobs(t *testing.T) {
	if underRace && os.Getenv("ELASTICDL_SIMS_UNDER_RACE") == "" {
		// One goroutine drives a pure state machine: the race detector has
		// nothing to find, and makes the run 10-20× slower. hack/test.sh
		// runs the simulations without it.
		t.Skip("a single-goroutine simulation: run without -race (hack/test.sh does)")
	}
	if s := os.Getenv("SIM_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := runSim(seed, t.Logf); err != nil {
			t.Fatal(err)
		}
		return
	}
	failed := 0
	var total simStats
	for seed := int64(0); seed < simJobs; seed++ {
		st, err := runSim(seed, nil)
		total.add(st)
		if err != nil {
			t.Errorf("seed %d: %v (replay: SIM_SEED=%d go test -run TestSimulatedJobs -v ./internal/master/job)", seed, err, seed)
			if failed++; failed == 5 {
				t.FailNow()
			}
		}
	}
	// What the jobs went through, so that a change that stops the faults
	// from happening shows.
	t.Logf("%d jobs: %+v", simJobs, total)
	if total.WorkersLost < simJobs || total.PSLost < simJobs/10 || total.Requeued < simJobs || total.Silent < simJobs/10 || total.LateReports < simJobs/100 || total.Restarts < simJobs ||
		total.LostReplies < simJobs/10 || total.Resent < total.LostReplies/2 || total.RolledBack < simJobs || total.Reopened < simJobs/10 || total.ScaledDown < simJobs ||
		total.SlowMarked < simJobs/2000 || total.Backups < simJobs/10 || total.BackupsWon < simJobs/20 || total.Superseded < simJobs/50 {
		t.Errorf("too few faults: %+v", total)
	}
	if total.NeverReached > simJobs/100 {
		t.Errorf("%d jobs failed because no worker reached the master: the faults end too many jobs before they start", total.NeverReached)
	}
}

// simStats sums what happened in the simulated jobs.
type simStats struct {
	Steps, WorkersLost, PSLost, Requeued, Silent, LateReports, FailedTasks, Restarts, LostReplies, Resent int64
	// RolledBack: records a PS lost to a checkpoint restore and the check
	// sent back to training.
	RolledBack, Reopened int64
	// ScaledDown: workers let go because the target dropped.
	ScaledDown int64
	// NeverReached: jobs failed, rightly, because their first workers all
	// died before any made a request (reach.go).
	NeverReached int64
	// SlowMarked: workers marked slow (few: a sim job's workers do few
	// tasks; TestSlowDetectionRandomized has the marks' properties);
	// Backups: backup copies handed out,
	// BackupsWon those reported first, Superseded the reports dropped.
	SlowMarked, Backups, BackupsWon, Superseded int64
}

func (a *simStats) add(b simStats) {
	a.Steps += b.Steps
	a.WorkersLost += b.WorkersLost
	a.ScaledDown += b.ScaledDown
	a.PSLost += b.PSLost
	a.Requeued += b.Requeued
	a.Silent += b.Silent
	a.LateReports += b.LateReports
	a.FailedTasks += b.FailedTasks
	a.Restarts += b.Restarts
	a.LostReplies += b.LostReplies
	a.Resent += b.Resent
	a.RolledBack += b.RolledBack
	a.Reopened += b.Reopened
	a.NeverReached += b.NeverReached
	a.SlowMarked += b.SlowMarked
	a.Backups += b.Backups
	a.BackupsWon += b.BackupsWon
	a.Superseded += b.Superseded
}

// restart replaces the core by one resumed from its State, through JSON
// as a master persists it; the resumed core's State must be the same.
func (s *sim) restart() error {
	j, n, err := resumeThroughJSON(s.cfg, s.j)
	if err != nil {
		return err
	}
	s.log("restart: master resumed from %d bytes of state", n)
	s.j = j
	s.restarted++
	s.saved = false // the new master saves again
	// What the cluster has: a pending worker sometimes never started (the
	// old master persisted its launch and died before making it).
	var have []cluster.Event
	for _, id := range s.ids() {
		w := s.workers[id]
		if !w.running && w.held == nil && s.restarts.Intn(20) == 0 {
			delete(s.workers, id)
			continue
		}
		phase := cluster.Pending
		if w.running {
			phase = cluster.Running
		}
		have = append(have, cluster.Event{Role: cluster.Worker, ID: id, Phase: phase})
	}
	for _, id := range s.ps {
		have = append(have, cluster.Event{Role: cluster.PS, ID: id, Phase: cluster.Running})
	}
	_, err = s.apply(Resumed{Instances: have})
	return err
}

type simWorker struct {
	id      int
	running bool
	held    *task.Task
	wait    int  // actions to spend on the held task before reporting
	hung    bool // silent: never talks again
	// slow: takes several times as many actions per task.
	slow     bool
	reported []task.Task
}

type sim struct {
	rng *rand.Rand
	j   *Job
	// restarts, when set, replaces the core now and then by one resumed
	// from its persisted State (a master failover between two events).
	restarts  *rand.Rand
	restarted int64
	// reached: a worker's request was taken (the sim's own count).
	reached bool
	cfg     Config
	now     time.Time
	trace   func(string, ...any)
	workers map[int]*simWorker // processes alive, by ID
	ps      []int              // PS instance IDs alive
	ghosts  []*simWorker       // processes the master gave up on, with what they held
	// accepted[taskID] counts the simulator's accepted training reports;
	// ranges[epoch] the records of those reports, late[epoch] those of
	// successful reports refused because the task had timed out.
	accepted map[int64]int
	ranges   map[int][][2]int64
	late     map[int][][2]int64
	predNext int64
	lastGen  int64
	saved    bool
	silent   int64 // workers the master stopped for silence
	// lostReplies: task assignments the worker never got.
	lostReplies int64
	// With CheckApplied: what each PS shard's model holds (task ->
	// minibatch -> held), its last checkpoint's copy, the shard index of
	// each PS instance, the question the core asked last (nil: none
	// open), and the tasks and records the sim expects reopened.
	shards, ckpts []map[int64]map[int32]bool
	psIndex       map[int]int
	question      *CheckApplied
	reopened      int64
	rolledBack    int64
	// occurred: every occurrence the cores raised, failovers included.
	occurred []Occurrence
	// slowRng picks the slow workers and their pace (a stream of its
	// own); won: the training tasks ever accepted (a backed-up task's
	// other copy may report after a check reopened it).
	slowRng *rand.Rand
	won     map[int64]bool
}

func simConfig(rng *rand.Rand) Config {
	records := 1 + rng.Int63n(400)
	per := int64(8 + rng.Intn(120))
	workers := 1 + rng.Intn(5)
	cfg := Config{
		Mode:             ModeTrain,
		JobName:          "sim",
		RecordsPerTask:   per,
		NumWorkers:       workers,
		NumPS:            1 + rng.Intn(2),
		NumClasses:       2,
		SyncSGD:          rng.Intn(2) == 0,
		HeartbeatTimeout: 30 * time.Second,
		InitVersion:      -1,
		// High caps: the simulation checks exactness under churn, the
		// policy's limits have tests of their own.
		Policy: policy.Config{MaxWorkerFailureRelaunches: 1000, MaxPSRelaunches: 1000, MaxTotalWorkerRelaunches: 100000},
		Tasks: task.Config{
			Training:       []task.Shard{{Name: "train", Records: records}},
			RecordsPerTask: per,
			NumEpochs:      1 + rng.Intn(3),
			MaxAttempts:    1000,
			TaskTimeout:    time.Duration(rng.Intn(3)) * time.Minute, // 0: none
			Shuffle:        rng.Intn(2) == 0,
			Seed:           rng.Int63(),
		},
		Logger: slog.New(slog.DiscardHandler),
	}
	if rng.Intn(2) == 0 {
		// Pushes name their minibatches; the core checks what the PS hold.
		cfg.CheckApplied, cfg.MinibatchSize = true, 1+rng.Intn(16)
	}
	if rng.Intn(4) == 0 {
		cfg.MinWorkers = rng.Intn(workers + 1) // training starts with this many
	}
	switch r := rng.Intn(10); {
	case r < 2:
		cfg.Mode = ModeEvaluate
		cfg.Tasks.Training, cfg.Tasks.NumEpochs = nil, 0
		cfg.ValidationData, cfg.ValidationRecords = "val", records
		cfg.InitVersion = rng.Int63n(100)
	case r < 4:
		cfg.Mode = ModePredict
		cfg.Tasks.Training, cfg.Tasks.NumEpochs = nil, 0
		cfg.PredictionData, cfg.PredictionRecords = "pred", records
	case r < 7:
		cfg.ValidationData, cfg.ValidationRecords = "val", 1+rng.Int63n(200)
		cfg.EvaluationSteps = int64(rng.Intn(4)) * 5
	}
	return cfg
}

func runSim(seed int64, trace func(string, ...any)) (st simStats, err error) {
	rng := rand.New(rand.NewSource(seed))
	cfg := simConfig(rng)
	// Slow workers are marked in every job; backups are on in most PS
	// training jobs (CheckApplied: the PS apply a minibatch once).
	cfg.SlowWorkerFraction, cfg.BackupTasks = 0.5, seed%4 != 0
	j, err := New(cfg)
	if err != nil {
		return st, err
	}
	s := &sim{rng: rng, j: j, cfg: cfg, now: time.Unix(0, 0), trace: trace, workers: map[int]*simWorker{},
		accepted: map[int64]int{}, ranges: map[int][][2]int64{}, late: map[int][][2]int64{}, psIndex: map[int]int{},
		slowRng: rand.New(rand.NewSource(seed ^ 0x5107)), won: map[int64]bool{}}
	for range cfg.NumPS {
		s.shards = append(s.shards, map[int64]map[int32]bool{})
		s.ckpts = append(s.ckpts, map[int64]map[int32]bool{})
	}
	if seed%2 == 1 {
		// A stream of its own: the other seeds' jobs stay what they were.
		s.restarts = rand.New(rand.NewSource(seed ^ 0x5eed))
	}
	s.log("config %+v", cfg)
	defer func() {
		sum, p := s.j.Summary(0), s.j.Snapshot().Progress
		st.Restarts, st.LostReplies, st.Resent = s.restarted, s.lostReplies, sum.Tasks.Resent
		st.WorkersLost, st.PSLost, st.Requeued = int64(sum.Workers.Lost), int64(sum.PS.Lost), sum.Tasks.Requeued
		st.LateReports, st.FailedTasks, st.Silent = p.LateReports, sum.Tasks.Failed, s.silent
		st.RolledBack, st.Reopened = sum.RecordsRequeuedForRollback, sum.Tasks.Reopened
		st.ScaledDown = int64(sum.Workers.ScaledDown)
		st.Backups, st.BackupsWon, st.Superseded = sum.Tasks.Backups, sum.Tasks.BackupsWon, sum.Tasks.Superseded
		for _, m := range sum.SlowWorkers {
			if m.Slow {
				st.SlowMarked++
			}
		}
	}()
	if _, err := s.step(Start{}); err != nil {
		return st, err
	}
	for ; st.Steps < 200000; st.Steps++ {
		switch s.j.Phase() {
		case Saving:
			if _, err := s.step(Saved{}); err != nil {
				return st, err
			}
			continue
		case Succeeded:
			return st, s.check()
		case Failed:
			if errors.Is(s.j.Err(), ErrNoWorkerReached) && !s.reached {
				st.NeverReached++ // the workers died before any talked: failing is right
				return st, s.checkOccurred(s.j.Summary(0))
			}
			return st, fmt.Errorf("job failed: %v", s.j.Err())
		}
		if err := s.act(); err != nil {
			return st, err
		}
	}
	return st, fmt.Errorf("job did not end: phase %v, %+v", s.j.Phase(), s.j.Snapshot().Progress)
}

func (s *sim) log(format string, args ...any) {
	if s.trace != nil {
		s.trace(format, args...)
	}
}

// step applies ev (on odd seeds, sometimes after a master failover).
func (s *sim) step(ev Event) (Reply, error) {
	if s.restarts != nil && s.restarts.Intn(30) == 0 {
		if err := s.restart(); err != nil {
			return Reply{}, err
		}
	}
	return s.apply(ev)
}

// apply applies ev and carries out the Ready as a cluster would.
func (s *sim) apply(ev Event) (Reply, error) {
	r, err := s.j.Step(s.now, ev)
	s.log("%v %T%+v -> %+v %v", s.now.Unix(), ev, ev, r.Assignment, err)
	switch ev.(type) {
	case GetTask, ReportTask, Heartbeat, ReportEval, ReportApplied:
		s.reached = s.reached || err == nil // a worker's request was taken
	}
	if n := len(s.j.workers); n > s.cfg.NumWorkers {
		return r, fmt.Errorf("%d workers live, more than NumWorkers %d", n, s.cfg.NumWorkers)
	}
	rd := s.j.Ready()
	s.occurred = append(s.occurred, rd.Occurred...)
	for _, st := range rd.Stop {
		w := s.workers[st.ID]
		if w == nil {
			continue // not the sim's: a resumed master stops what it does not know
		}
		s.silent++
		delete(s.workers, st.ID)
		s.ghosts = append(s.ghosts, w)
		defer s.step(Instance{cluster.Event{Role: cluster.Worker, ID: st.ID, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed, Requested: true}})
	}
	for _, l := range rd.Launch {
		if l.Role == cluster.PS {
			s.ps = append(s.ps, l.ID)
			s.psIndex[l.ID] = l.Index
			continue
		}
		s.workers[l.ID] = &simWorker{id: l.ID, slow: s.slowRng.Intn(4) == 0}
	}
	for _, u := range rd.LiveWorkers {
		if u.Gen <= s.lastGen {
			return r, fmt.Errorf("live-worker generation %d after %d", u.Gen, s.lastGen)
		}
		s.lastGen = u.Gen
	}
	if q := rd.CheckApplied; q != nil {
		if !s.cfg.CheckApplied || q.FlushGen != 0 && q.FlushGen <= s.lastGen {
			return r, fmt.Errorf("check %+v (flush generation after %d)", q, s.lastGen)
		}
		s.lastGen = max(s.lastGen, q.FlushGen)
		s.question = q
	}
	for _, rows := range rd.PredictionRows {
		if rows.Start != s.predNext {
			return r, fmt.Errorf("prediction rows from %d, want %d", rows.Start, s.predNext)
		}
		s.predNext = rows.End
	}
	if rd.Save != nil {
		if s.saved {
			return r, errors.New("a second Save")
		}
		s.saved = true
		if rd.Save.FlushGen != 0 && rd.Save.FlushGen <= s.lastGen {
			return r, fmt.Errorf("save flush generation %d after %d", rd.Save.FlushGen, s.lastGen)
		}
	}
	return r, err
}

// ids returns the alive workers' IDs, sorted (a deterministic choice).
func (s *sim) ids() []int {
	ids := make([]int, 0, len(s.workers))
	for id := range s.workers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// act picks one thing to happen.
func (s *sim) act() error {
	ids := s.ids()
	switch r := s.rng.Intn(100); {
	case r < 70 && len(ids) > 0:
		return s.workerActs(s.workers[ids[s.rng.Intn(len(ids))]])
	case r < 75 && len(ids) > 0:
		return s.killWorker(s.workers[ids[s.rng.Intn(len(ids))]])
	case r < 77 && len(s.ps) > 0:
		i := s.rng.Intn(len(s.ps))
		id := s.ps[i]
		s.ps = slices.Delete(s.ps, i, i+1)
		// Its relaunch restores the shard's last checkpoint: what was
		// applied since is lost from the model.
		x := s.psIndex[id]
		s.shards[x] = cloneHeld(s.ckpts[x])
		_, err := s.step(Instance{cluster.Event{Role: cluster.PS, ID: id, Phase: cluster.Exited, ExitCode: 137, Reason: cluster.Killed}})
		return err
	case r < 79 && len(ids) > 0:
		// Only a worker that runs can hang; a pending one just waits.
		w := s.workers[ids[s.rng.Intn(len(ids))]]
		w.hung = w.running
		return nil
	case r < 82 && len(s.ghosts) > 0:
		return s.ghostReports(s.ghosts[s.rng.Intn(len(s.ghosts))])
	case r < 84 && s.cfg.CheckApplied:
		x := s.rng.Intn(len(s.shards))
		s.ckpts[x] = cloneHeld(s.shards[x])
		return nil
	case r < 86:
		// The cluster's wish changes: an autoscaler, a user (0 and above
		// NumWorkers are clamped).
		_, err := s.step(SetTarget{Workers: s.rng.Intn(s.cfg.NumWorkers + 2), Source: "sim"})
		return err
	case r < 90 && s.question != nil:
		return s.answer()
	default:
		return s.timePasses(ids)
	}
}

// timePasses moves the clock; workers that are not hung heartbeat (most of
// the time) as their heartbeat goroutine does whatever their task, then
// the master's clock ticks.
func (s *sim) timePasses(ids []int) error {
	s.now = s.now.Add(time.Duration(s.rng.Intn(20)) * time.Second)
	for _, id := range ids {
		if w := s.workers[id]; w != nil && w.running && !w.hung && s.rng.Intn(10) > 0 {
			if _, err := s.step(Heartbeat{Worker: id}); err != nil {
				return err
			}
		}
	}
	_, err := s.step(Tick{})
	return err
}
