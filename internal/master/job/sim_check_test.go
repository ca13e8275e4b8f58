package job

import (
	"errors"
	"fmt"
	"slices"

	"elasticdl/internal/cluster"
)

// check verifies the invariants of a finished job.
func (s *sim) check() error {
	p := s.j.Snapshot().Progress
	if p.TasksTodo != 0 || p.TasksDoing != 0 {
		return fmt.Errorf("tasks left: %d todo, %d doing", p.TasksTodo, p.TasksDoing)
	}
	sum := s.j.Summary(0)
	if err := s.checkOccurred(sum); err != nil {
		return err
	}
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

// checkOccurred checks the occurrences' stream: in time order; per
// instance launched, then running at most once, then exited or let-go,
// and nothing after; a launch into a slot no live instance of its role
// holds, a relaunch keeping the slot with a new ID; the exits counted as
// lost are the summary's losses.
func (s *sim) checkOccurred(sum *Summary) error {
	type key struct {
		role cluster.Role
		id   int
	}
	last := map[key]string{} // the instance's latest kind
	slot := map[key]int{}
	held := map[cluster.Role]map[int]int{cluster.Worker: {}, cluster.PS: {}} // slot -> live ID
	lost := map[cluster.Role]int{}
	for i, o := range s.occurred {
		if i > 0 && o.At.Before(s.occurred[i-1].At) {
			return fmt.Errorf("occurrence %d (%+v) before the one before it", i, o)
		}
		k := key{o.Role, o.ID}
		bad := func(what string) error { return fmt.Errorf("occurrence %d %+v: %s (after %q)", i, o, what, last[k]) }
		switch o.Kind {
		case OccurLaunched:
			if last[k] != "" {
				return bad("launched again")
			}
			if id, ok := held[o.Role][o.Slot]; ok {
				return bad(fmt.Sprintf("slot held by %d", id))
			}
			held[o.Role][o.Slot], slot[k] = o.ID, o.Slot
		case OccurRunning:
			if last[k] != OccurLaunched {
				return bad("running out of turn")
			}
		case OccurExited, OccurLetGo:
			if last[k] != OccurLaunched && last[k] != OccurRunning {
				return bad("ended out of turn")
			}
			if o.Slot != slot[k] {
				return bad(fmt.Sprintf("slot changed from %d", slot[k]))
			}
			delete(held[o.Role], o.Slot)
			if o.Kind == OccurExited && o.Warning {
				lost[o.Role]++
			}
		default:
			continue
		}
		last[k] = o.Kind
	}
	if lost[cluster.Worker] != sum.Workers.Lost || lost[cluster.PS] != sum.PS.Lost {
		return fmt.Errorf("occurrences lost %d workers and %d PS, the summary %d and %d",
			lost[cluster.Worker], lost[cluster.PS], sum.Workers.Lost, sum.PS.Lost)
	}
	return nil
}
