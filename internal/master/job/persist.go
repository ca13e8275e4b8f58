package job

import (
	"elasticdl/internal/spans"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"elasticdl/data"
	"elasticdl/internal/master/policy"
	"elasticdl/internal/master/task"
)

// State is everything the core decides with, in a form to persist (JSON),
// so that a master that restarts (failover) rebuilds the same core
// (Resume) and the job goes on. What a Ready carried is not in it: the
// shell carries a Ready out before it acknowledges the requests behind it
// and before it persists the next State.
type State struct {
	Phase      Phase         `json:"phase"`
	Err        string        `json:"err,omitempty"`
	Dispatcher task.Snapshot `json:"dispatcher"`
	Policy     policy.State  `json:"policy"`

	Workers      []InstanceState `json:"workers,omitempty"`
	PS           []InstanceState `json:"ps,omitempty"`
	NextWorkerID int             `json:"next_worker_id"`
	// Target is the worker count the job aims at (0 in states written
	// before targets: NumWorkers); Draining the workers being let go,
	// Released those let go.
	Target int `json:"target,omitempty"`
	// TargetSource: who set Target (a let-go's cause).
	TargetSource string            `json:"target_source,omitempty"`
	Draining     map[int]time.Time `json:"draining,omitempty"`
	Released     []int             `json:"released,omitempty"`
	// Parked: the worker slots whose slow worker was parked (park.go),
	// by slot.
	Parked map[int]ParkState `json:"parked,omitempty"`
	// Reach: whether a worker has reached the master yet (reach.go).
	Reach    reachState `json:"reach,omitzero"`
	NextPSID int        `json:"next_ps_id"`
	// NumPS, PSLayout, PSTarget and Reshard: the PS the job has, their
	// layout, the number asked for, and a re-shard under way (0, 0, 0,
	// nil in states written before re-sharding: NumPS of the config).
	NumPS    int        `json:"num_ps,omitempty"`
	PSLayout int64      `json:"ps_layout,omitempty"`
	PSTarget int        `json:"ps_target,omitempty"`
	Reshard  *reshardOp `json:"reshard,omitempty"`
	// ResizeStart and ResizeCause: the change of size being timed.
	ResizeStart time.Time `json:"resize_start,omitzero"`
	ResizeCause string    `json:"resize_cause,omitempty"`

	EvalScheduled bool                   `json:"eval_scheduled"`
	EvalPending   map[int64]MetricsState `json:"eval_pending,omitempty"`
	Passes        map[int64]PassState    `json:"passes,omitempty"`
	FinalKey      int64                  `json:"final_key"`
	TrainVersion  int64                  `json:"train_version"`
	NextEvalAt    int64                  `json:"next_eval_at"`

	Prediction *PredictionState `json:"prediction,omitempty"`
	Ring       *RingState       `json:"ring,omitempty"`
	Applied    *AppliedState    `json:"applied,omitempty"`
	Check      *CheckState      `json:"check,omitempty"`
	// Corrupt: unreadable records of done training tasks, by task.
	Corrupt map[int64]int64 `json:"corrupt,omitempty"`

	UploadingSince  time.Time  `json:"uploading_since,omitzero"`
	LiveGen         int64      `json:"live_gen"`
	LiveSending     bool       `json:"live_sending"`
	Summary         Summary    `json:"summary"`
	SavedErr        string     `json:"saved_err,omitempty"`
	PendingSave     *Save      `json:"pending_save,omitempty"`
	Saved           Saved      `json:"saved"`
	Progress        MeterState `json:"progress"`
	TrainingStart   time.Time  `json:"training_start,omitzero"`
	TrainingEnd     time.Time  `json:"training_end,omitzero"`
	EpochsAnnounced int        `json:"epochs_announced"`
}

// ParkState is a parked slot: the worker parked last, the slot's parks
// so far, and when it is re-admitted (zero once it was).
type ParkState struct {
	Worker int       `json:"worker"`
	Times  int       `json:"times"`
	Until  time.Time `json:"until,omitzero"`
}

