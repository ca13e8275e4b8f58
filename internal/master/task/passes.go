package task

import (
	"fmt"
	"slices"
)

// AddEvaluation queues one evaluation pass of the given model version over
// shards. Evaluation tasks are served before any training task. version
// identifies the pass (see Evaluation) and must not have been queued before.
// Evaluation tasks follow the same failure rules as training tasks: one that
// fails MaxAttempts times fails the job rather than being dropped.
// It fails on invalid shards, recordsPerTask <= 0, a reused version, or once
// the job has failed.
func (d *Dispatcher) AddEvaluation(shards []Shard, recordsPerTask int64, version int64) error {
	if d.err != nil {
		return fmt.Errorf("add evaluation of model version %d: job has failed: %w", version, d.err)
	}
	if err := validateShards(shards); err != nil {
		return fmt.Errorf("add evaluation of model version %d: %w", version, err)
	}
	if recordsPerTask <= 0 {
		return fmt.Errorf("add evaluation of model version %d: recordsPerTask must be > 0, got %d", version, recordsPerTask)
	}
	if _, dup := d.evals[version]; dup {
		return fmt.Errorf("add evaluation: model version %d already queued", version)
	}
	ids := d.cut(shards, recordsPerTask, Task{Type: Evaluation, ModelVersion: version})
	for _, id := range ids {
		d.evalTodo.pushFresh(id)
	}
	d.evals[version] = &EvalStats{ModelVersion: version, Tasks: len(ids)}
	d.created = append(d.created, Creation{Type: Evaluation, Shards: slices.Clone(shards), RecordsPerTask: recordsPerTask, Version: version})
	return nil
}

// Evaluation returns the aggregated successful results of the evaluation
// pass queued for version, and whether such a pass exists.
func (d *Dispatcher) Evaluation(version int64) (EvalStats, bool) {
	s, ok := d.evals[version]
	if !ok {
		return EvalStats{}, false
	}
	return *s, true
}

// AddPrediction queues one prediction pass over shards and returns its
// number (1, 2, ...; see Prediction). Prediction tasks share the evaluation
// queue: they are served before training tasks and, within a pass, in
// record order (the order their IDs were created in), so a caller writing
// results in input order buffers little. They follow the same failure rules
// as the other tasks. It fails on invalid shards, recordsPerTask <= 0, or
// once the job has failed.
func (d *Dispatcher) AddPrediction(shards []Shard, recordsPerTask int64) (int64, error) {
	if d.err != nil {
		return 0, fmt.Errorf("add prediction: job has failed: %w", d.err)
	}
	if err := validateShards(shards); err != nil {
		return 0, fmt.Errorf("add prediction: %w", err)
	}
	if recordsPerTask <= 0 {
		return 0, fmt.Errorf("add prediction: recordsPerTask must be > 0, got %d", recordsPerTask)
	}
	d.nextPred++
	pass := d.nextPred
	ids := d.cut(shards, recordsPerTask, Task{Type: Prediction, ModelVersion: pass})
	for _, id := range ids {
		d.evalTodo.pushFresh(id)
	}
	d.preds[pass] = &PredictionStats{Pass: pass, Tasks: len(ids)}
	d.created = append(d.created, Creation{Type: Prediction, Shards: slices.Clone(shards), RecordsPerTask: recordsPerTask})
	return pass, nil
}

// Prediction returns the progress of prediction pass number pass (see
// AddPrediction), and whether such a pass exists.
func (d *Dispatcher) Prediction(pass int64) (PredictionStats, bool) {
	s, ok := d.preds[pass]
	if !ok {
		return PredictionStats{}, false
	}
	return *s, true
}
