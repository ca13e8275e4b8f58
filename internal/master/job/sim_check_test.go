package job

import (
	"errors"
	"fmt"
	"slices"
)

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
