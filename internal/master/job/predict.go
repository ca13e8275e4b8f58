package job

import (
	"fmt"

	"elasticdl/internal/master/task"
)

// Predictions are what a worker reports for a prediction task: for each
// record it could read, its index, predicted class and NumClasses
// probabilities (row-major).
type Predictions struct {
	RecordIndex    []int64
	PredictedClass []int32
	Probabilities  []float32
	NumClasses     int
}

// PredictionRows are the checked predictions of one task, records
// [Start,End), to be written in input order (Ready.PredictionRows).
type PredictionRows struct {
	Start, End int64
	Class      []int32     // by record - Start; -1: no prediction (corrupt)
	Probs      [][]float32 // by record - Start; nil: no prediction
	Corrupt    int64
}

// predictionOrder releases a predict job's rows in input order. Tasks
// complete in any order; a task's rows are released as soon as every
// record before it is, later ones are held until then. Rows come only from
// a task's accepted successful report (the dispatcher accepts one per
// task), so a task redone after a worker loss never gives duplicate rows.
type predictionOrder struct {
	total      int64
	numClasses int
	next       int64 // first record not released yet
	pending    map[int64]*PredictionRows
	corrupt    int64 // records released without a prediction
}

func newPredictionOrder(total int64, numClasses int) *predictionOrder {
	return &predictionOrder{total: total, numClasses: numClasses, pending: map[int64]*PredictionRows{}}
}

// check validates a task's predictions against the task: every record of
// [start,end) predicted once, or counted corrupt.
func (po *predictionOrder) check(t task.Task, p *Predictions, corrupt int64) (*PredictionRows, error) {
	n := t.End - t.Start
	if p == nil {
		p = &Predictions{NumClasses: po.numClasses}
	}
	m := len(p.RecordIndex)
	if len(p.PredictedClass) != m {
		return nil, fmt.Errorf("%d record indices, %d classes", m, len(p.PredictedClass))
	}
	if p.NumClasses != po.numClasses {
		return nil, fmt.Errorf("%d classes, the model has %d", p.NumClasses, po.numClasses)
	}
	if len(p.Probabilities) != m*po.numClasses {
		return nil, fmt.Errorf("%d probabilities for %d records of %d classes", len(p.Probabilities), m, po.numClasses)
	}
	if int64(m)+corrupt != n {
		return nil, fmt.Errorf("%d predictions and %d corrupt records for a task of %d records", m, corrupt, n)
	}
	rows := &PredictionRows{Start: t.Start, End: t.End, Class: make([]int32, n), Probs: make([][]float32, n), Corrupt: corrupt}
	for i := range rows.Class {
		rows.Class[i] = -1
	}
	for i, idx := range p.RecordIndex {
		if idx < t.Start || idx >= t.End {
			return nil, fmt.Errorf("record %d is outside the task's [%d,%d)", idx, t.Start, t.End)
		}
		j := idx - t.Start
		if rows.Probs[j] != nil {
			return nil, fmt.Errorf("record %d predicted twice", idx)
		}
		c := p.PredictedClass[i]
		if c < 0 || int(c) >= po.numClasses {
			return nil, fmt.Errorf("record %d: class %d out of range", idx, c)
		}
		rows.Class[j] = c
		rows.Probs[j] = p.Probabilities[i*po.numClasses : (i+1)*po.numClasses]
	}
	return rows, nil
}

// add takes one task's rows and returns those now in order.
func (po *predictionOrder) add(r *PredictionRows) ([]*PredictionRows, error) {
	if r.Start < po.next || po.pending[r.Start] != nil {
		// Cannot happen: the dispatcher accepts one report per task.
		return nil, fmt.Errorf("records [%d,%d) predicted twice", r.Start, r.End)
	}
	po.pending[r.Start] = r
	var ready []*PredictionRows
	for {
		r, ok := po.pending[po.next]
		if !ok {
			return ready, nil
		}
		delete(po.pending, po.next)
		ready = append(ready, r)
		po.corrupt += r.Corrupt
		po.next = r.End
	}
}

// complete reports whether every record was released.
func (po *predictionOrder) complete() error {
	if po.next != po.total || len(po.pending) > 0 {
		return fmt.Errorf("only records [0,%d) of %d were predicted", po.next, po.total)
	}
	return nil
}

// PredictionRowsReleased is how many rows of a predict job went out in
// Ready so far (the first ones, in order); 0 for other jobs.
func (j *Job) PredictionRowsReleased() int64 {
	if j.pred == nil {
		return 0
	}
	return j.pred.next
}