// InstanceState is one live instance.
type InstanceState struct {
	ID        int       `json:"id"`
	Index     int       `json:"index"`
	LastSeen  time.Time `json:"last_seen,omitzero"`
	Running   bool      `json:"running"`
	StartedAt time.Time `json:"started_at,omitzero"`
	Node      string    `json:"node,omitempty"`
	// Avoid, LaunchedAt: a replacement's avoided nodes and launch, so a
	// master that takes over still relaunches it anywhere if it stays
	// pending (replace.go).
	Avoid      []string  `json:"avoid,omitempty"`
	LaunchedAt time.Time `json:"launched_at,omitzero"`
}

// MetricsState is evaluation metrics being summed.
type MetricsState struct {
	Records int64                `json:"records"`
	Sums    map[string]float64   `json:"sums,omitempty"`
	Version int64                `json:"version"`
	Hist    *data.ScoreHistogram `json:"hist,omitempty"`
}

// PassState is one evaluation pass.
type PassState struct {
	Version  int64        `json:"version"`
	Final    bool         `json:"final"`
	Metrics  MetricsState `json:"metrics"`
	MinUsed  int64        `json:"min_used"`
	MaxUsed  int64        `json:"max_used"`
	HaveUsed bool         `json:"have_used"`
	// RecordsTrained: see EvalRecord.
	RecordsTrained int64 `json:"records_trained,omitempty"`
}

// PredictionState is a predict job's rows not released yet.
type PredictionState struct {
	Total      int64             `json:"total"`
	NumClasses int               `json:"num_classes"`
	Next       int64             `json:"next"`
	Corrupt    int64             `json:"corrupt"`
	Pending    []*PredictionRows `json:"pending,omitempty"`
}

// RingState is an AllReduce job's rendezvous.
type RingState struct {
	Version       int64                   `json:"version"`
	Members       []RingMember            `json:"members,omitempty"`
	Forming       bool                    `json:"forming"`
	Joined        map[int]string          `json:"joined,omitempty"`
	Deadline      time.Time               `json:"deadline,omitzero"`
	Addrs         map[int]string          `json:"addrs,omitempty"`
	FormedAt      time.Time               `json:"formed_at,omitzero"`
	ChangedAt     time.Time               `json:"changed_at,omitzero"`
	MaxWorldSize  int                     `json:"max_world_size"`
	Prev          []int                   `json:"prev,omitempty"`
	EverMember    []int                   `json:"ever_member,omitempty"`
	Checksums     []WorkerChecksum        `json:"checksums,omitempty"`
	Unsettled     map[int]time.Time       `json:"unsettled,omitempty"`
	Lineage       int64                   `json:"lineage"`
	Restore       RestorePoint            `json:"restore"`
	Restores      int                     `json:"restores"`
	StepsLost     int64                   `json:"steps_lost"`
	ChangeStart   time.Time               `json:"change_start,omitzero"`
	ChangeCause   string                  `json:"change_cause,omitempty"`
	ChangeVersion int64                   `json:"change_version"`
	Recoveries    []RingRecovery          `json:"recoveries,omitempty"`
	Joins         []RingJoin              `json:"joins,omitempty"`
	Committed     []int                   `json:"committed,omitempty"`
	Collective    map[int]CollectiveStats `json:"collective,omitempty"`
	Planned       bool                    `json:"planned,omitempty"`
	Leaving       map[int]bool            `json:"leaving,omitempty"`
	Broken        int                     `json:"broken,omitempty"`
	BrokenAt      int64                   `json:"broken_at,omitempty"`
}

// AppliedState is an AllReduce job's ledger of applied steps: per task,
// the record ranges and the step that applied each.
type AppliedState struct {
	// Steps are the steps reported, as [lo, hi) spans.
	Steps  [][2]int64           `json:"steps,omitempty"`
	Ranges map[int64][][3]int64 `json:"ranges,omitempty"` // task -> [start, end, step]
}

// MeterState is the progress meter.
type MeterState struct {
	Records     int64     `json:"records"`
	LastRecords int64     `json:"last_records"`
	LastAt      time.Time `json:"last_at,omitzero"`
	Loss        float64   `json:"loss"`
	HaveLoss    bool      `json:"have_loss"`
	// LossSum and Steps total the accepted training reports'.
	LossSum float64 `json:"loss_sum"`
	Steps   int64   `json:"steps"`
}

