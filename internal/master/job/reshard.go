package job

import (
	"fmt"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

// Changing the number of PS while the job trains (a live re-shard). The
// PS move parameters, optimizer slots, embedding rows and their applied
// minibatches among themselves (package ps, reshard.go); the core decides
// when that is safe and who routes where:
//
//  1. quiescing: no new training task goes out, and workers finish what
//     they hold. Tasks taken back (a lost worker's, a failed attempt's)
//     still go out: the shards may hold part of them, and a shard of the
//     new layout keeps a minibatch only if every old shard held it.
//  2. checking: with nothing held and nothing partial waiting, the core
//     asks every shard what it holds (as the end-of-training check does);
//     a done task some shard lacks (it restored an older checkpoint) is
//     reopened and trained again first. Then every shard holds the same
//     minibatches: done tasks wholly, the rest not at all.
//  3. launching: growing, the new shards start (empty) and the core waits
//     until they run.
//  4. moving: the shell stages the new layout on every shard of it, then
//     commits them (Ready.Reshard → ReshardDone). On success the job has
//     the new number of PS and a new layout number; the shards no longer
//     in it stop; workers get the layout with their next task and route by
//     it. A failure to stage changes nothing and is retried; one after a
//     shard committed cannot be undone and fails the job.
//
// Evaluation tasks wait too: a pull across the switch could mix layouts.
// Sync SGD is refused (its accumulator holds pushes not yet applied), and
// so are AllReduce jobs (no PS).

// SetPSTarget asks the job to run PS parameter servers.
type SetPSTarget struct {
	PS int
	// Source says who asked, for the log and the Event.
	Source string
}

// ReshardDone is the outcome of a Ready.Reshard. Committed: some shard
// had switched when it failed (it cannot be undone).
type ReshardDone struct {
	Layout    int64
	Err       error
	Committed bool
}

func (SetPSTarget) isEvent() {}
func (ReshardDone) isEvent() {}

// Reshard asks the shell to move the shards' state from the current
// layout (From shards) to layout Layout of To shards, and commit it.
type Reshard struct {
	Layout   int64
	From, To int
}

// MaxPS bounds a PS target: each shard is a process and a port.
const MaxPS = 64

type reshardPhase int

const (
	reshardQuiescing reshardPhase = iota
	reshardChecking
	reshardLaunching
	reshardMoving
)

// maxReshardFailures bounds the tries to stage a layout before the
// re-shard is given up (the old layout goes on serving).
const maxReshardFailures = 10

// reshardOp is a re-shard under way.
type reshardOp struct {
	To       int          `json:"to"`
	Layout   int64        `json:"layout"`
	Phase    reshardPhase `json:"phase"`
	Asked    time.Time    `json:"asked"`  // the target arrived
	Paused   time.Time    `json:"paused"` // training stopped handing out tasks
	Failures int          `json:"failures,omitempty"`
	RetryAt  time.Time    `json:"retry_at,omitzero"`
	// CheckGen numbers the checks of applied minibatches it asked for;
	// CheckPending: one is out.
	CheckGen     int64 `json:"check_gen"`
	CheckPending bool  `json:"check_pending,omitempty"`
	// Sent: the Reshard is with the shell.
	Sent bool `json:"sent,omitempty"`
}

// PSReshard is one completed re-shard, for the summary.
type PSReshard struct {
	Layout int64     `json:"layout"`
	From   int       `json:"from"`
	To     int       `json:"to"`
	At     time.Time `json:"at"`
	// Seconds from the target to the new layout serving; PausedSeconds of
	// them without training tasks handed out.
	Seconds       float64 `json:"seconds"`
	PausedSeconds float64 `json:"paused_seconds"`
}

// NumPS is the job's number of PS now, and the layout they serve (0 until
// the first re-shard).
func (j *Job) NumPS() (shards int, layout int64) { return j.numPS, j.psLayout }

func (j *Job) setPSTarget(now time.Time, ev SetPSTarget) {
	switch {
	case ev.PS == j.psTarget:
		return
	case j.cfg.AllReduce || j.cfg.NumPS == 0:
		j.noticeOccur(true, "PSTargetInvalid", fmt.Sprintf("a PS target (%d, by %s) for a job without PS: ignored", ev.PS, ev.Source))
		return
	case j.cfg.SyncSGD:
		j.noticeOccur(true, "PSTargetInvalid", fmt.Sprintf("a PS target (%d, by %s) for a sync-SGD job: re-sharding it is not supported; ignored", ev.PS, ev.Source))
		return
	case ev.PS < 1 || ev.PS > MaxPS:
		j.noticeOccur(true, "PSTargetInvalid", fmt.Sprintf("a PS target of %d (by %s): want 1..%d; ignored", ev.PS, ev.Source, MaxPS))
		return
	}
	j.log.Info("PS target changed", "from", j.psTarget, "to", ev.PS, "source", ev.Source)
	msg := fmt.Sprintf("PS target %d → %d (asked by %s)", j.psTarget, ev.PS, ev.Source)
	j.notice(false, "PSTargetChanged", msg)
	j.occur(Occurrence{Kind: OccurTarget, Role: cluster.PS, Cause: ev.Source, From: j.psTarget, To: ev.PS, Detail: msg})
	j.psTarget = ev.PS
	j.advanceReshard(now)
}

// resharding: training tasks wait for a re-shard.
func (j *Job) resharding() bool { return j.reshard != nil }

// reshardGet is what a worker asking for work gets while the job
// re-shards: a training task taken back (partly in the shards, maybe), or
// WAIT.
func (j *Job) reshardGet(now time.Time, worker int) task.Assignment {
	if j.reshard.Phase == reshardQuiescing {
		if a := j.disp.GetTakenBack(worker, now); a.Kind == task.KindTask {
			return a
		}
	}
	return task.Assignment{Kind: task.KindWait}
}

// advanceReshard moves a re-shard on as far as it can; it starts one when
// the target differs from the PS the job has.
func (j *Job) advanceReshard(now time.Time) {
	if j.phase.over() || j.phase == Starting {
		return
	}
	op := j.reshard
	if op != nil && op.Phase <= reshardChecking && j.disp.Finished() && !op.CheckPending {
		// Training ended before the layout moved: nothing left to gain.
		j.log.Info("re-shard dropped: training is done", "from", j.numPS, "to", op.To)
		j.reshard, j.psTarget = nil, j.numPS
		j.advance(now)
		return
	}
	if op == nil {
		if j.psTarget == j.numPS || j.phase >= Saving || j.disp.Finished() {
			return
		}
		op = &reshardOp{To: j.psTarget, Layout: j.psLayout + 1, Asked: now, Paused: now}
		j.reshard = op
		j.log.Info("re-sharding: pausing training tasks", "from", j.numPS, "to", op.To, "layout", op.Layout)
	}
	switch op.Phase {
	case reshardQuiescing:
		if j.disp.Holding() > 0 || j.disp.TakenBackWaiting() {
			return
		}
		op.Phase = reshardChecking
		fallthrough
	case reshardChecking:
		if op.CheckPending || now.Before(op.RetryAt) {
			return
		}
		op.CheckPending = true
		op.CheckGen++
		j.ready.CheckApplied = &CheckApplied{Gen: op.CheckGen, Reshard: true}
	case reshardLaunching:
		for i := j.numPS; i < op.To; i++ {
			if in := j.ps[i]; in == nil || !in.running {
				return
			}
		}
		op.Phase = reshardMoving
		fallthrough
	case reshardMoving:
		if op.Sent || now.Before(op.RetryAt) {
			return
		}
		op.Sent = true
		j.ready.Reshard = &Reshard{Layout: op.Layout, From: j.numPS, To: op.To}
	}
}

// reshardChecked takes the shards' applied minibatches: with a done task
// some shard lacks, that task trains again first (quiescing); otherwise
// the layout moves.
func (j *Job) reshardChecked(now time.Time, ev AppliedFound) {
	op := j.reshard
	if op == nil || op.Phase != reshardChecking || !op.CheckPending || ev.Gen != op.CheckGen {
		return // an answer to an older question
	}
	op.CheckPending = false
	if ev.Err == nil && len(ev.Shards) != j.numPS {
		ev.Err = fmt.Errorf("applied minibatches of %d PS shards, the job has %d", len(ev.Shards), j.numPS)
	}
	if ev.Err != nil {
		op.RetryAt = now.Add(checkRetry)
		j.log.Warn("re-sharding: asking the PS which minibatches they hold; trying again", "err", ev.Err)
		return
	}
	var known []ShardMinibatches
	for _, sh := range ev.Shards {
		if !sh.Unknown {
			known = append(known, sh)
		}
	}
	var reopen []int64
	var missing int64
	j.disp.DoneTraining(func(t task.Task) {
		if lacked := j.missingRecords(t, j.applied.corrupt[t.ID], known); lacked > 0 {
			reopen = append(reopen, t.ID)
			missing += lacked
		}
	})
	if len(reopen) > 0 {
		for _, id := range reopen {
			if err := j.disp.Reopen(id); err != nil {
				j.fail(fmt.Errorf("requeue a task the PS lost: %w", err))
				return
			}
		}
		j.summary.RecordsRequeuedForRollback += missing
		j.summary.Tasks.Reopened += int64(len(reopen))
		j.noticeOccur(true, "RolledBackRecordsRequeued", fmt.Sprintf("%d records of %d tasks are missing from a PS shard: training them again before re-sharding", missing, len(reopen)))
		op.Phase = reshardQuiescing
		return
	}
	op.Phase = reshardLaunching
	for i := j.numPS; i < op.To; i++ {
		if j.ps[i] == nil {
			j.launchPS(now, i, causeScaleUp, "")
		}
	}
	j.log.Info("re-sharding: the shards agree on what they hold", "from", j.numPS, "to", op.To)
	j.advanceReshard(now)
}

func (j *Job) reshardDone(now time.Time, ev ReshardDone) {
	op := j.reshard
	if op == nil || op.Phase != reshardMoving || !op.Sent || ev.Layout != op.Layout {
		return
	}
	op.Sent = false
	if ev.Err != nil {
		if ev.Committed {
			j.fail(fmt.Errorf("re-sharding %d → %d PS failed after some shards switched: %w", j.numPS, op.To, ev.Err))
			return
		}
		op.Failures++
		if op.Failures >= maxReshardFailures {
			j.noticeOccur(true, "ReshardFailed", fmt.Sprintf("re-sharding %d → %d PS failed %d times (%v): giving up; training goes on with %d", j.numPS, op.To, op.Failures, ev.Err, j.numPS))
			for i := j.numPS; i < op.To; i++ {
				j.stopPS(i)
			}
			j.psTarget = j.numPS
			j.reshard = nil
			return
		}
		op.RetryAt = now.Add(checkRetry)
		j.log.Warn("re-sharding failed; trying again", "from", j.numPS, "to", op.To, "tries", op.Failures, "err", ev.Err)
		return
	}
	from := j.numPS
	j.numPS, j.psLayout = op.To, op.Layout
	for i := op.To; i < from; i++ {
		j.stopPS(i)
	}
	r := PSReshard{Layout: op.Layout, From: from, To: op.To, At: op.Asked.UTC(), Seconds: now.Sub(op.Asked).Seconds(), PausedSeconds: now.Sub(op.Paused).Seconds()}
	j.summary.PS.Reshards = append(j.summary.PS.Reshards, r)
	j.ready.Resharded = append(j.ready.Resharded, r)
	j.reshard = nil
	j.log.Info("re-sharded", "from", from, "to", op.To, "layout", op.Layout, "took", now.Sub(op.Asked), "paused", now.Sub(op.Paused))
	msg := fmt.Sprintf("%d → %d PS (layout %d) in %.1f s, %.1f s of it without new tasks", from, op.To, op.Layout, r.Seconds, r.PausedSeconds)
	j.notice(false, "PSResharded", msg)
	j.occur(Occurrence{Kind: OccurReshard, Version: op.Layout, From: from, To: op.To, Seconds: r.Seconds, Detail: msg})
	j.advanceReshard(now) // a newer target
	j.advance(now)        // training may have ended meanwhile
}

// stopPS stops shard index at the job's wish (re-sharded away): not a
// loss, not relaunched.
func (j *Job) stopPS(index int) {
	in := j.ps[index]
	if in == nil {
		return
	}
	delete(j.ps, index)
	j.ready.Stop = append(j.ready.Stop, StopInstance{Role: cluster.PS, ID: in.id})
	j.occurInstance(OccurLetGo, cluster.PS, in, causeReshard)
}

// psShards is the number of shards a PS launched as shard index belongs
// to: a new shard of a growing re-shard is of the new layout.
func (j *Job) psShards(index int) int {
	if j.reshard != nil && index >= j.numPS {
		return j.reshard.To
	}
	return j.numPS
}
