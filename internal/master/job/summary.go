package job

import (
	"math"
	"slices"
	"time"

	"elasticdl/data"
	"elasticdl/internal/master/task"
)

// Summary is what the job writes to --output/job_summary.json when it ends.
// The field names are part of the user contract: add, never rename.
type Summary struct {
	Job string `json:"job"`
	// StartedAt is when the job started (launched its instances; wall
	// clock, UTC).
	StartedAt *time.Time `json:"started_at,omitempty"`
	// Mode is "train", "evaluate" or "predict".
	Mode            string  `json:"mode"`
	Status          string  `json:"status"` // "succeeded" | "failed"
	Error           string  `json:"error"`
	DurationSeconds float64 `json:"duration_seconds"`
	// TrainingSeconds runs from the first training task handed out to the
	// last one reported; RecordsPerSecond is the training throughput over it.
	TrainingSeconds  float64        `json:"training_seconds"`
	RecordsPerSecond float64        `json:"records_per_second"`
	ModelDef         string         `json:"model_def"`
	ModelParams      string         `json:"model_params,omitempty"`
	WorkerCommand    string         `json:"worker_command,omitempty"`
	ModelPath        string         `json:"model_path,omitempty"`
	ModelVersion     int64          `json:"model_version"`
	Epochs           []EpochSummary `json:"epochs"`
	Eval             *EvalSummary   `json:"eval"`
	// Evaluations is the history of the evaluation passes, in the order
	// they completed: one per --evaluation_steps crossing, then the final.
	Evaluations []EvalRecord `json:"evaluations"`
	// Predictions describes the CSV a predict job wrote.
	Predictions    *PredictionSummary `json:"predictions,omitempty"`
	Workers        WorkerCounts       `json:"workers"`
	PS             PSCounts           `json:"ps"`
	Tasks          TaskCounts         `json:"tasks"`
	CorruptRecords int64              `json:"corrupt_records"`
	// FirstCorruptRecord names where the data is bad, when any record was.
	FirstCorruptRecord string `json:"first_corrupt_record,omitempty"`
	// FirstTaskTrainedAt is when the first training task was reported
	// done (wall clock, UTC): how soon an elastic job made progress.
	FirstTaskTrainedAt *time.Time `json:"first_task_trained_at,omitempty"`
	// LastTaskTrainedAt is when the last training task was reported done:
	// the job's workers are idle after it, however long they take to exit.
	LastTaskTrainedAt *time.Time `json:"last_task_trained_at,omitempty"`
	// AdmissionWaitSeconds is how long a gang job (--gang) waited until
	// all its pods fitted at once, before it launched any.
	AdmissionWaitSeconds float64 `json:"admission_wait_seconds,omitempty"`
	// MasterRestarts counts the masters that took the job over from one
	// that died (failover), each resuming from the persisted state.
	MasterRestarts int `json:"master_restarts"`
	// Failovers times each takeover: when the new master resumed, and when
	// it first handed out a task (wall clock, UTC).
	Failovers []Failover `json:"failovers,omitempty"`
	// RecordsRequeuedForRollback counts the records trained again because
	// a PS shard lost them (it restored an older checkpoint): found missing
	// from the shards at the end of training, each time.
	RecordsRequeuedForRollback int64 `json:"records_requeued_for_rollback"`
	// Ring is the rendezvous of an AllReduce job.
	Ring *RingSummary `json:"ring,omitempty"`
	// Resizes time how soon the job trained at its new size after a
	// worker was lost or its target changed (the latest 200).
	Resizes []Resize `json:"resizes,omitempty"`
	// SlowWorkers: workers marked slow and unmarked, in order (the latest
	// 200); WorkerRates: each worker's last records/s, gone ones too
	// (--slow_worker_fraction, docs/faults.md).
	SlowWorkers []SlowMark   `json:"slow_workers,omitempty"`
	WorkerRates []WorkerRate `json:"worker_rates,omitempty"`
}

// Failover is one master taking the job over from one that died.
type Failover struct {
	ResumedAt   time.Time  `json:"resumed_at"`
	FirstTaskAt *time.Time `json:"first_task_at,omitempty"`
}