// State returns the core's state (see State).
func (j *Job) State() State {
	s := State{
		Phase: j.phase, Dispatcher: j.disp.Snapshot(), Policy: j.policy.State(),
		NextWorkerID: j.nextWorkerID, NextPSID: j.nextPSID, Target: j.target, TargetSource: j.targetSource,
		ResizeStart: j.resize.start, ResizeCause: j.resize.cause,
		EvalScheduled: j.evalScheduled, FinalKey: j.finalKey, TrainVersion: j.trainVersion, NextEvalAt: j.nextEvalAt,
		UploadingSince: j.uploadingSince, LiveGen: j.liveGen, LiveSending: j.liveSending,
		Summary: j.summary, Saved: j.saved, PendingSave: j.pendingSave,
		Progress: MeterState{Records: j.progress.records, LastRecords: j.progress.lastRecords, LastAt: j.progress.lastAt,
			Loss: j.progress.loss, HaveLoss: j.progress.haveLoss, LossSum: j.progress.lossSum, Steps: j.progress.steps},
		TrainingStart: j.trainingStart, TrainingEnd: j.trainingEnd, EpochsAnnounced: j.epochsAnnounced,
	}
	if j.jobErr != nil {
		s.Err = j.jobErr.Error()
	}
	if j.saved.Err != nil {
		s.SavedErr = j.saved.Err.Error()
		s.Saved.Err = nil
	}
	s.Workers, s.PS = instanceStates(j.workers), instanceStates(j.ps)
	s.NumPS, s.PSLayout, s.PSTarget = j.numPS, j.psLayout, j.psTarget
	if j.reshard != nil {
		op := *j.reshard
		s.Reshard = &op
	}
	s.Released = slices.Sorted(maps.Keys(j.released))
	s.Reach = j.reach
	if len(j.draining) > 0 {
		s.Draining = maps.Clone(j.draining)
	}
	if len(j.parked) > 0 {
		s.Parked = map[int]ParkState{}
		for slot, p := range j.parked {
			s.Parked[slot] = ParkState{Worker: p.worker, Times: p.times, Until: p.until}
		}
	}
	if len(j.evalPending) > 0 {
		s.EvalPending = map[int64]MetricsState{}
		for id, m := range j.evalPending {
			s.EvalPending[id] = metricsState(m)
		}
	}
	if len(j.passes) > 0 {
		s.Passes = map[int64]PassState{}
		for k, p := range j.passes {
			s.Passes[k] = PassState{Version: p.version, Final: p.final, Metrics: metricsState(p.metrics),
				MinUsed: p.minUsed, MaxUsed: p.maxUsed, HaveUsed: p.haveUsed, RecordsTrained: p.recordsTrained}
		}
	}
	if p := j.pred; p != nil {
		ps := &PredictionState{Total: p.total, NumClasses: p.numClasses, Next: p.next, Corrupt: p.corrupt}
		for _, start := range slices.Sorted(maps.Keys(p.pending)) {
			ps.Pending = append(ps.Pending, p.pending[start])
		}
		s.Prediction = ps
	}
	if j.checksApplied() {
		s.Check = j.check.state()
	}
	if len(j.applied.corrupt) > 0 {
		s.Corrupt = maps.Clone(j.applied.corrupt)
	}
	if j.cfg.AllReduce {
		s.Ring = j.ring.state()
		a := &AppliedState{Steps: j.applied.steps.Pairs(), Ranges: map[int64][][3]int64{}}
		for id, rs := range j.applied.ranges {
			for _, r := range rs {
				a.Ranges[id] = append(a.Ranges[id], [3]int64{r.start, r.end, r.step})
			}
		}
		s.Applied = a
	}
	return s
}

func instanceStates(m map[int]*instance) []InstanceState {
	var out []InstanceState
	for _, k := range slices.Sorted(maps.Keys(m)) {
		in := m[k]
		out = append(out, InstanceState{ID: in.id, Index: in.index, LastSeen: in.lastSeen, Running: in.running, StartedAt: in.startedAt, Node: in.node,
			Avoid: in.avoid, LaunchedAt: in.launchedAt})
	}
	return out
}

