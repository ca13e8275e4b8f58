package job

import "time"

// How long the job takes to train at its new size after the size it
// should have changes: a worker lost, or a new target. The figure the
// elasticity metrics are about (time-to-recover).

// Resize is one change of size, timed: from the first loss or target
// change (those that follow before the job trains at its size again count
// as one) to the first training report with every worker the job aims for
// running and none leaving.
type Resize struct {
	Cause   string    `json:"cause"` // "lost" or "target"
	At      time.Time `json:"at"`
	Seconds float64   `json:"seconds"`
}

// ResizeDone is a resize that just ended (for the metrics).
type ResizeDone struct {
	Cause    string
	Duration time.Duration
}

// maxResizes bounds the summary's list: a long job on a busy cluster
// resizes often, and the metrics keep the distribution.
const maxResizes = 200

// resizeTiming is the open resize, if any.
type resizeTiming struct {
	start time.Time // zero: the job trains at its size
	cause string
}

// noteResize starts timing a resize unless one is timed already. Before
// training starts there is nothing to recover.
func (j *Job) noteResize(now time.Time, cause string) {
	if j.resize.start.IsZero() && !j.trainingStart.IsZero() && !j.phase.over() {
		j.resize = resizeTiming{start: now, cause: cause}
	}
}

// atSize: every worker the job aims for runs, none is leaving.
func (j *Job) atSize() bool {
	if len(j.draining) > 0 || len(j.workers) != j.target {
		return false
	}
	for _, w := range j.workers {
		if !w.running {
			return false
		}
	}
	return true
}

// trainedAt ends the open resize on a training report at the job's size.
func (j *Job) trainedAt(now time.Time) {
	if j.resize.start.IsZero() || !j.atSize() {
		return
	}
	d := now.Sub(j.resize.start)
	s := &j.summary
	s.Resizes = append(s.Resizes, Resize{Cause: j.resize.cause, At: j.resize.start.UTC(), Seconds: d.Seconds()})
	if len(s.Resizes) > maxResizes {
		s.Resizes = s.Resizes[len(s.Resizes)-maxResizes:]
	}
	j.ready.Resized = append(j.ready.Resized, ResizeDone{Cause: j.resize.cause, Duration: d})
	j.resize = resizeTiming{}
}