// EpochSummary is the exactly-once ledger of one training epoch.
type EpochSummary struct {
	Epoch               int   `json:"epoch"`
	Records             int64 `json:"records"`
	RecordsTrained      int64 `json:"records_trained"`
	RecordsTrainedTwice int64 `json:"records_trained_twice"`
	RecordsMissed       int64 `json:"records_missed"`
}

// EvalSummary is the final evaluation on --validation_data.
type EvalSummary struct {
	Accuracy float64 `json:"accuracy"`
	// AUC: binary (two-class) models only, from the positive-class
	// probabilities (see data.ScoreHistogram); absent when undefined.
	AUC          *float64 `json:"auc,omitempty"`
	Loss         float64  `json:"loss"`
	Records      int64    `json:"records"`
	ModelVersion int64    `json:"model_version"`
}

// EvalRecord is one evaluation pass. Version is the model version the pass
// was queued at; each worker evaluates the parameters it pulls when it
// starts a task, which in asynchronous training may be newer, and
// MinVersionUsed/MaxVersionUsed are the versions actually evaluated.
type EvalRecord struct {
	Version  int64   `json:"version"`
	Accuracy float64 `json:"accuracy"`
	// AUC as in EvalSummary.
	AUC            *float64 `json:"auc,omitempty"`
	Loss           float64  `json:"loss"`
	Records        int64    `json:"records"`
	MinVersionUsed int64    `json:"min_version_used"`
	MaxVersionUsed int64    `json:"max_version_used"`
	// Final marks the evaluation at the end of training (or the pass of an
	// evaluate job); it is also the summary's "eval".
	Final bool `json:"final,omitempty"`
	// RecordsTrained: the training records done when the pass was queued
	// (its x position beside the loss).
	RecordsTrained int64 `json:"records_trained"`
}

// aucOf returns the AUC of h, nil when h is nil or the AUC is undefined (one
// class only).
func aucOf(h *data.ScoreHistogram) *float64 {
	if h == nil {
		return nil
	}
	auc := h.AUC()
	if math.IsNaN(auc) {
		return nil
	}
	return &auc
}

// PredictionSummary is where a predict job wrote its predictions.
type PredictionSummary struct {
	Path    string `json:"path"`
	Records int64  `json:"records"`
	// CorruptRecords are rows with no prediction (unreadable records).
	CorruptRecords int64 `json:"corrupt_records"`
}

// WorkerCounts counts worker instances over the job's life.
type WorkerCounts struct {
	Launched   int `json:"launched"`
	Lost       int `json:"lost"`
	Relaunched int `json:"relaunched"`
	// Preempted counts the lost ones that the cluster took back for
	// higher-priority work; MaxRunning is the most that ran at once.
	Preempted  int `json:"preempted"`
	MaxRunning int `json:"max_running"`
	// ScaledUp and ScaledDown count workers launched and let go because
	// the job's target changed (SetTarget).
	ScaledUp   int `json:"scaled_up,omitempty"`
	ScaledDown int `json:"scaled_down,omitempty"`
	// Parked counts the slow AllReduce workers let go for a while;
	// Unparked the workers launched on probation in their slots.
	Parked   int `json:"parked,omitempty"`
	Unparked int `json:"unparked,omitempty"`
	// ParkTrials counts the parks of lagging members on trial (among
	// Parked); ParkTrialsUndone those let back at once, the ring being
	// slower without them.
	ParkTrials       int `json:"park_trials,omitempty"`
	ParkTrialsUndone int `json:"park_trials_undone,omitempty"`
	// Replaced counts the slow workers stopped and relaunched away from
	// their nodes (--replace_slow_workers); AvoidanceDropped the
	// replacements relaunched anywhere after pending too long.
	Replaced         int `json:"replaced,omitempty"`
	AvoidanceDropped int `json:"avoidance_dropped,omitempty"`
}

