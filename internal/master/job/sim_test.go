package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
// workers that hang, slow workers whose tasks time out, late and repeated
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
		total.LostReplies < simJobs/10 || total.Resent < total.LostReplies/2 || total.RolledBack < simJobs || total.Reopened < simJobs/10 || total.ScaledDown < simJobs {
		t.Errorf("too few faults: %+v", total)
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

// resumeThroughJSON persists j's State as JSON, resumes a core from it, and
// checks that the resumed core's State is the same; it returns the new
// core and the State's size.
func resumeThroughJSON(cfg Config, j *Job) (*Job, int, error) {
	b, err := json.Marshal(j.State())
	if err != nil {
		return nil, 0, fmt.Errorf("persist: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, 0, fmt.Errorf("reload: %w", err)
	}
	n, err := Resume(cfg, st)
	if err != nil {
		return nil, 0, fmt.Errorf("resume: %w", err)
	}
	again, err := json.Marshal(n.State())
	if err != nil {
		return nil, 0, err
	}
	if string(again) != string(b) {
		return nil, 0, fmt.Errorf("resumed core's state differs:\n%s\nwant\n%s", again, b)
	}
	return n, len(b), nil
}

type simWorker struct {
	id       int
	running  bool
	held     *task.Task
	wait     int  // actions to spend on the held task before reporting
	hung     bool // silent: never talks again
	reported []task.Task
}

type sim struct {
	rng *rand.Rand
	j   *Job
	// restarts, when set, replaces the core now and then by one resumed
	// from its persisted State (a master failover between two events).
	restarts  *rand.Rand
	restarted int64
	cfg       Config
	now       time.Time
	trace     func(string, ...any)
	workers   map[int]*simWorker // processes alive, by ID
	ps        []int              // PS instance IDs alive
	ghosts    []*simWorker       // processes the master gave up on, with what they held
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
	j, err := New(cfg)
	if err != nil {
		return st, err
	}
	s := &sim{rng: rng, j: j, cfg: cfg, now: time.Unix(0, 0), trace: trace, workers: map[int]*simWorker{},
		accepted: map[int64]int{}, ranges: map[int][][2]int64{}, late: map[int][][2]int64{}, psIndex: map[int]int{}}
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
	if n := len(s.j.workers); n > s.cfg.NumWorkers {
		return r, fmt.Errorf("%d workers live, more than NumWorkers %d", n, s.cfg.NumWorkers)
	}
	rd := s.j.Ready()
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
		s.workers[l.ID] = &simWorker{id: l.ID}
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

func (s *sim) killWorker(w *simWorker) error {
	reasons := []cluster.ExitReason{cluster.Killed, cluster.Preempted, cluster.OOMKilled, cluster.Deleted}
	if len(s.workers) > 1 {
		reasons = append(reasons, cluster.Failed)
	}
	why := reasons[s.rng.Intn(len(reasons))]
	delete(s.workers, w.id)
	s.ghosts = append(s.ghosts, w)
	if w.held != nil {
		// Killed in the middle of its task: a prefix was pushed.
		s.push(*w.held, int32(s.rng.Intn(int(s.minibatches(*w.held))+1)))
	}
	_, err := s.step(Instance{cluster.Event{Role: cluster.Worker, ID: w.id, Phase: cluster.Exited, ExitCode: 1, Reason: why}})
	return err
}

// minibatches counts the minibatches of training task t (the sim's
// records are all readable).
func (s *sim) minibatches(t task.Task) int32 {
	if !s.cfg.CheckApplied || t.Type != task.Training {
		return 0
	}
	b := int64(s.cfg.MinibatchSize)
	return int32((t.Records() + b - 1) / b)
}

// push applies training task t's minibatches [0, upTo) on every shard: a
// shard holds a minibatch or not, however often it is pushed.
func (s *sim) push(t task.Task, upTo int32) {
	if !s.cfg.CheckApplied || t.Type != task.Training {
		return
	}
	for _, sh := range s.shards {
		m := sh[t.ID]
		if m == nil {
			m = map[int32]bool{}
			sh[t.ID] = m
		}
		for i := range upTo {
			m[i] = true
		}
	}
}

func cloneHeld(m map[int64]map[int32]bool) map[int64]map[int32]bool {
	out := make(map[int64]map[int32]bool, len(m))
	for id, set := range m {
		out[id] = maps.Clone(set)
	}
	return out
}

// answer tells the core what the shards hold (or that they could not be
// reached); the done tasks some shard lacks a minibatch of must go back to
// training, with their records counted as rolled back.
func (s *sim) answer() error {
	q := s.question
	s.question = nil
	ev := AppliedFound{Gen: q.Gen}
	if s.rng.Intn(10) == 0 {
		ev.Err = errors.New("a PS is unavailable")
		_, err := s.step(ev)
		return err
	}
	for _, sh := range s.shards {
		out := ShardMinibatches{Tasks: map[int64][][2]int32{}}
		for id, set := range sh {
			for _, m := range slices.Sorted(maps.Keys(set)) {
				out.Tasks[id] = append(out.Tasks[id], [2]int32{m, m + 1}) // unmerged spans are fine
			}
		}
		ev.Shards = append(ev.Shards, out)
	}
	var lacking []task.Task
	var lost int64
	for _, id := range slices.Sorted(maps.Keys(s.accepted)) {
		if s.accepted[id] != 1 {
			continue
		}
		t, _ := s.j.disp.TaskInfo(id)
		b := int64(s.cfg.MinibatchSize)
		var lacked int64
		for m := range s.minibatches(t) {
			for _, sh := range s.shards {
				if !sh[id][m] {
					lacked += min(b, t.Records()-int64(m)*b)
					break
				}
			}
		}
		if lacked > 0 {
			lacking, lost = append(lacking, t), lost+lacked
		}
	}
	before := s.j.Summary(0).Tasks.Reopened
	if _, err := s.apply(ev); err != nil {
		return err
	}
	sum := s.j.Summary(0)
	switch got := sum.Tasks.Reopened - before; {
	case got == 0:
		return nil // clean, or an answer to an older question
	case got != int64(len(lacking)):
		return fmt.Errorf("check reopened %d tasks, the shards lack minibatches of %d", got, len(lacking))
	}
	for _, t := range lacking {
		s.accepted[t.ID]--
		rs := s.ranges[t.Epoch]
		i := slices.Index(rs, [2]int64{t.Start, t.End})
		s.ranges[t.Epoch] = slices.Delete(rs, i, i+1)
	}
	s.reopened += int64(len(lacking))
	s.rolledBack += lost
	if sum.RecordsRequeuedForRollback != s.rolledBack {
		return fmt.Errorf("records requeued for rollback %d, the sim counts %d", sum.RecordsRequeuedForRollback, s.rolledBack)
	}
	return nil
}

// ghostReports: a worker the master gave up on reports late (what it held,
// or repeats what it reported): always refused.
func (s *sim) ghostReports(g *simWorker) error {
	tasks := g.reported
	if g.held != nil {
		tasks = append(tasks, *g.held)
	}
	if len(tasks) == 0 {
		return nil
	}
	t := tasks[s.rng.Intn(len(tasks))]
	if _, err := s.step(ReportTask{Worker: g.id, TaskID: t.ID, Result: task.Result{Records: t.Records()}}); !errors.Is(err, ErrUnknownWorker) {
		return fmt.Errorf("late report of task %d by lost worker %d: %v, want refused", t.ID, g.id, err)
	}
	return nil
}

func (s *sim) workerActs(w *simWorker) error {
	switch {
	case w.hung:
		return nil
	case !w.running && s.rng.Intn(2) == 0:
		w.running = true
		_, err := s.step(Instance{cluster.Event{Role: cluster.Worker, ID: w.id, Phase: cluster.Running}})
		return err
	case w.held != nil && w.wait > 0:
		w.wait--
		// Some of the task's minibatches are pushed meanwhile.
		s.push(*w.held, int32(s.rng.Intn(int(s.minibatches(*w.held))+1)))
		return nil
	case w.held != nil:
		return s.report(w)
	}
	w.running = true
	r, err := s.step(GetTask{Worker: w.id, Held: []int64{}})
	if err != nil {
		return err
	}
	if r.Assignment.Kind == task.KindTask && s.restarts != nil && s.restarts.Intn(15) == 0 {
		// The answer is lost (its master died after persisting it): the
		// worker asks again, holding nothing, and must get the task again.
		s.lostReplies++
		return nil
	}
	if r.Assignment.Kind == task.KindTask {
		t := r.Assignment.Task
		w.held, w.wait = &t, s.rng.Intn(3)
		if s.rng.Intn(10) == 0 {
			w.wait = 20 + s.rng.Intn(40) // a slow worker: its task may time out
		}
	}
	return nil
}

// report reports the held task: sometimes failed (a flaky record), and
// sometimes repeated afterwards; a report after the task was taken back
// (timeout) is refused.
func (s *sim) report(w *simWorker) error {
	t := *w.held
	w.held = nil
	ev := ReportTask{Worker: w.id, TaskID: t.ID, Result: task.Result{Records: t.Records(), Steps: 1}, ModelVersion: int64(t.ID)}
	if s.rng.Intn(30) == 0 {
		ev.Result = task.Result{Err: "flaky"}
	}
	switch t.Type {
	case task.Evaluation:
		n := t.Records()
		if _, err := s.step(ReportEval{Worker: w.id, TaskID: t.ID, Records: n, ModelVersion: 1, Sums: map[string]float64{"correct": float64(n)}}); err != nil && !errors.Is(err, ErrRejected) {
			return err
		}
	case task.Prediction:
		ev.Predictions = predictionsOf(t.Start, t.End, 2, nil)
	}
	if ev.Result.Err == "" {
		s.push(t, s.minibatches(t))
	}
	_, err := s.step(ev)
	switch {
	case errors.Is(err, ErrRejected):
		// Timed out meanwhile: someone else has it. The gradients were
		// pushed all the same, and the ledger says so.
		if ev.Result.Err == "" && t.Type == task.Training {
			s.late[t.Epoch] = append(s.late[t.Epoch], [2]int64{t.Start, t.End})
		}
		return nil
	case err != nil:
		return err
	}
	w.reported = append(w.reported, t)
	if ev.Result.Err == "" && t.Type == task.Training {
		s.accepted[t.ID]++
		s.ranges[t.Epoch] = append(s.ranges[t.Epoch], [2]int64{t.Start, t.End})
	}
	if s.rng.Intn(20) == 0 {
		// A repeated report (a retry after a lost response) is refused.
		if _, err := s.step(ev); !errors.Is(err, ErrRejected) {
			return fmt.Errorf("repeated report of task %d: %v, want refused", t.ID, err)
		}
	}
	return nil
}

// check verifies the invariants of a finished job.
func (s *sim) check() error {
	p := s.j.Snapshot().Progress
	if p.TasksTodo != 0 || p.TasksDoing != 0 {
		return fmt.Errorf("tasks left: %d todo, %d doing", p.TasksTodo, p.TasksDoing)
	}
	sum := s.j.Summary(0)
	switch s.cfg.Mode {
	case ModeTrain:
		if !s.saved {
			return errors.New("the model was never saved")
		}
		if err := s.checkLedger(sum); err != nil {
			return err
		}
		if s.cfg.ValidationData != "" && (sum.Eval == nil || sum.Eval.Records != s.cfg.ValidationRecords) {
			return fmt.Errorf("final evaluation %+v, want %d records", sum.Eval, s.cfg.ValidationRecords)
		}
	case ModeEvaluate:
		if sum.Eval == nil || sum.Eval.Records != s.cfg.ValidationRecords || sum.Eval.Accuracy != 1 {
			return fmt.Errorf("evaluation %+v, want %d records", sum.Eval, s.cfg.ValidationRecords)
		}
	case ModePredict:
		if s.predNext != s.cfg.PredictionRecords || sum.Predictions == nil || sum.Predictions.Records != s.cfg.PredictionRecords {
			return fmt.Errorf("predictions up to %d (%+v), want %d", s.predNext, sum.Predictions, s.cfg.PredictionRecords)
		}
	}
	return nil
}

// checkLedger: every task accepted once, its records tiling each epoch;
// the core's ledger says every record was trained, and trained twice
// exactly the records the simulator pushed twice (a slow worker's task
// that timed out and was redone: exactness below the task is not yet
// promised).
func (s *sim) checkLedger(sum *Summary) error {
	n := s.cfg.Tasks.Training[0].Records
	if len(sum.Epochs) != s.cfg.Tasks.NumEpochs {
		return fmt.Errorf("%d epochs in the ledger, want %d", len(sum.Epochs), s.cfg.Tasks.NumEpochs)
	}
	for id, c := range s.accepted {
		if c != 1 {
			return fmt.Errorf("task %d accepted %d times", id, c)
		}
		// In the model: every shard holds every minibatch of the task.
		t, _ := s.j.disp.TaskInfo(id)
		for x, sh := range s.shards {
			for m := range s.minibatches(t) {
				if !sh[id][m] {
					return fmt.Errorf("shard %d lacks minibatch %d of task %d at the end", x, m, id)
				}
			}
		}
	}
	if s.cfg.CheckApplied && (sum.Tasks.Reopened != s.reopened || sum.RecordsRequeuedForRollback != s.rolledBack) {
		return fmt.Errorf("summary reopened %d tasks, %d records; the sim %d, %d", sum.Tasks.Reopened, sum.RecordsRequeuedForRollback, s.reopened, s.rolledBack)
	}
	for _, e := range sum.Epochs {
		rs := s.ranges[e.Epoch]
		slices.SortFunc(rs, func(a, b [2]int64) int { return int(a[0] - b[0]) })
		next := int64(0)
		for _, r := range rs {
			if r[0] != next {
				return fmt.Errorf("epoch %d: records [%d,%d) accepted %s", e.Epoch, min(next, r[0]), max(next, r[0]), map[bool]string{true: "twice", false: "never"}[r[0] < next])
			}
			next = r[1]
		}
		if next != n {
			return fmt.Errorf("epoch %d: records [%d,%d) never trained", e.Epoch, next, n)
		}
		count := make([]int, n)
		for _, r := range append(rs, s.late[e.Epoch]...) {
			for i := r[0]; i < r[1]; i++ {
				count[i]++
			}
		}
		twice := int64(0)
		for _, c := range count {
			if c > 1 && !s.cfg.CheckApplied { // the PS apply a minibatch once
				twice++
			}
		}
		if e.Records != n || e.RecordsTrained != n || e.RecordsTrainedTwice != twice || e.RecordsMissed != 0 {
			return fmt.Errorf("ledger of epoch %d: %+v, want %d records trained, %d twice", e.Epoch, e, n, twice)
		}
	}
	return nil
}
