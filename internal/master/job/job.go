// Package job is the decision core of a job's master: one pure state
// machine that holds everything the master decides with — the task
// dispatcher (package task), the relaunch policy (package policy), the
// instances and their states, the evaluation passes, the order of a
// predict job's rows, the live-worker generation for sync SGD, the summary
// counters and the job's phase.
//
// Its inputs are events (Step): instance events from the cluster backend,
// workers' requests and reports, clock ticks, and the outcome of what the
// master carried out. What to do comes back in a Ready (as etcd's raft
// returns it): instances to launch or stop, live-worker counts for the PS,
// notices, prediction rows to write in order, the model to save. The core
// does no I/O, reads no clock (every Step gets now), starts no goroutine and
// takes no lock; the master (its shell) serialises Steps and carries out
// the Ready. That makes every rule a table test and a whole job a
// simulation (see sim_test.go).
package job

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"elasticdl/internal/master/policy"
	"elasticdl/internal/master/task"
)

// Job modes: what a job does with its model.
const (
	// ModeTrain trains on the training data (and evaluates on the
	// validation data).
	ModeTrain = "train"
	// ModeEvaluate evaluates a restored model on the validation data: one
	// pass, no training.
	ModeEvaluate = "evaluate"
	// ModePredict predicts every record of the prediction data with a
	// restored model, rows released in input order.
	ModePredict = "predict"
)

// Phase is where the job is in its life.
type Phase int

// Phases, in the order a job goes through them (a job may skip some, and
// may fail from any phase before Succeeded).
const (
	Starting   Phase = iota // before Start
	Training                // training tasks (and periodic evaluation passes)
	Evaluating              // the final evaluation pass, or an evaluate job's pass
	Predicting              // a predict job's tasks
	Uploading               // AllReduce: all tasks done; waiting for a worker's model
	Saving                  // all tasks done; the shell saves the model or commits the predictions
	Succeeded
	Failed
)