// PSCounts counts parameter-server instances over the job's life.
type PSCounts struct {
	Launched   int `json:"launched"`
	Lost       int `json:"lost"`
	Relaunched int `json:"relaunched"`
	Preempted  int `json:"preempted"`
	// Restores are the checkpoints the PS processes alive at the end of
	// training had restored when they started (a PS relaunched after a
	// loss, or a warm start), by PS index; read from the PS before the
	// model is saved.
	Restores []PSRestore `json:"restores,omitempty"`
	// AppliedUnknown lists the shards re-initialized from a worker's copy
	// of their parameters (relaunched with no checkpoint): left out of the
	// ledger, as what they hold is not known.
	AppliedUnknown []int `json:"applied_unknown,omitempty"`
	// Reshards are the changes of the number of PS while training, in
	// order (see reshard.go).
	Reshards []PSReshard `json:"reshards,omitempty"`
}

// PSRestore is the checkpoint one PS restored: its version and directory.
type PSRestore struct {
	PS      int    `json:"ps"`
	Version int64  `json:"version"`
	Dir     string `json:"dir"`
}

// TaskCounts counts task outcomes.
type TaskCounts struct {
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	Requeued  int64 `json:"requeued"`
	// Resent counts tasks handed out again to a worker that never got the
	// first answer (lost with a master that crashed).
	Resent int64 `json:"resent"`
	// Reopened counts done tasks queued again because a PS shard lost some
	// of their minibatches (see records_requeued_for_rollback).
	Reopened int64 `json:"reopened"`
	// Backups counts backup copies of straggling tasks handed out,
	// BackupsWon those reported before the first copy, Superseded the
	// reports dropped because the other copy had won (--backup_tasks).
	Backups    int64 `json:"backups,omitempty"`
	BackupsWon int64 `json:"backups_won,omitempty"`
	Superseded int64 `json:"superseded,omitempty"`
}

// Summary returns the job's summary after duration d: its outcome so far
// (succeeded unless it failed), counters, per-epoch ledger, evaluations.
func (j *Job) Summary(d time.Duration) *Summary {
	s := j.summary
	s.DurationSeconds = math.Round(d.Seconds()*1000) / 1000
	s.Status = "succeeded"
	if j.jobErr != nil {
		s.Status, s.Error = "failed", j.jobErr.Error()
	}
	if !j.trainingStart.IsZero() && j.trainingEnd.After(j.trainingStart) {
		secs := j.trainingEnd.Sub(j.trainingStart).Seconds()
		s.TrainingSeconds = math.Round(secs*1000) / 1000
		s.RecordsPerSecond = math.Round(float64(j.disp.Progress().RecordsReported) / secs)
	}
	s.Epochs = nil
	for _, c := range j.disp.Coverage() {
		s.Epochs = append(s.Epochs, EpochSummary{
			Epoch:               c.Epoch,
			Records:             c.Records,
			RecordsTrained:      c.RecordsTrained,
			RecordsTrainedTwice: c.RecordsTrainedTwice,
			RecordsMissed:       c.RecordsMissed,
		})
	}
	s.Evaluations = append([]EvalRecord{}, j.summary.Evaluations...) // [] rather than null
	if p := j.passes[j.finalKey]; p != nil && p.metrics.records > 0 {
		r := p.result()
		s.Eval = &EvalSummary{Accuracy: r.Accuracy, AUC: r.AUC, Loss: r.Loss, Records: r.Records, ModelVersion: r.MaxVersionUsed}
	}
	s.WorkerRates = j.workerRates(true)
	s.PS.Restores = j.saved.Restores
	s.ModelPath, s.ModelVersion = j.saved.ModelPath, j.saved.ModelVersion
	if !j.cfg.training() {
		s.ModelVersion = j.cfg.InitVersion
	}
	if j.cfg.AllReduce && j.cfg.training() {
		// What the steps applied, exact to the minibatch, rather than
		// which tasks were reported.
		j.appliedEpochs(s.Epochs)
	}
	if j.checksApplied() && j.check.clean {
		// What the shards hold, exact to the minibatch.
		j.modelEpochs(s.Epochs)
		s.PS.AppliedUnknown = slices.Clone(j.check.unknown)
	}
	if j.cfg.AllReduce {
		s.Ring = &RingSummary{Versions: j.ring.version, MaxWorldSize: j.ring.maxWorldSize, WorldSize: len(j.ring.members),
			Checksums: slices.Clone(j.ring.checksums), Restores: j.ring.restores, StepsLost: j.ring.stepsLost, Broken: j.ring.broken,
			Checkpoint: j.ring.restore.Version, Recoveries: slices.Clone(j.ring.recoveries), Joins: slices.Clone(j.ring.joins),
			Allreduce: j.ring.collectiveTotal()}
	}
	if j.pred != nil && j.phase == Succeeded {
		s.Predictions = &PredictionSummary{Path: j.cfg.PredictionOutputs, Records: j.pred.total, CorruptRecords: j.pred.corrupt}
	}
	return &s
}