func metricsState(m evalMetrics) MetricsState {
	return MetricsState{Records: m.records, Sums: maps.Clone(m.sums), Version: m.version, Hist: m.hist}
}

func (m MetricsState) metrics() evalMetrics {
	return evalMetrics{records: m.Records, sums: maps.Clone(m.Sums), version: m.Version, hist: m.Hist}
}

func (r *rendezvous) state() *RingState {
	return &RingState{
		Version: r.version, Members: slices.Clone(r.members), Forming: r.forming, Joined: maps.Clone(r.joined),
		Deadline: r.deadline, Addrs: maps.Clone(r.addrs), FormedAt: r.formedAt, ChangedAt: r.changedAt,
		MaxWorldSize: r.maxWorldSize, Prev: slices.Sorted(maps.Keys(r.prev)), EverMember: slices.Sorted(maps.Keys(r.everMember)),
		Checksums: slices.Clone(r.checksums), Unsettled: maps.Clone(r.unsettled), Lineage: r.lineage, Restore: r.restore,
		Restores: r.restores, StepsLost: r.stepsLost, ChangeStart: r.changeStart, ChangeCause: r.changeCause,
		ChangeVersion: r.changeVersion, Recoveries: slices.Clone(r.recoveries), Joins: slices.Clone(r.joins),
		Committed: slices.Sorted(maps.Keys(r.committed)), Collective: maps.Clone(r.collective),
		Planned: r.planned, Leaving: maps.Clone(r.leaving), Broken: r.broken, BrokenAt: r.brokenAt,
	}
}

