package job

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"elasticdl/internal/master/task"
)

// minibatches counts the minibatches of training task t (the sim's
// records are all readable).
func (s *sim) minibatches(t task.Task) int32 {
	if !s.cfg.CheckApplied || t.Type != task.Training {
		return 0
	}
	b := int64(s.cfg.MinibatchSize)
	return int32((t.Records() + b - 1) / b)
}

// push applies training task t's minibatches [0, upTo) on every shard: a
// shard holds a minibatch or not, however often it is pushed.
func (s *sim) push(t task.Task, upTo int32) {
	if !s.cfg.CheckApplied || t.Type != task.Training {
		return
	}
	for _, sh := range s.shards {
		m := sh[t.ID]
		if m == nil {
			m = map[int32]bool{}
			sh[t.ID] = m
		}
		for i := range upTo {
			m[i] = true
		}
	}
}

func cloneHeld(m map[int64]map[int32]bool) map[int64]map[int32]bool {
	out := make(map[int64]map[int32]bool, len(m))
	for id, set := range m {
		out[id] = maps.Clone(set)
	}
	return out
}

// answer tells the core what the shards hold (or that they could not be
// reached); the done tasks some shard lacks a minibatch of must go back to
// training, with their records counted as rolled back.
func (s *sim) answer() error {
	q := s.question
	s.question = nil
	ev := AppliedFound{Gen: q.Gen}
	if s.rng.Intn(10) == 0 {
		ev.Err = errors.New("a PS is unavailable")
		_, err := s.step(ev)
		return err
	}
	for _, sh := range s.shards {
		out := ShardMinibatches{Tasks: map[int64][][2]int32{}}
		for id, set := range sh {
			for _, m := range slices.Sorted(maps.Keys(set)) {
				out.Tasks[id] = append(out.Tasks[id], [2]int32{m, m + 1}) // unmerged spans are fine
			}
		}
		ev.Shards = append(ev.Shards, out)
	}
	var lacking []task.Task
	var lost int64
	for _, id := range slices.Sorted(maps.Keys(s.accepted)) {
		if s.accepted[id] != 1 {
			continue
		}
		t, _ := s.j.disp.TaskInfo(id)
		b := int64(s.cfg.MinibatchSize)
		var lacked int64
		for m := range s.minibatches(t) {
			for _, sh := range s.shards {
				if !sh[id][m] {
					lacked += min(b, t.Records()-int64(m)*b)
					break
				}
			}
		}
		if lacked > 0 {
			lacking, lost = append(lacking, t), lost+lacked
		}
	}
	before := s.j.Summary(0).Tasks.Reopened
	if _, err := s.apply(ev); err != nil {
		return err
	}
	sum := s.j.Summary(0)
	switch got := sum.Tasks.Reopened - before; {
	case got == 0:
		return nil // clean, or an answer to an older question
	case got != int64(len(lacking)):
		return fmt.Errorf("check reopened %d tasks, the shards lack minibatches of %d", got, len(lacking))
	}
	for _, t := range lacking {
		s.accepted[t.ID]--
		rs := s.ranges[t.Epoch]
		i := slices.Index(rs, [2]int64{t.Start, t.End})
		s.ranges[t.Epoch] = slices.Delete(rs, i, i+1)
	}
	s.reopened += int64(len(lacking))
	s.rolledBack += lost
	if sum.RecordsRequeuedForRollback != s.rolledBack {
		return fmt.Errorf("records requeued for rollback %d, the sim counts %d", sum.RecordsRequeuedForRollback, s.rolledBack)
	}
	return nil
}
