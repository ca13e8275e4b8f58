package job

import (
	"time"

	"elasticdl/internal/cluster"
)

// Event is an input of Step.
type Event interface{ isEvent() }

// Start launches the job's parameter servers and workers.
type Start struct {
	// AdmissionWait is how long the job waited to be admitted whole
	// before it started (--gang); 0 for an elastic job.
	AdmissionWait time.Duration
}

// Tick applies timeouts: held tasks, silent workers.
type Tick struct{}

// Fail ends the job with Err (the first error wins): the context was
// cancelled, the backend failed, the predictions could not be written.
type Fail struct{ Err error }

// Saved is the outcome of Ready.Save: where the model went, or why saving
// (or committing the predictions) failed.
type Saved struct {
	Err          error
	ModelPath    string
	ModelVersion int64
	// Restores are the checkpoints the PS had restored at start.
	Restores []PSRestore
}

// Instance is a backend event about one of the job's instances.
type Instance struct{ cluster.Event }

// LaunchFailed says that carrying out Launch failed.
type LaunchFailed struct {
	Launch Launch
	Err    error
}

func (Start) isEvent()        {}
func (Tick) isEvent()         {}
func (Fail) isEvent()         {}
func (Saved) isEvent()        {}
func (Instance) isEvent()     {}
func (LaunchFailed) isEvent() {}

// Launch asks the shell to start an instance.
type Launch struct {
	Role      cluster.Role
	ID, Index int
	// LiveWorkers is a PS's starting count of live workers (sync SGD).
	LiveWorkers int
	// Relaunch names the loss this launch replaces ("" at start), for the
	// error should the launch fail.
	Relaunch string
	// Shards is a PS's number of shards (its layout's).
	Shards int
	// AvoidNodes: nodes a worker must not run on (its slot was slow
	// there: replace.go).
	AvoidNodes []string
}

// StopInstance asks the shell to stop an instance (its exit is then
// expected, and ignored).
type StopInstance struct {
	Role cluster.Role
	ID   int
}

// LiveWorkers tells every PS how many workers are live (sync SGD); Gen
// orders the counts, Flush makes the PS apply what they accumulated.
type LiveWorkers struct {
	Live  int
	Gen   int64
	Flush bool
}

// Notice is what a user would want to see in the cluster's own tools
// (Kubernetes Events): relaunches, preemptions, epoch ends.
type Notice struct {
	Warning         bool
	Reason, Message string
}

// Save asks the shell to save the trained model (Model) or commit the
// predictions (Predictions, all Records of them), then to Step Saved.
// Before saving a sync-SGD model, the PS apply what they accumulated:
// FlushLive and FlushGen are the count and generation to flush with.
type Save struct {
	Model, Predictions bool
	// Uploaded: an AllReduce job's model is the one this worker uploaded.
	Uploaded  int
	Records   int64
	FlushLive int
	FlushGen  int64
}

// Ready is what the shell must carry out, in order of the fields within
// each list.
type Ready struct {
	Launch         []Launch
	Stop           []StopInstance
	LiveWorkers    []LiveWorkers
	Notices        []Notice
	PredictionRows []*PredictionRows
	// CheckApplied: ask the PS which minibatches they hold (pscheck.go).
	CheckApplied *CheckApplied
	// Reshard: move the PS to a new layout and commit it (reshard.go);
	// Step ReshardDone with the outcome. Resharded: re-shards completed
	// (for the metrics).
	Reshard   *Reshard
	Resharded []PSReshard
	// Save is set once, when all tasks are done (train and predict jobs).
	Save *Save
	// Ended is set once, when the workers are done (phase Saving or
	// later): the shell's event loop may stop.
	Ended bool
	// RingRecovered: AllReduce membership changes that just ended, each
	// with the time from the change to the next committed step (metrics).
	RingRecovered []time.Duration
	// Resized: changes of the job's size that just ended (resize.go).
	Resized []ResizeDone
	// Losses: the mean loss of each training task just accepted, and
	// Evaluated: the evaluation passes just completed (TensorBoard's
	// series, --tensorboard_log_dir).
	Losses    []LossPoint
	Evaluated []EvalRecord
	// Occurred: what happened, structured, in order (occur.go).
	Occurred []Occurrence
}

// LossPoint is a training task's mean loss, at the highest model version
// training reports have carried once it is counted: the x-axis the
// evaluations share (EvalRecord.Version), never going back.
type LossPoint struct {
	Version int64
	Loss    float64
}
