package job

import (
	"time"

	"elasticdl/internal/cluster"
)

// Occurrence kinds (Occurrence.Kind).
const (
	OccurPhase         = "phase"
	OccurLaunched      = "launched"
	OccurRunning       = "running"
	OccurExited        = "exited"
	OccurLetGo         = "let-go"
	OccurTarget        = "target"
	OccurRingReform    = "ring-reform"
	OccurRingFormed    = "ring-formed"
	OccurRingRecovered = "ring-recovered"
	OccurReshard       = "reshard"
	OccurEpoch         = "epoch"
	OccurEval          = "eval"
	OccurResumed       = "resumed"
	OccurNotice        = "notice"
)

// Launch causes (Occurrence.Cause of a launched instance); an exit's cause
// is its cluster.ExitReason, or causeSilent, or causeLaunchFailed.
const (
	causeStart        = "start"
	causeRelaunch     = "relaunch"
	causeScaleUp      = "scale-up"
	causeSilent       = "silent"
	causeLaunchFailed = "launch-failed"
	causeReshard      = "reshard"
	causeUnpark       = "unpark"
)

// maxDetail bounds an Occurrence's Detail: a history keeps many.
const maxDetail = 200

// Occurrence is one structured thing that happened to the job, raised
// where the core decided it, in order (Ready.Occurred): the dashboard's
// history and timelines. Notices stay the free text of Kubernetes Events.
//
// Slot is an instance's index: a worker's slot (0..NumWorkers-1, the
// lowest free one at scale-up) or a PS's shard index. A relaunch keeps
// the slot and gets a new ID; IDs are never reused. Per instance, the
// stream is launched, then running (at most once: the backend or its
// first request said so), then at most one of exited and let-go.
type Occurrence struct {
	// At is the time of the Step that raised it.
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Role, ID, Slot: the instance (launched, running, exited, let-go);
	// Role also says whose target changed (target).
	Role cluster.Role `json:"role,omitempty"`
	ID   int          `json:"id"`
	Slot int          `json:"slot"`
	// Cause: launched start|relaunch|scale-up; exited killed|preempted|
	// oom-killed|deleted|failed|completed|silent|launch-failed; let-go
	// the target's source (reshard for a PS); target its source;
	// ring-reform and ring-recovered why the ring changed; phase the new
	// phase; eval final|periodic.
	Cause string `json:"cause,omitempty"`
	// Reason: the relaunch policy's decision (exited, let-go), or a
	// Notice's reason (notice).
	Reason string `json:"reason,omitempty"`
	// Detail: human text (at most maxDetail bytes): an exit's message.
	Detail string `json:"detail,omitempty"`
	// Warning: an exited instance that counts as lost (Summary's
	// Workers.Lost, PS.Lost), a failed phase, a warning notice.
	Warning  bool `json:"warning,omitempty"`
	ExitCode int  `json:"exit_code,omitempty"`
	// Version: the ring version (ring-*), PS layout (reshard), model
	// version (eval, epoch).
	Version int64 `json:"version,omitempty"`
	// From, To: targets (target), PS counts (reshard), world sizes
	// (ring-formed: the last ring's, the new one's), phases (phase, as
	// Phase numbers); To is the epoch of an epoch.
	From int `json:"from,omitempty"`
	To   int `json:"to,omitempty"`
	// Seconds: ring-recovered, reshard.
	Seconds float64 `json:"seconds,omitempty"`
}

// occur raises o at the Step's time.
func (j *Job) occur(o Occurrence) {
	o.At = j.stepAt
	if len(o.Detail) > maxDetail {
		o.Detail = o.Detail[:maxDetail]
	}
	j.ready.Occurred = append(j.ready.Occurred, o)
}

// occurInstance raises kind for instance in of role r.
func (j *Job) occurInstance(kind string, r cluster.Role, in *instance, cause string) {
	j.occur(Occurrence{Kind: kind, Role: r, ID: in.id, Slot: in.index, Cause: cause})
}

// occurExit raises the end of instance in: let-go when the job let it go
// (cause OccurLetGo), otherwise exited with its cause ("": the event's
// reason), the policy's reason, and whether it counted as lost.
func (j *Job) occurExit(ev cluster.Event, in *instance, cause string, lost bool, reason string) {
	o := Occurrence{Kind: OccurExited, Role: ev.Role, ID: in.id, Slot: in.index, Cause: cause, Reason: reason,
		Detail: ev.Message, Warning: lost, ExitCode: ev.ExitCode}
	if cause == "" {
		o.Cause = ev.Reason.String()
	}
	if cause == OccurLetGo {
		o.Kind, o.Cause, o.ExitCode = OccurLetGo, j.targetSource, 0
		if j.beingParked(in.id) {
			o.Cause = causePark
		}
	}
	j.occur(o)
}

// noticeOccur raises a Notice that no structured occurrence covers, and
// the same as a notice occurrence.
func (j *Job) noticeOccur(warning bool, reason, msg string) {
	j.notice(warning, reason, msg)
	j.occur(Occurrence{Kind: OccurNotice, Reason: reason, Detail: msg, Warning: warning})
}