func (p Phase) String() string {
	switch p {
	case Starting:
		return "starting"
	case Training:
		return "training"
	case Evaluating:
		return "evaluating"
	case Predicting:
		return "predicting"
	case Uploading:
		return "uploading"
	case Saving:
		return "saving"
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

// over reports whether workers are done: no task will be handed out again.
func (p Phase) over() bool { return p >= Uploading }

// Config is what the core needs to know of a job; the shell has checked
// it, and counted the records of each data set.
type Config struct {
	// Mode is ModeTrain, ModeEvaluate or ModePredict ("" means train).
	Mode        string
	JobName     string
	ModelDef    string
	ModelParams string
	// WorkerCommand is a user's worker program (--worker_command), if any.
	WorkerCommand string
	// Tasks configures the dispatcher; for a training job it holds the
	// training shards and epochs.
	Tasks task.Config
	// RecordsPerTask sizes evaluation and prediction tasks.
	RecordsPerTask int64
	// ValidationData (may be empty) and its record count; EvaluationSteps
	// > 0 queues a pass each time the model version reported by training
	// crosses a multiple of it.
	ValidationData    string
	ValidationRecords int64
	EvaluationSteps   int64
	// PredictionData, its record count, the CSV path the shell writes, and
	// the model's number of classes (predict jobs).
	PredictionData    string
	PredictionRecords int64
	PredictionOutputs string
	NumClasses        int

	// NumWorkers is the most workers the job runs, and the number it aims
	// at until told otherwise (SetTarget); MinWorkers (at least 1) the
	// fewest it is scaled down to, and how many must run before training
	// starts.
	NumWorkers, NumPS int
	MinWorkers        int
	// SyncSGD: the PS apply the average of the live workers' pushes, so
	// they must be told how many workers are live (Ready.LiveWorkers).
	SyncSGD bool
	// HeartbeatTimeout: a running worker silent this long is stopped and
	// replaced. WorkerMasterTimeout is how long a worker retries a master
	// it cannot reach before it exits with the cause (its
	// --master_timeout): a worker that never talked is judged silent only
	// after both, so that its own cause, not the master's stop, ends it.
	HeartbeatTimeout    time.Duration
	WorkerMasterTimeout time.Duration
	// AllReduce: workers average gradients in a ring whose rendezvous the
	// core keeps (see ring.go); RingGrace bounds how long a re-forming ring
	// waits for a member that does not check in.
	AllReduce bool
	RingGrace time.Duration
	// UploadTimeout bounds how long an AllReduce job waits, once its tasks
	// are done, for a worker to upload the model.
	UploadTimeout time.Duration
	Policy        policy.Config
	// InitVersion is the version of the checkpoint the PS start from (-1:
	// none); an evaluate job's pass and a non-training job's model version.
	InitVersion int64
	// AllReduce: InitDir is where checkpoint InitVersion is (the first
	// ring starts from it; "": from the initial model), CheckpointDir where
	// the workers write theirs (restore points should every ring member be
	// lost).
	InitDir, CheckpointDir string
	// CheckApplied (PS training): pushes name their minibatches and the PS
	// record what they applied; the core checks, once training tasks are
	// done, that every shard holds every minibatch (see pscheck.go), cut
	// from a task's readable records every MinibatchSize.
	CheckApplied  bool
	MinibatchSize int
	// SlowWorkerFraction: a worker whose records/s stays below this
	// fraction of the others' median is marked slow (slow.go); 0: never.
	// BackupTasks: once nothing is queued, an idle worker gets a copy of
	// a straggling task (backup.go; PS training with CheckApplied).
	SlowWorkerFraction float64
	BackupTasks        bool
	// ParkSlowWorkers: an AllReduce worker marked slow leaves the ring
	// for a while (park.go); ParkTrials: one that lags is parked on
	// trial, kept parked only if the ring is faster without it (trial.go).
	ParkSlowWorkers bool
	ParkTrials      bool
	// ReplaceSlowWorkers: a worker slow for ReplaceSlowAfter is stopped
	// and its slot relaunched away from its node (replace.go).
	ReplaceSlowWorkers bool
	ReplaceSlowAfter   time.Duration
	// Logger receives the core's decisions; slog.Default when nil.
	Logger *slog.Logger
}

func (c *Config) training() bool { return c.Mode == "" || c.Mode == ModeTrain }

// Errors of requests, wrapped with context; the shell maps them to gRPC
// codes with errors.Is.
var (
	// ErrUnknownWorker: the request comes from a worker this master did not
	// launch or already gave up on; it must not touch the job's state.
	ErrUnknownWorker = errors.New("unknown worker")
	// ErrRejected: the request does not fit the job's state (a task the
	// worker does not hold, a late report).
	ErrRejected = errors.New("rejected")
	// ErrInvalid: the request is malformed.
	ErrInvalid = errors.New("invalid request")
)

// Job is the state of one job. Build it with New; it is not safe for
// concurrent use (the shell holds one lock around Step and Ready).
type Job struct {
	cfg    Config
	log    *slog.Logger
	phase  Phase
	jobErr error

	disp   *task.Dispatcher
	policy *policy.Policy

	workers      map[int]*instance // live workers by ID
	ps           map[int]*instance // live PS by shard index
	nextWorkerID int
	nextPSID     int
	// target is how many workers the job aims to run (SetTarget);
	// draining the workers being let go, by when, which finish their task
	// first (see scale.go).
	target   int
	draining map[int]time.Time
	// targetSource is who set the target last (a let-go's cause).
	targetSource string
	// parked: the worker slots whose slow worker was parked (park.go);
	// replaced those whose slow worker was replaced (replace.go).
	parked   map[int]*parkedSlot
	replaced map[int]*replacedSlot
	// trial: the member parked on trial, while its ring is measured
	// without it (trial.go).
	trial *parkTrial
	// released are the workers the job let go (not lost): told to stop,
	// not refused, when they call again before they exit.
	released map[int]bool
	// reach: whether any worker has ever reached the master (reach.go).
	reach reachState
	// numPS and psLayout are the PS the job has and the layout they
	// serve; psTarget the number asked for; reshard the change under way
	// (reshard.go).
	numPS    int
	psLayout int64
	psTarget int
	reshard  *reshardOp
	// resize: the change of size being timed (resize.go).
	resize resizeTiming

	evalScheduled bool                  // the final pass is queued
	evalPending   map[int64]evalMetrics // by task ID, until the task succeeds
	passes        map[int64]*evalPass   // by dispatcher key (see queueEval)
	finalKey      int64                 // key of the final pass; -1 until queued
	// trainVersion is the highest model version training reports carried;
	// nextEvalAt the version whose crossing queues the next pass.
	trainVersion, nextEvalAt int64

	pred    *predictionOrder // predict jobs only
	ring    rendezvous       // AllReduce jobs only
	applied appliedLedger    // AllReduce jobs only (corrupt: every training job)
	check   appliedCheck     // PS jobs with CheckApplied
	// uploadingSince: when an AllReduce job began waiting for its model.
	uploadingSince time.Time

	// liveGen orders the live-worker counts sent to the PS (sync SGD);
	// liveSending is set once the initial workers are launched (the PS
	// started with --live_workers=NumWorkers).
	liveGen     int64
	liveSending bool

	summary Summary
	// slow: the workers' rates and slow marks (slow.go).
	slow slowTracker
	// pendingSave is the Save asked for and not yet Saved: a master that
	// takes over in phase Saving carries it out again.
	pendingSave     *Save
	saved           Saved
	progress        progressMeter
	trainingStart   time.Time
	trainingEnd     time.Time
	epochsAnnounced int

	ready Ready
	// stepAt is the time of the Step being applied: occurrences' At.
	stepAt time.Time
}

type instance struct {
	id, index int
	lastSeen  time.Time
	running   bool
	startedAt time.Time // when it was seen running
	talked    bool      // it made a request of this master (workers)
	// node is where it runs ("" when the backend does not say);
	// launchedAt when it was launched; avoid the nodes its launch
	// avoided; replacement: it replaces a slow worker (replace.go).
	node        string
	launchedAt  time.Time
	avoid       []string
	replacement bool
}

// New builds the core of a job: the dispatcher with its tasks, and the
// evaluation or prediction pass of an evaluate or predict job.
func New(cfg Config) (*Job, error) {
	if cfg.Mode == "" {
		cfg.Mode = ModeTrain
	}
	disp, err := task.New(cfg.Tasks)
	if err != nil {
		return nil, fmt.Errorf("task dispatcher: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	j := &Job{
		cfg:         cfg,
		log:         logger,
		disp:        disp,
		policy:      policy.New(cfg.Policy),
		workers:     map[int]*instance{},
		ps:          map[int]*instance{},
		target:      cfg.NumWorkers,
		draining:    map[int]time.Time{},
		released:    map[int]bool{},
		parked:      map[int]*parkedSlot{},
		replaced:    map[int]*replacedSlot{},
		numPS:       cfg.NumPS,
		psTarget:    cfg.NumPS,
		evalPending: map[int64]evalMetrics{},
		passes:      map[int64]*evalPass{},
		finalKey:    -1,
		nextEvalAt:  cfg.EvaluationSteps,
		ring:        newRendezvous(cfg),
		applied:     appliedLedger{ranges: map[int64][]appliedRange{}, corrupt: map[int64]int64{}},
		summary:     Summary{Job: cfg.JobName, ModelDef: cfg.ModelDef, ModelParams: cfg.ModelParams, WorkerCommand: cfg.WorkerCommand, Mode: cfg.Mode},
	}
	switch cfg.Mode {
	case ModeEvaluate:
		// One pass over the restored model: its key is the checkpoint's
		// version.
		j.evalScheduled = true
		if err := j.queueEval(cfg.InitVersion, true); err != nil {
			return nil, err
		}
	case ModePredict:
		if _, err := disp.AddPrediction([]task.Shard{{Name: cfg.PredictionData, Records: cfg.PredictionRecords}}, cfg.RecordsPerTask); err != nil {
			return nil, fmt.Errorf("schedule prediction: %w", err)
		}
		j.pred = newPredictionOrder(cfg.PredictionRecords, cfg.NumClasses)
	}
	return j, nil
}

// Reply answers a worker's request.
type Reply struct {
	// Assignment answers GetTask.
	Assignment task.Assignment
	// Stop answers Heartbeat: the job is over, the worker may exit.
	Stop bool
	// Ring answers the rendezvous events (nil: not formed yet).
	Ring *Ring
	// Held answers a JoinRing that formed: the tasks the worker holds, as
	// the master knows them (Done included).
	Held []task.Task
	// LetGo answers a JoinRing of a member let go (scale down): it left
	// its ring at a step boundary and stops; and a Heartbeat (with Stop)
	// of any worker let go that calls before it exits.
	LetGo bool
	// Superseded answers a ReportTask of a backed-up task whose other
	// copy was reported first: taken, and dropped.
	Superseded bool
}

// Step applies one event at time now and returns the answer to a worker's
// request (an error wrapping ErrUnknownWorker, ErrRejected or ErrInvalid
// when it is refused; the state is then unchanged). What to do next
// accumulates in Ready.
func (j *Job) Step(now time.Time, ev Event) (Reply, error) {
	j.stepAt = now
	switch ev := ev.(type) {
	case Start:
		if ev.AdmissionWait > 0 {
			j.summary.AdmissionWaitSeconds = math.Round(ev.AdmissionWait.Seconds()*1000) / 1000
		}
		j.start(now)
	case Tick:
		j.tick(now)
	case SetTarget:
		j.setTarget(now, ev)
	case SetPSTarget:
		j.setPSTarget(now, ev)
	case ReshardDone:
		j.reshardDone(now, ev)
	case Resumed:
		j.resumed(now, ev)
	case Fail:
		j.fail(ev.Err)
	case Saved:
		j.finishSave(ev)
	case Instance:
		j.instanceEvent(now, ev.Event)
		j.advanceReshard(now) // a new shard runs, a holder is lost
	case LaunchFailed:
		j.launchFailed(ev)
	case GetTask:
		return j.getTask(now, ev)
	case ReportTask:
		r, err := j.reportTask(now, ev)
		if err == nil {
			j.advanceReshard(now) // the last held task may be in
		}
		return r, err
	case ReportEval:
		return j.reportEval(now, ev)
	case Heartbeat:
		if j.released[ev.Worker] {
			return Reply{Stop: true, LetGo: true}, nil
		}
		if err := j.seen(ev.Worker, now); err != nil {
			return Reply{}, err
		}
		j.ring.noteCollective(ev.Worker, ev.Collective)
		return Reply{Stop: j.phase.over()}, nil
	case JoinRing:
		return j.joinRing(now, ev)
	case RingStatus:
		return j.ringStatus(now, ev)
	case RingBroken:
		return j.ringBroken(now, ev)
	case CommitTask:
		return j.commitTask(now, ev)
	case SettleRing:
		return j.settleRing(now, ev)
	case ReportApplied:
		return j.reportApplied(now, ev)
	case ModelUploaded:
		return j.modelUploaded(now, ev)
	case AppliedFound:
		if ev.Reshard {
			j.reshardChecked(now, ev)
		} else {
			j.appliedFound(now, ev)
		}
	default:
		return Reply{}, fmt.Errorf("%w: event %T", ErrInvalid, ev)
	}
	return Reply{}, nil
}

// Ready returns what to do since the last call, and forgets it.
func (j *Job) Ready() Ready {
	rd := j.ready
	j.ready = Ready{}
	return rd
}

func (j *Job) notice(warning bool, reason, msg string) {
	j.ready.Notices = append(j.ready.Notices, Notice{Warning: warning, Reason: reason, Message: msg})
}

// setPhase moves the job on; reaching Saving (or the end) ends the event
// loop.
func (j *Job) setPhase(p Phase) {
	if j.phase < Saving && p >= Saving {
		j.ready.Ended = true
	}
	if p != j.phase {
		o := Occurrence{Kind: OccurPhase, Cause: p.String(), From: int(j.phase), To: int(p), Warning: p == Failed}
		if p == Failed && j.jobErr != nil {
			o.Detail = j.jobErr.Error()
		}
		j.occur(o)
	}
	j.phase = p
}

// fail ends the job with err; the first error wins.
func (j *Job) fail(err error) {
	if j.phase == Succeeded || j.phase == Failed {
		return
	}
	j.jobErr = err
	j.setPhase(Failed)
}

// save asks the shell to save, and remembers it until Saved.
func (j *Job) save(s Save) {
	pending := s
	j.ready.Save, j.pendingSave = &s, &pending
}

func (j *Job) finishSave(s Saved) {
	if j.phase != Saving {
		return
	}
	j.saved, j.pendingSave = s, nil
	if s.Err != nil {
		j.fail(s.Err)
		return
	}
	j.setPhase(Succeeded)
}

func (j *Job) start(now time.Time) {
	if j.phase != Starting {
		return
	}
	switch j.cfg.Mode {
	case ModeEvaluate:
		j.setPhase(Evaluating)
	case ModePredict:
		j.setPhase(Predicting)
	default:
		j.setPhase(Training)
	}
	t := now.UTC()
	j.summary.StartedAt = &t
	for i := 0; i < j.cfg.NumPS; i++ {
		j.launchPS(now, i, causeStart, "")
	}
	for i := 0; i < j.target; i++ { // NumWorkers, unless told otherwise already
		j.launchWorker(now, i, causeStart, "")
	}
	j.liveSending = true
	j.sendLiveWorkers(false)
}

// Phase returns where the job is.
func (j *Job) Phase() Phase { return j.phase }

// Err is why the job failed (nil unless the phase is Failed).
func (j *Job) Err() error { return j.jobErr }
