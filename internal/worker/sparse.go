package worker

import (
	"context"
	"fmt"
	"math/rand"

	"elasticdl/data"
	"elasticdl/internal/ps/client"
	"elasticdl/model"
	"elasticdl/nn"
	"elasticdl/proto/masterpb"
)

// maxRejectedPushes bounds how often one minibatch is recomputed after the
// PS rejected its gradients (sync SGD: they were computed on a stale model).
const maxRejectedPushes = 100

// sparseState is the worker's side of a sparse (recommender) model: the
// network, its embeddings and the PS table behind each.
type sparseState struct {
	spec   *model.SparseSpec
	net    model.SparseNet
	embs   []*nn.Embedding
	tables []client.EmbeddingTable
	grads  []client.SparseGrad
}

func newSparseState(spec model.Spec, seed int64) (*sparseState, error) {
	ss := spec.Sparse
	net := ss.Build(rand.New(rand.NewSource(seed)))
	embs := net.Embeddings()
	if len(embs) != len(ss.Embeddings) {
		return nil, fmt.Errorf("model %s: net has %d embeddings, spec describes %d", spec.Name, len(embs), len(ss.Embeddings))
	}
	s := &sparseState{spec: ss, net: net, embs: embs, grads: make([]client.SparseGrad, len(embs))}
	for _, t := range ss.Tables() {
		s.tables = append(s.tables, client.EmbeddingTable{Name: t.Table, Dim: t.Dim, Initializer: t.Initializer})
	}
	for i := range embs {
		s.grads[i].Table = ss.Embeddings[i].Table
	}
	return s, nil
}

// lookup installs the minibatch's ids in every embedding and pulls their
// rows from the PS.
func (w *Worker) lookup(ctx context.Context, ids []int64) error {
	s := w.sparse
	for i, e := range s.embs {
		unique, err := e.SetBatch(ids, nil, s.spec.NumCategorical)
		if err != nil {
			return err
		}
		if err := w.ps.PullEmbeddings(ctx, s.spec.Embeddings[i].Table, unique, e.Rows()); err != nil {
			return &fatalError{fmt.Errorf("pull embeddings of table %s: %w", s.spec.Embeddings[i].Table, err)}
		}
	}
	return nil
}

// sparseMinibatches is minibatches for sparse models: fn also gets the
// minibatch's categorical ids.
func (w *Worker) sparseMinibatches(b *data.Batch, fn func(x *nn.Tensor, ids []int64, labels []int32) error) error {
	nc := w.sparse.spec.NumCategorical
	if b.NumCategorical != nc || len(b.Categorical) != b.N*nc {
		return fmt.Errorf("records have %d categorical ids, model %s expects %d", b.NumCategorical, w.spec.Name, nc)
	}
	per := w.spec.InputSize()
	if len(b.Features) != b.N*per {
		return fmt.Errorf("records have %d dense features, model %s expects %d", len(b.Features)/max(b.N, 1), w.spec.Name, per)
	}
	for lo := 0; lo < b.N; lo += w.cfg.MinibatchSize {
		hi := min(lo+w.cfg.MinibatchSize, b.N)
		x := &nn.Tensor{Shape: []int{hi - lo, per}, Data: b.Features[lo*per : hi*per]}
		if err := fn(x, b.Categorical[lo*nc:hi*nc], b.Labels[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

func (w *Worker) trainSparse(ctx context.Context, t *masterpb.Task, report *masterpb.ReportTaskResultRequest) error {
	b, err := w.read(t, report)
	if err != nil {
		return err
	}
	shuffle(b, t.Id, t.Epoch)
	s := w.sparse
	return w.sparseMinibatches(b, func(x *nn.Tensor, ids []int64, labels []int32) error {
		for attempt := 0; ; attempt++ {
			if err := w.lookup(ctx, ids); err != nil {
				return err
			}
			if _, err := w.ps.Pull(ctx, w.params); err != nil {
				return &fatalError{fmt.Errorf("pull parameters: %w", err)}
			}
			s.net.ZeroGrads()
			loss, dlogits, err := trainingLoss(s.net.Forward(x, true), labels, t)
			if err != nil {
				return err
			}
			s.net.Backward(dlogits)
			for i, e := range s.embs {
				s.grads[i].IDs, s.grads[i].Values = e.Grad()
			}
			push := w.ps.PushSparse
			if attempt > 0 {
				// A redo goes only to the shards that rejected: the others
				// already counted this minibatch.
				push = w.ps.PushSparseRejected
			}
			accepted, err := push(ctx, w.params, s.grads, w.cfg.WorkerID)
			if err != nil {
				return &fatalError{fmt.Errorf("push gradients: %w", err)}
			}
			if accepted {
				report.Records += int64(len(labels))
				report.LossSum += float64(loss)
				report.Steps++
				return nil
			}
			w.rejected.Add(1)
			if attempt >= maxRejectedPushes {
				return &fatalError{fmt.Errorf("push gradients: rejected %d times in a row", attempt+1)}
			}
		}
	})
}

// inferBatches runs the model forward, without training, over b's
// minibatches (pulling the embedding rows first for a sparse model) and
// hands fn each minibatch's logits and labels: evaluation and prediction
// are then written once for both kinds of model.
func (w *Worker) inferBatches(ctx context.Context, b *data.Batch, fn func(logits *nn.Tensor, labels []int32) error) error {
	if w.sparse == nil {
		return w.minibatches(b, func(x *nn.Tensor, labels []int32) error {
			return fn(w.net.Forward(x, false), labels)
		})
	}
	return w.sparseMinibatches(b, func(x *nn.Tensor, ids []int64, labels []int32) error {
		if err := w.lookup(ctx, ids); err != nil {
			return err
		}
		return fn(w.sparse.net.Forward(x, false), labels)
	})
}
