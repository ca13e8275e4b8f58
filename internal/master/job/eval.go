package job

import (
	"fmt"
	"time"

	"elasticdl/data"
	"elasticdl/internal/master/task"
)

// evalMetrics are one evaluation task's sums, as its worker reported them.
type evalMetrics struct {
	records int64
	sums    map[string]float64
	// version is the model version the worker evaluated (what it pulled).
	version int64
	// hist: binary models' score histogram (data.AUCBuckets buckets), for AUC.
	hist *data.ScoreHistogram
}

func (e *evalMetrics) add(o evalMetrics) {
	if e.sums == nil {
		e.sums = map[string]float64{}
	}
	e.records += o.records
	for k, v := range o.sums {
		e.sums[k] += v
	}
	if o.hist != nil {
		if e.hist == nil {
			e.hist = data.NewScoreHistogram()
		}
		_ = e.hist.Merge(o.hist) // sizes checked in reportEval
	}
}

// evalPass is one evaluation pass over the validation data. Workers
// evaluate the parameters they pull when they start each task: in async
// training those may be newer than the version the pass was queued at, so
// the versions actually used are recorded, min and max.
type evalPass struct {
	version          int64 // the version the pass was queued at
	final            bool
	recordsTrained   int64 // training records done when it was queued
	metrics          evalMetrics
	minUsed, maxUsed int64
	haveUsed         bool
}

func (p *evalPass) add(e evalMetrics) {
	p.metrics.add(e)
	if !p.haveUsed || e.version < p.minUsed {
		p.minUsed = e.version
	}
	if !p.haveUsed || e.version > p.maxUsed {
		p.maxUsed = e.version
	}
	p.haveUsed = true
}

// result turns the pass's sums into metrics. The "correct" and "loss" sums
// give accuracy and mean loss; a binary model's AUC comes from the merged
// per-task score histograms.
func (p *evalPass) result() EvalRecord {
	r := EvalRecord{Version: p.version, MinVersionUsed: p.minUsed, MaxVersionUsed: p.maxUsed, Records: p.metrics.records, Final: p.final,
		RecordsTrained: p.recordsTrained}
	if n := float64(p.metrics.records); n > 0 {
		r.Accuracy = p.metrics.sums["correct"] / n
		r.Loss = p.metrics.sums["loss"] / n
	}
	r.AUC = aucOf(p.metrics.hist)
	return r
}

// queueEval queues an evaluation pass over the validation data requested
// at model version v. Dispatcher passes are keyed by version; the final
// pass may be requested at a version a periodic pass already used, so it
// takes the next free key (keys only name passes).
func (j *Job) queueEval(v int64, final bool) error {
	key := v
	for j.passes[key] != nil {
		key++
	}
	err := j.disp.AddEvaluation([]task.Shard{{Name: j.cfg.ValidationData, Records: j.cfg.ValidationRecords}}, j.cfg.RecordsPerTask, key)
	if err != nil {
		return fmt.Errorf("schedule evaluation: %w", err)
	}
	j.passes[key] = &evalPass{version: v, final: final, recordsTrained: j.disp.Progress().RecordsDone}
	if final {
		j.finalKey = key
	}
	return nil
}

// maybeEvaluate queues an evaluation pass when the model version training
// reports carry has crossed the next multiple of EvaluationSteps, unless
// training is over (the final pass follows). Several multiples crossed at
// once make one pass, at the highest.
func (j *Job) maybeEvaluate() {
	n := j.cfg.EvaluationSteps
	if n <= 0 || j.cfg.ValidationData == "" || j.trainVersion < j.nextEvalAt {
		return
	}
	if p := j.disp.Progress(); p.EpochsDone == p.NumEpochs {
		return
	}
	v := j.trainVersion / n * n
	j.nextEvalAt = v + n
	if err := j.queueEval(v, false); err != nil {
		j.fail(err)
		return
	}
	j.log.Info("evaluating during training", "version", v, "evaluation_steps", n)
}

