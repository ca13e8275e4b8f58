package job

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"elasticdl/internal/master/task"
	"elasticdl/internal/spans"
)

// Exactly once in the model, in PS mode. Every push names its minibatch
// (task, index) and every shard records the minibatches it applied, also
// ones without gradients for it, in its checkpoints too. A PS that restores
// an older checkpoint loses what was applied after it. So when the training
// tasks are done, the core asks every shard what it holds (CheckApplied);
// a done task with a minibatch some shard lacks goes back to the queue, its
// next worker pushes exactly those minibatches to exactly those shards, and
// the core asks again, until nothing is missing. The per-epoch ledger is
// then what the shards hold, counted in records.

// CheckApplied asks the shell for every PS shard's applied minibatches, to
// Step AppliedFound with Gen. Sync SGD: the PS first apply what they
// accumulated (a minibatch in the accumulator is not applied yet).
type CheckApplied struct {
	Gen int64
	// Reshard: the question of a re-shard (reshard.go), not the final
	// check; the answer carries it back.
	Reshard   bool
	FlushLive int
	FlushGen  int64
}

// AppliedFound is the outcome of CheckApplied: each shard's applied
// minibatches, by shard index, or why they could not be had.
type AppliedFound struct {
	Gen     int64
	Reshard bool
	Shards  []ShardMinibatches
	Err     error
}

func (AppliedFound) isEvent() {}

// ShardMinibatches is what one shard's model holds: by task, the applied
// minibatch indices as [start, end) pairs. Unknown: the shard was
// re-initialized from a worker's copy of its parameters (relaunched with
// no checkpoint to restore), which holds an unknown mix of minibatches.
type ShardMinibatches struct {
	Tasks   map[int64][][2]int32
	Unknown bool
}

// Bounds of the check: consecutive failures to ask (a PS down for longer
// than its relaunches take), and rounds that requeue something (each needs
// a PS to have lost updates again).
const (
	maxCheckFailures = 20
	checkRetry       = 3 * time.Second
	maxCheckRounds   = 50
)

// appliedCheck is the state of the check.
type appliedCheck struct {
	gen      int64
	pending  bool      // asked; no answer yet
	retryAt  time.Time // after a failure, not before
	failures int       // consecutive
	rounds   int       // checks that requeued something
	clean    bool      // the last check found nothing missing
	// epochs is the ledger the clean check found, by epoch.
	epochs map[int]modelCounts
	// unknown lists the shards whose history is unknown (left out).
	unknown []int
}

// modelCounts are one epoch's records in the model: trained (in a
// minibatch every shard holds, or unreadable) and missing.
type modelCounts struct {
	Trained int64 `json:"trained"`
	Missing int64 `json:"missing"`
}

// checksApplied: the job trains on PS whose pushes name their minibatches.
func (j *Job) checksApplied() bool {
	return j.cfg.CheckApplied && j.cfg.training() && !j.cfg.AllReduce && j.cfg.NumPS > 0
}

// checkOpen: training is done except for the check, so workers wait
// rather than exit (a check may hand them tasks again).
func (j *Job) checkOpen() bool {
	return j.checksApplied() && !j.check.clean && !j.phase.over()
}

// psRelaunched: a PS relaunched after a clean check (during the final
// evaluation) may restore an older checkpoint: check again before saving.
func (j *Job) psRelaunched() {
	if j.checksApplied() && j.check.clean && !j.phase.over() {
		j.check.clean, j.check.epochs = false, nil
	}
}

// askApplied asks for the shards' applied minibatches, once at a time.
func (j *Job) askApplied(now time.Time) {
	c := &j.check
	if c.pending || now.Before(c.retryAt) {
		return
	}
	c.pending = true
	c.gen++
	ask := &CheckApplied{Gen: c.gen}
	if j.cfg.SyncSGD {
		j.liveGen++
		ask.FlushLive, ask.FlushGen = j.runningWorkers(), j.liveGen
	}
	j.ready.CheckApplied = ask
}

