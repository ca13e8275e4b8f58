package worker

import (
	"context"
	"fmt"
	"math"

	"elasticdl/data"
	"elasticdl/nn"
	"elasticdl/proto/masterpb"
)

// Evaluation and prediction tasks: the current model run forward over a
// task's records.

// readAndPull reads an evaluation or prediction task's records and pulls
// the current model to run them through.
func (w *Worker) readAndPull(ctx context.Context, t *masterpb.Task, report *masterpb.ReportTaskResultRequest) (*data.Batch, error) {
	b, err := w.read(t, report)
	if err != nil {
		return nil, err
	}
	if w.ps == nil {
		return b, nil // AllReduce: the model is here
	}
	if _, err := w.ps.Pull(ctx, w.params); err != nil {
		return nil, &fatalError{fmt.Errorf("pull parameters: %w", err)}
	}
	return b, nil
}

// infer runs the model forward, without training, over b's minibatches
// (pulling their embedding rows first) and hands fn each minibatch's
// logits and labels: what evaluation and prediction share.
func (w *Worker) infer(ctx context.Context, b *data.Batch, fn func(logits *nn.Tensor, labels []int32) error) error {
	return w.minibatches(b, func(x *nn.Tensor, ids []int64, labels []int32) error {
		if err := w.lookup(ctx, ids); err != nil {
			return err
		}
		return fn(w.net.Forward(x, false), labels)
	})
}

func (w *Worker) evaluate(ctx context.Context, t *masterpb.Task, report *masterpb.ReportTaskResultRequest) error {
	b, err := w.readAndPull(ctx, t, report)
	if err != nil {
		return err
	}
	var correct, lossSum float64
	var hist *data.ScoreHistogram // binary models: for the pass's AUC
	err = w.infer(ctx, b, func(logits *nn.Tensor, labels []int32) error {
		loss, _, err := nn.SoftmaxCrossEntropy(logits, labels)
		if err != nil {
			return err
		}
		if len(logits.Shape) == 2 && logits.Shape[1] == 2 {
			if hist == nil {
				hist = data.NewScoreHistogram()
			}
			for r, l := range labels {
				// softmax[1] of two logits.
				hist.Add(1/(1+math.Exp(float64(logits.Data[2*r])-float64(logits.Data[2*r+1]))), l)
			}
		}
		correct += float64(nn.CountCorrect(logits, labels))
		lossSum += float64(loss) * float64(len(labels))
		report.Records += int64(len(labels))
		report.Steps++
		return nil
	})
	if err != nil {
		return err
	}
	report.LossSum = lossSum
	req := &masterpb.ReportEvaluationMetricsRequest{
		WorkerId:     int32(w.cfg.WorkerID),
		TaskId:       t.Id,
		ModelVersion: w.modelVersion(),
		Records:      report.Records,
		Sums:         map[string]float64{"correct": correct, "loss": lossSum},
	}
	if hist != nil {
		req.ScoreHistogram = &masterpb.ScoreHistogram{Positive: hist.Positive, Negative: hist.Negative}
	}
	_, err = w.master.ReportEvaluationMetrics(ctx, req)
	if err != nil {
		return &fatalError{fmt.Errorf("report evaluation metrics of task %d: %w", t.Id, err)}
	}
	return nil
}

// predict computes the model's prediction for every record of the task:
// the predicted class and the class probabilities (softmax of the logits),
// carried back in the task's report.
func (w *Worker) predict(ctx context.Context, t *masterpb.Task, report *masterpb.ReportTaskResultRequest) error {
	b, err := w.readAndPull(ctx, t, report)
	if err != nil {
		return err
	}
	k := w.spec.NumClasses
	p := &masterpb.Predictions{
		NumClasses:     int32(k),
		RecordIndex:    make([]int64, 0, b.N),
		PredictedClass: make([]int32, 0, b.N),
		Probabilities:  make([]float32, 0, b.N*k),
	}
	off := 0
	err = w.infer(ctx, b, func(logits *nn.Tensor, labels []int32) error {
		n := len(labels)
		if len(logits.Data) != n*k {
			return fmt.Errorf("model output has %d values for %d records of %d classes", len(logits.Data), n, k)
		}
		for i := 0; i < n; i++ {
			row := logits.Data[i*k : (i+1)*k]
			p.RecordIndex = append(p.RecordIndex, b.Index[off+i])
			p.PredictedClass = append(p.PredictedClass, int32(nn.Argmax(row)))
			p.Probabilities = nn.AppendSoftmax(p.Probabilities, row)
		}
		off += n
		report.Records += int64(n)
		report.Steps++
		return nil
	})
	if err != nil {
		return err
	}
	report.Predictions = p
	return nil
}