// evalTaskDone counts an accepted evaluation task's metrics into its pass
// and records the pass once all its tasks are done.
func (j *Job) evalTaskDone(t task.Task) {
	p := j.passes[t.ModelVersion]
	if em, ok := j.evalPending[t.ID]; ok && p != nil {
		p.add(em)
		delete(j.evalPending, t.ID)
	}
	st, ok := j.disp.Evaluation(t.ModelVersion)
	if !ok || !st.Complete || p == nil {
		return
	}
	r := p.result()
	j.summary.Evaluations = append(j.summary.Evaluations, r)
	j.ready.Evaluated = append(j.ready.Evaluated, r)
	auc := "n/a"
	if r.AUC != nil {
		auc = fmt.Sprintf("%.4f", *r.AUC)
	}
	cause := "periodic"
	if r.Final {
		cause = "final"
	}
	j.occur(Occurrence{Kind: OccurEval, Cause: cause, Version: r.Version,
		Detail: fmt.Sprintf("accuracy %.4f, loss %.4f, AUC %s on %d records", r.Accuracy, r.Loss, auc, r.Records)})
	j.log.Info("evaluation", "version", r.Version, "accuracy", fmt.Sprintf("%.4f", r.Accuracy), "auc", auc, "loss", fmt.Sprintf("%.4f", r.Loss),
		"records", r.Records, "versions_used", fmt.Sprintf("%d-%d", r.MinVersionUsed, r.MaxVersionUsed), "final", r.Final)
}

// ReportEval is a worker's metrics for an evaluation task it holds. They
// are held until the task is reported successful, so that a retried task
// counts once.
type ReportEval struct {
	Worker  int
	TaskID  int64
	Records int64
	Sums    map[string]float64
	// ModelVersion is the version the worker evaluated.
	ModelVersion int64
	// Histogram: binary models only, data.AUCBuckets buckets a class.
	Histogram *data.ScoreHistogram
}

func (ReportEval) isEvent() {}

func (j *Job) reportEval(now time.Time, ev ReportEval) (Reply, error) {
	if err := j.seen(ev.Worker, now); err != nil {
		return Reply{}, err
	}
	t, ok := j.heldTask(ev.Worker, ev.TaskID)
	if !ok || t.Type != task.Evaluation {
		return Reply{}, fmt.Errorf("%w: worker %d reported metrics for task %d, which is not an evaluation task in progress", ErrRejected, ev.Worker, ev.TaskID)
	}
	if ev.Records < 0 || ev.Records > t.End-t.Start {
		return Reply{}, fmt.Errorf("%w: task %d has %d records, metrics claim %d", ErrInvalid, ev.TaskID, t.End-t.Start, ev.Records)
	}
	if h := ev.Histogram; h != nil {
		if err := checkHistogram(h, ev.Records); err != nil {
			return Reply{}, fmt.Errorf("%w: task %d: %v", ErrInvalid, ev.TaskID, err)
		}
	}
	sums := make(map[string]float64, len(ev.Sums))
	for k, v := range ev.Sums {
		sums[k] = v
	}
	j.evalPending[ev.TaskID] = evalMetrics{records: ev.Records, sums: sums, version: ev.ModelVersion, hist: ev.Histogram}
	return Reply{}, nil
}

// checkHistogram checks a task's score histogram: data.AUCBuckets buckets
// per class (so that tasks merge), counting the task's records.
func checkHistogram(h *data.ScoreHistogram, records int64) error {
	if err := h.Validate(); err != nil {
		return err
	}
	if len(h.Positive) != data.AUCBuckets || h.Count() != records {
		return fmt.Errorf("score histogram of %d buckets counting %d records, want %d buckets counting %d",
			len(h.Positive), h.Count(), data.AUCBuckets, records)
	}
	return nil
}

// heldTask returns task id if worker holds it now.
func (j *Job) heldTask(worker int, id int64) (task.Task, bool) {
	for _, t := range j.disp.Held(worker) {
		if t.ID == id {
			return t, true
		}
	}
	return task.Task{}, false
}