func (j *Job) appliedFound(now time.Time, ev AppliedFound) {
	c := &j.check
	if !c.pending || ev.Gen != c.gen || j.phase.over() {
		return // an answer to an older question
	}
	c.pending = false
	if ev.Err != nil {
		c.failures++
		if c.failures >= maxCheckFailures {
			j.fail(fmt.Errorf("cannot learn which minibatches the PS hold (%d tries): %w", c.failures, ev.Err))
			return
		}
		c.retryAt = now.Add(checkRetry)
		j.log.Warn("asking the PS which minibatches they hold; trying again", "tries", c.failures, "err", ev.Err)
		return
	}
	c.failures = 0
	if len(ev.Shards) != j.numPS {
		j.fail(fmt.Errorf("applied minibatches of %d PS shards, the job has %d", len(ev.Shards), j.numPS))
		return
	}
	var known []ShardMinibatches
	c.unknown = nil
	for i, sh := range ev.Shards {
		if sh.Unknown {
			c.unknown = append(c.unknown, i)
			continue
		}
		known = append(known, sh)
	}
	epochs := map[int]modelCounts{}
	var reopen []int64
	var missing int64
	j.disp.DoneTraining(func(t task.Task) {
		corrupt := j.applied.corrupt[t.ID]
		lacked := j.missingRecords(t, corrupt, known)
		ec := epochs[t.Epoch]
		ec.Trained += t.Records() - lacked
		ec.Missing += lacked
		epochs[t.Epoch] = ec
		if lacked > 0 {
			reopen = append(reopen, t.ID)
			missing += lacked
		}
	})
	if len(reopen) == 0 {
		c.clean, c.epochs = true, epochs
		if len(c.unknown) > 0 {
			j.noticeOccur(true, "AppliedUnknown", fmt.Sprintf("PS shards %v were re-initialized from a worker's parameters (no checkpoint to restore): whether they hold every minibatch exactly once is not known", c.unknown))
		}
		j.log.Info("every PS shard holds every trained minibatch", "rounds", c.rounds)
		j.advance(now)
		return
	}
	c.rounds++
	if c.rounds > maxCheckRounds {
		j.fail(fmt.Errorf("minibatches still missing from the PS after %d rounds of training them again (%d records)", maxCheckRounds, missing))
		return
	}
	for _, id := range reopen {
		if err := j.disp.Reopen(id); err != nil {
			j.fail(fmt.Errorf("requeue a task the PS lost: %w", err))
			return
		}
	}
	if j.phase == Evaluating {
		// Lost during the final evaluation, which is not run again: it
		// saw the model without these minibatches.
		j.setPhase(Training)
	}
	j.summary.RecordsRequeuedForRollback += missing
	j.summary.Tasks.Reopened += int64(len(reopen))
	j.noticeOccur(true, "RolledBackRecordsRequeued", fmt.Sprintf("%d records of %d tasks are missing from a PS shard (it restored an older checkpoint): training them again", missing, len(reopen)))
}

// missingRecords counts the records of done task t (corrupt of them
// unreadable) in a minibatch some shard in shards lacks. Minibatches are
// the task's readable records in order, cut every MinibatchSize.
func (j *Job) missingRecords(t task.Task, corrupt int64, shards []ShardMinibatches) int64 {
	readable := t.Records() - corrupt
	b := int64(j.cfg.MinibatchSize)
	if readable <= 0 || b <= 0 || len(shards) == 0 {
		return 0
	}
	n := int32((readable + b - 1) / b)
	var lacked int64
	sets := make([]spans.Set[int32], len(shards))
	for i, sh := range shards {
		sets[i] = spans.FromPairs(sh.Tasks[t.ID])
	}
	for m := int32(0); m < n; m++ {
		for i := range sets {
			if !sets[i].Has(m) {
				lacked += min(b, readable-int64(m)*b)
				break
			}
		}
	}
	return lacked
}

// modelEpochs replaces the per-epoch ledger by what the clean check found
// in the model: records in a minibatch every shard holds (or unreadable)
// were trained, exactly once (a shard applies a minibatch at most once).
func (j *Job) modelEpochs(epochs []EpochSummary) {
	for i := range epochs {
		e := &epochs[i]
		c := j.check.epochs[e.Epoch]
		e.RecordsTrained, e.RecordsTrainedTwice = c.Trained, 0
		e.RecordsMissed = e.Records - c.Trained
	}
}

// CheckState is the persisted appliedCheck.
type CheckState struct {
	Gen      int64               `json:"gen"`
	Pending  bool                `json:"pending,omitempty"`
	Failures int                 `json:"failures,omitempty"`
	Rounds   int                 `json:"rounds,omitempty"`
	Clean    bool                `json:"clean,omitempty"`
	Epochs   map[int]modelCounts `json:"epochs,omitempty"`
	Unknown  []int               `json:"unknown,omitempty"`
}

func (c *appliedCheck) state() *CheckState {
	return &CheckState{Gen: c.gen, Pending: c.pending, Failures: c.failures, Rounds: c.rounds, Clean: c.clean,
		Epochs: maps.Clone(c.epochs), Unknown: slices.Clone(c.unknown)}
}

func (s *CheckState) check() appliedCheck {
	return appliedCheck{gen: s.Gen, pending: s.Pending, failures: s.Failures, rounds: s.Rounds, clean: s.Clean,
		epochs: maps.Clone(s.Epochs), unknown: slices.Clone(s.Unknown)}
}