func set(ids []int) map[int]bool {
	m := map[int]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// Resume rebuilds a core from cfg (the job's, as when s was taken) and s.
func Resume(cfg Config, s State) (*Job, error) {
	j, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if j.disp, err = task.Restore(cfg.Tasks, s.Dispatcher); err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	j.policy = policy.Resume(cfg.Policy, s.Policy)
	j.phase = s.Phase
	if s.Err != "" {
		j.jobErr = errors.New(s.Err)
	}
	j.resumeInstances(s)
	j.resumeEvaluation(s)
	j.resumePrediction(s.Prediction)
	if r := s.Ring; r != nil {
		j.ring = r.rendezvous()
	}
	j.resumeLedger(s)
	if s.Check != nil {
		j.check = s.Check.check()
	}
	j.uploadingSince, j.liveGen, j.liveSending = s.UploadingSince, s.LiveGen, s.LiveSending
	j.summary, j.saved, j.pendingSave = s.Summary, s.Saved, s.PendingSave
	if s.SavedErr != "" {
		j.saved.Err = errors.New(s.SavedErr)
	}
	j.progress = progressMeter{records: s.Progress.Records, lastRecords: s.Progress.LastRecords, lastAt: s.Progress.LastAt,
		loss: s.Progress.Loss, haveLoss: s.Progress.HaveLoss, lossSum: s.Progress.LossSum, steps: s.Progress.Steps}
	j.trainingStart, j.trainingEnd, j.epochsAnnounced = s.TrainingStart, s.TrainingEnd, s.EpochsAnnounced
	j.ready = Ready{}
	return j, nil
}

// resumeInstances restores the workers and PS, their targets, and the
// changes of size under way.
func (j *Job) resumeInstances(s State) {
	j.workers, j.ps = instances(s.Workers, false), instances(s.PS, true)
	j.nextWorkerID, j.nextPSID = s.NextWorkerID, s.NextPSID
	if s.Target > 0 {
		j.target = s.Target
	}
	j.targetSource = s.TargetSource
	j.resize = resizeTiming{start: s.ResizeStart, cause: s.ResizeCause}
	if s.NumPS > 0 {
		j.numPS, j.psLayout, j.psTarget = s.NumPS, s.PSLayout, s.PSTarget
	}
	if s.Reshard != nil {
		op := *s.Reshard
		j.reshard = &op
	}
	j.released = set(s.Released)
	j.reach = s.Reach
	j.draining = map[int]time.Time{}
	for id, at := range s.Draining {
		if _, ok := j.workers[id]; ok {
			j.draining[id] = at
		}
	}
	for slot, p := range s.Parked {
		j.parked[slot] = &parkedSlot{worker: p.Worker, times: p.Times, until: p.Until}
	}
}

// resumeEvaluation restores the evaluation schedule and the passes whose
// metrics are being summed.
func (j *Job) resumeEvaluation(s State) {
	j.evalScheduled, j.finalKey, j.trainVersion, j.nextEvalAt = s.EvalScheduled, s.FinalKey, s.TrainVersion, s.NextEvalAt
	j.evalPending = map[int64]evalMetrics{}
	for id, m := range s.EvalPending {
		j.evalPending[id] = m.metrics()
	}
	j.passes = map[int64]*evalPass{}
	for k, p := range s.Passes {
		j.passes[k] = &evalPass{version: p.Version, final: p.Final, metrics: p.Metrics.metrics(), minUsed: p.MinUsed, maxUsed: p.MaxUsed,
			haveUsed: p.HaveUsed, recordsTrained: p.RecordsTrained}
	}
}

// resumePrediction restores a predict job's rows not released yet.
func (j *Job) resumePrediction(p *PredictionState) {
	if p == nil || j.pred == nil {
		return
	}
	j.pred.total, j.pred.numClasses, j.pred.next, j.pred.corrupt = p.Total, p.NumClasses, p.Next, p.Corrupt
	for _, rows := range p.Pending {
		j.pred.pending[rows.Start] = rows
	}
}

// rendezvous rebuilds an AllReduce job's rendezvous (the inverse of
// rendezvous.state).
func (r *RingState) rendezvous() rendezvous {
	rv := rendezvous{
		version: r.Version, members: slices.Clone(r.Members), forming: r.Forming, joined: orEmpty(r.Joined),
		deadline: r.Deadline, addrs: orEmpty(r.Addrs), formedAt: r.FormedAt, changedAt: r.ChangedAt,
		maxWorldSize: r.MaxWorldSize, prev: set(r.Prev), everMember: set(r.EverMember), checksums: slices.Clone(r.Checksums),
		unsettled: maps.Clone(r.Unsettled), lineage: r.Lineage, restore: r.Restore, restores: r.Restores, stepsLost: r.StepsLost,
		planned: r.Planned, leaving: maps.Clone(r.Leaving), broken: r.Broken, brokenAt: r.BrokenAt,
		ringTiming: ringTiming{changeStart: r.ChangeStart, changeCause: r.ChangeCause, changeVersion: r.ChangeVersion,
			recoveries: slices.Clone(r.Recoveries), joins: slices.Clone(r.Joins), committed: set(r.Committed),
			collective: maps.Clone(r.Collective)},
	}
	if rv.unsettled == nil {
		rv.unsettled = map[int]time.Time{}
	}
	if !r.Forming && r.Joined == nil {
		rv.joined = nil
	}
	return rv
}

// resumeLedger restores an AllReduce job's applied steps and the
// unreadable records of done training tasks.
func (j *Job) resumeLedger(s State) {
	if a := s.Applied; a != nil {
		for id, rs := range a.Ranges {
			for _, r := range rs {
				j.applied.ranges[id] = append(j.applied.ranges[id], appliedRange{r[0], r[1], r[2]})
			}
		}
		j.applied.steps = spans.FromPairs(a.Steps)
	}
	if s.Corrupt != nil {
		j.applied.corrupt = maps.Clone(s.Corrupt)
	}
}

// instances rebuilds a map of live instances: workers by ID, PS by shard
// index (byIndex).
func instances(states []InstanceState, byIndex bool) map[int]*instance {
	m := map[int]*instance{}
	for _, s := range states {
		key := s.ID
		if byIndex {
			key = s.Index
		}
		m[key] = &instance{id: s.ID, index: s.Index, lastSeen: s.LastSeen, running: s.Running, startedAt: s.StartedAt, node: s.Node,
			avoid: s.Avoid, launchedAt: s.LaunchedAt}
	}
	return m
}

func orEmpty(m map[int]string) map[int]string {
	if m == nil {
		return map[int]string{}
	}
	return maps.Clone(m)
}