// Snapshot is the job's state for metrics and progress lines.
type Snapshot struct {
	Summary  Summary
	Progress task.Progress
	// Instances by state: running, or launched and not running yet.
	WorkersRunning, WorkersPending int
	PSRunning, PSPending           int
	// ModelVersion is the highest version training reports carried.
	ModelVersion int64
	// Over: the workers are done (saving, succeeded or failed).
	Over bool
	// RingVersion and WorldSize: AllReduce jobs (WorldSize 0 while the
	// ring forms).
	RingVersion int64
	WorldSize   int
	Allreduce   CollectiveStats
	// WorkerRates: the live workers' recent records/s and slow marks.
	WorkerRates []WorkerRate
}

// Snapshot returns the job's counters now.
func (j *Job) Snapshot() Snapshot {
	s := Snapshot{Summary: j.summary, Progress: j.disp.Progress(), ModelVersion: j.trainVersion, Over: j.phase.over(),
		RingVersion: j.ring.version, WorldSize: len(j.ring.members), Allreduce: j.ring.collectiveTotal(), WorkerRates: j.workerRates(false)}
	for _, w := range j.workers {
		if w.running {
			s.WorkersRunning++
		} else {
			s.WorkersPending++
		}
	}
	for _, p := range j.ps {
		if p.running {
			s.PSRunning++
		} else {
			s.PSPending++
		}
	}
	return s
}

// Coverage is the per-epoch exactly-once ledger so far.
func (j *Job) Coverage() []task.EpochCoverage { return j.disp.Coverage() }

// Rate returns the training records/s since the previous call and the
// recent mean loss (NaN before any), for progress lines.
func (j *Job) Rate(now time.Time) (recordsPerSecond, loss float64) {
	loss = math.NaN()
	if j.progress.haveLoss {
		loss = j.progress.loss
	}
	return j.progress.rate(now), loss
}

// progressMeter keeps the recent training rate and loss for progress lines.
type progressMeter struct {
	records     int64 // all records processed (trained or corrupt)
	lastRecords int64
	lastAt      time.Time
	loss        float64 // exponential moving average of task mean loss
	haveLoss    bool
	// lossSum and steps total every accepted training report's: a reader
	// differences them for an interval's exact mean loss.
	lossSum float64
	steps   int64
}

func (p *progressMeter) add(now time.Time, records int64, lossSum float64, steps int64) {
	p.records += records
	p.lossSum += lossSum
	p.steps += steps
	if steps > 0 {
		l := lossSum / float64(steps)
		if !p.haveLoss {
			p.loss, p.haveLoss = l, true
		} else {
			p.loss = 0.8*p.loss + 0.2*l
		}
	}
	if p.lastAt.IsZero() {
		p.lastAt = now
	}
}

// rate returns records/s since the previous call.
func (p *progressMeter) rate(now time.Time) float64 {
	dt := now.Sub(p.lastAt).Seconds()
	if p.lastAt.IsZero() || dt <= 0 {
		p.lastAt, p.lastRecords = now, p.records
		return 0
	}
	r := float64(p.records-p.lastRecords) / dt
	p.lastAt, p.lastRecords = now, p.records
	return r
}
