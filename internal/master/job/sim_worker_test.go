package job

import (
	"errors"
	"fmt"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

func (s *sim) workerActs(w *simWorker) error {
	switch {
	case w.hung:
		return nil
	case w.slow && w.held != nil && s.slowRng.Intn(4) > 0:
		return nil // a slow worker: a quarter of the others' pace
	case !w.running && s.rng.Intn(2) == 0:
		w.running = true
		_, err := s.step(Instance{cluster.Event{Role: cluster.Worker, ID: w.id, Phase: cluster.Running}})
		return err
	case w.held != nil && w.wait > 0:
		w.wait--
		// Some of the task's minibatches are pushed meanwhile.
		s.push(*w.held, int32(s.rng.Intn(int(s.minibatches(*w.held))+1)))
		return nil
	case w.held != nil:
		return s.report(w)
	}
	w.running = true
	r, err := s.step(GetTask{Worker: w.id, Held: []int64{}})
	if err != nil {
		return err
	}
	if r.Assignment.Kind == task.KindTask && s.restarts != nil && s.restarts.Intn(15) == 0 {
		// The answer is lost (its master died after persisting it): the
		// worker asks again, holding nothing, and must get the task again.
		s.lostReplies++
		return nil
	}
	if r.Assignment.Kind == task.KindTask {
		t := r.Assignment.Task
		w.held, w.wait = &t, s.rng.Intn(3)
		if s.rng.Intn(10) == 0 {
			w.wait = 20 + s.rng.Intn(40) // a slow task: it may time out
		}
	}
	return nil
}

// report reports the held task: sometimes failed (a flaky record), and
// sometimes repeated afterwards; a report after the task was taken back
// (timeout) is refused.
func (s *sim) report(w *simWorker) error {
	t := *w.held
	w.held = nil
	ev := ReportTask{Worker: w.id, TaskID: t.ID, Result: task.Result{Records: t.Records(), Steps: 1}, ModelVersion: int64(t.ID)}
	if s.rng.Intn(30) == 0 {
		ev.Result = task.Result{Err: "flaky"}
	}
	switch t.Type {
	case task.Evaluation:
		n := t.Records()
		if _, err := s.step(ReportEval{Worker: w.id, TaskID: t.ID, Records: n, ModelVersion: 1, Sums: map[string]float64{"correct": float64(n)}}); err != nil && !errors.Is(err, ErrRejected) {
			return err
		}
	case task.Prediction:
		ev.Predictions = predictionsOf(t.Start, t.End, 2, nil)
	}
	if ev.Result.Err == "" {
		s.push(t, s.minibatches(t))
	}
	r, err := s.step(ev)
	switch {
	case err == nil && r.Superseded:
		// A backed-up task whose other copy was reported first: its
		// minibatches were pushed again, and applied once.
		if t.Type != task.Training || !s.won[t.ID] {
			return fmt.Errorf("report of %v superseded, but no other copy of it was accepted", t)
		}
		return nil
	case errors.Is(err, ErrRejected):
		// Timed out meanwhile: someone else has it. The gradients were
		// pushed all the same, and the ledger says so.
		if ev.Result.Err == "" && t.Type == task.Training {
			s.late[t.Epoch] = append(s.late[t.Epoch], [2]int64{t.Start, t.End})
		}
		return nil
	case err != nil:
		return err
	}
	w.reported = append(w.reported, t)
	if ev.Result.Err == "" && t.Type == task.Training {
		s.accepted[t.ID]++
		s.won[t.ID] = true
		s.ranges[t.Epoch] = append(s.ranges[t.Epoch], [2]int64{t.Start, t.End})
	}
	if s.rng.Intn(20) == 0 {
		// A repeated report (a retry after a lost response) is refused.
		if _, err := s.step(ev); !errors.Is(err, ErrRejected) {
			return fmt.Errorf("repeated report of task %d: %v, want refused", t.ID, err)
		}
	}
	return nil
}

func (s *sim) killWorker(w *simWorker) error {
	reasons := []cluster.ExitReason{cluster.Killed, cluster.Preempted, cluster.OOMKilled, cluster.Deleted}
	if len(s.workers) > 1 {
		reasons = append(reasons, cluster.Failed)
	}
	why := reasons[s.rng.Intn(len(reasons))]
	delete(s.workers, w.id)
	s.ghosts = append(s.ghosts, w)
	if w.held != nil {
		// Killed in the middle of its task: a prefix was pushed.
		s.push(*w.held, int32(s.rng.Intn(int(s.minibatches(*w.held))+1)))
	}
	_, err := s.step(Instance{cluster.Event{Role: cluster.Worker, ID: w.id, Phase: cluster.Exited, ExitCode: 1, Reason: why}})
	return err
}

// ghostReports: a worker the master gave up on reports late (what it held,
// or repeats what it reported): always refused.
func (s *sim) ghostReports(g *simWorker) error {
	tasks := g.reported
	if g.held != nil {
		tasks = append(tasks, *g.held)
	}
	if len(tasks) == 0 {
		return nil
	}
	t := tasks[s.rng.Intn(len(tasks))]
	if _, err := s.step(ReportTask{Worker: g.id, TaskID: t.ID, Result: task.Result{Records: t.Records()}}); !errors.Is(err, ErrUnknownWorker) {
		return fmt.Errorf("late report of task %d by lost worker %d: %v, want refused", t.ID, g.id, err)
	}
	return nil
}
