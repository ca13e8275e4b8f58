package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"elasticdl/internal/ps/client"
	"elasticdl/nn"
	"elasticdl/proto/masterpb"
	"elasticdl/proto/pserverpb"
)

// A training task in a PS job: each minibatch pulls the parameters (and
// its embedding rows), computes, and pushes its gradients, in sync or
// async SGD, applied once by each PS shard.

// maxRejectedPushes bounds how often one minibatch is recomputed after the
// PS rejected its gradients (sync SGD: they were computed on a stale model).
const maxRejectedPushes = 100

func (w *Worker) train(ctx context.Context, t *masterpb.Task, report *masterpb.ReportTaskResultRequest) error {
	b, err := w.read(t, report)
	if err != nil {
		return err
	}
	// Minibatches mix the task's records in a new order each epoch, as a
	// shuffling data loader would; the master already shuffles task order.
	w.shuffleSpare = shuffle(b, t.Id, t.Epoch, w.shuffleSpare)
	tr := &taskTraining{w: w, t: t, report: report, index: -1}
	err = w.minibatches(b, func(x *nn.Tensor, ids []int64, labels []int32) error {
		// The index-th minibatch of the task's fixed order: a shard applies
		// it once, whoever pushes it, however often.
		tr.index++
		if tr.skip(len(labels)) {
			return nil
		}
		key := &pserverpb.MinibatchKey{TaskId: t.Id, Index: tr.index}
		if w.cfg.ModelledSecondsPerRecord > 0 {
			return w.modelledMinibatch(ctx, len(labels), key, tr.leaveOut(), report)
		}
		if w.cfg.Sync {
			return tr.syncStep(ctx, x, ids, labels, key)
		}
		return tr.asyncStep(ctx, x, ids, labels, key)
	})
	if werr := tr.settle(ctx); err == nil {
		err = werr
	}
	if tr.skipped > 0 {
		w.log.Info("task trained before: minibatches every PS shard held were skipped", "task", t.Id, "skipped", tr.skipped, "minibatches", tr.index+1)
	}
	return err
}

// taskTraining is the state of one training task's minibatches.
type taskTraining struct {
	w      *Worker
	t      *masterpb.Task
	report *masterpb.ReportTaskResultRequest
	index  int32 // of the minibatch in hand
	// held: once a shard says it holds a minibatch of this task (the task
	// was trained before, by a worker that died), which minibatches each
	// shard holds; nil until then.
	held    [][]int32
	skipped int
	// pending is the last minibatch's push (async), not yet answered.
	pending *pendingStep
}

// pendingStep is a pushed minibatch whose answer is still to come.
type pendingStep struct {
	push    *client.PendingPush
	records int
	loss    float32
}

// holds reports whether shard holds the minibatch in hand.
func (tr *taskTraining) holds(shard int) bool { return client.HoldsMinibatch(tr.held[shard], tr.index) }

// leaveOut is the push's Holds: nil until some shard is known to hold
// minibatches of the task.
func (tr *taskTraining) leaveOut() func(int) bool {
	if tr.held == nil {
		return nil
	}
	return tr.holds
}

// skip counts the minibatch in hand as trained when every shard holds it
// already: there is nothing to compute.
func (tr *taskTraining) skip(records int) bool {
	if tr.held == nil {
		return false
	}
	for i := range tr.held {
		if !tr.holds(i) {
			return false
		}
	}
	tr.skipped++
	tr.report.Records += int64(records)
	return true
}

// learn handles a push's answer: after the first duplicate it asks the
// shards which minibatches of the task they hold, to leave those out.
func (tr *taskTraining) learn(ctx context.Context, r client.PushResult) error {
	if !r.Duplicate || tr.held != nil {
		return nil
	}
	held, err := tr.w.ps.Applied(ctx, tr.t.Id)
	if err != nil {
		return &fatalError{fmt.Errorf("minibatches applied of task %d: %w", tr.t.Id, err)}
	}
	tr.held = held
	return nil
}

// compute runs forward and backward on the parameters in hand, leaving the
// gradients in the model (the embeddings' in w.grads).
func (tr *taskTraining) compute(x *nn.Tensor, labels []int32) (float32, error) {
	w := tr.w
	w.net.ZeroGrads()
	loss, dlogits, err := trainingLoss(w.net.Forward(x, true), labels, tr.t)
	if err != nil {
		return 0, err
	}
	w.net.Backward(dlogits)
	for i, e := range w.net.Embeddings() {
		w.grads[i].IDs, w.grads[i].Values = e.Grad()
	}
	return loss, nil
}

func (tr *taskTraining) count(records int, loss float32) {
	tr.report.Records += int64(records)
	tr.report.LossSum += float64(loss)
	tr.report.Steps++
}

// asyncStep trains one minibatch in async SGD: pull (unless the last
// push brought the parameters), compute, push asking for the parameters
// back. With OverlapPush the push is answered while the next minibatch
// computes (settle); otherwise here.
func (tr *taskTraining) asyncStep(ctx context.Context, x *nn.Tensor, ids []int64, labels []int32, key *pserverpb.MinibatchKey) error {
	w := tr.w
	if !w.fresh {
		if _, err := w.ps.Pull(ctx, w.params); err != nil {
			return &fatalError{fmt.Errorf("pull parameters: %w", err)}
		}
	}
	if err := w.lookup(ctx, ids); err != nil {
		return err
	}
	computedOn := w.ps.Versions()
	loss, err := tr.compute(x, labels)
	if err != nil {
		return err
	}
	// The previous minibatch's answer may say the shards hold this one.
	if err := tr.settle(ctx); err != nil {
		return err
	}
	if tr.skip(len(labels)) {
		return nil
	}
	tr.pending = &pendingStep{records: len(labels), loss: loss,
		push: w.ps.StartPush(ctx, client.PushRequest{Params: w.params, Sparse: w.grads, WorkerID: w.cfg.WorkerID, To: client.AllShards,
			Key: key, Holds: tr.leaveOut(), ComputedOn: computedOn, ReturnParameters: true})}
	if !w.cfg.OverlapPush {
		return tr.settle(ctx)
	}
	return nil
}

// settle waits for the pending push's answer and counts its minibatch.
func (tr *taskTraining) settle(ctx context.Context) error {
	p := tr.pending
	if p == nil {
		return nil
	}
	tr.pending = nil
	r, err := p.push.Wait()
	if err != nil {
		tr.w.fresh = false
		return &fatalError{fmt.Errorf("push gradients: %w", err)}
	}
	tr.w.fresh = r.Fresh
	if err := tr.learn(ctx, r); err != nil {
		return err
	}
	// Async shards accept every push.
	tr.count(p.records, p.loss)
	return nil
}

// syncStep trains one minibatch in sync SGD, which may reject gradients
// computed on a stale model: re-pull and redo the minibatch, pushing only
// to the shards that rejected it.
func (tr *taskTraining) syncStep(ctx context.Context, x *nn.Tensor, ids []int64, labels []int32, key *pserverpb.MinibatchKey) error {
	w := tr.w
	to := client.AllShards
	for attempt := 0; ; attempt++ {
		if err := w.lookup(ctx, ids); err != nil {
			return err
		}
		if _, err := w.ps.Pull(ctx, w.params); err != nil {
			return &fatalError{fmt.Errorf("pull parameters: %w", err)}
		}
		loss, err := tr.compute(x, labels)
		if err != nil {
			return err
		}
		r, err := w.ps.StartPush(ctx, client.PushRequest{Params: w.params, Sparse: w.grads, WorkerID: w.cfg.WorkerID, To: to,
			Key: key, Holds: tr.leaveOut()}).Wait()
		if err != nil {
			return &fatalError{fmt.Errorf("push gradients: %w", err)}
		}
		if err := tr.learn(ctx, r); err != nil {
			return err
		}
		if r.Accepted {
			tr.count(len(labels), loss)
			return nil
		}
		to = client.RejectedShards
		w.rejected.Add(1)
		w.log.Debug("stale gradients rejected by the PS; redoing the minibatch", "task", tr.t.Id, "attempt", attempt+1, "rejected_total", w.rejected.Load())
		if attempt >= maxRejectedPushes {
			return &fatalError{fmt.Errorf("push gradients: rejected %d times in a row", attempt+1)}
		}
	}
}

// lookup installs a minibatch's ids in every embedding of the model and
// pulls their rows from the PS; a model without embeddings has nothing to
// look up.
func (w *Worker) lookup(ctx context.Context, ids []int64) error {
	for i, e := range w.net.Embeddings() {
		unique, err := e.SetBatch(ids, nil, w.spec.NumCategorical())
		if err != nil {
			return err
		}
		if err := w.ps.PullEmbeddings(ctx, w.grads[i].Table, unique, e.Rows()); err != nil {
			return &fatalError{fmt.Errorf("pull embeddings of table %s: %w", w.grads[i].Table, err)}
		}
	}
	return nil
}

// modelledMinibatch spends the time n records take on this worker's CPUs
// (modelled compute), then records the minibatch on every shard that
// lacks it, with no gradients: the PS state does not change.
func (w *Worker) modelledMinibatch(ctx context.Context, n int, key *pserverpb.MinibatchKey, leaveOut func(int) bool, report *masterpb.ReportTaskResultRequest) error {
	d := time.Duration(float64(n) * w.cfg.ModelledSecondsPerRecord / w.cfg.ModelledCPUs * float64(time.Second))
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
	}
	if _, _, err := w.ps.PushMinibatch(ctx, nil, nil, w.cfg.WorkerID, client.AllShards, key, leaveOut); err != nil {
		return &fatalError{fmt.Errorf("record minibatch %d of task %d: %w", key.Index, key.TaskId, err)}
	}
	report.Records += int64(n)
	report.Steps++
	return nil
}

// followLayout registers the model with the PS of the first task's
// layout, and re-connects to the PS when a task comes with other PS
// addresses than the worker's (the job re-sharded its PS: the master
// hands out no task until every shard serves the new layout). The new
// client knows nothing of the shards: its next pull fetches everything,
// and PushModel registers the embedding tables with it (the shards are
// initialized: they keep their parameters).
func (w *Worker) followLayout(ctx context.Context, resp *masterpb.GetTaskResponse) error {
	if len(resp.PsAddrs) == 0 || slices.Equal(resp.PsAddrs, w.cfg.PSAddrs) {
		if w.registered {
			return nil
		}
		if err := w.ps.PushModel(ctx, w.params, w.tables...); err != nil {
			return fmt.Errorf("push initial model: %w", err)
		}
		w.registered = true
		return nil
	}
	c, err := client.Dial(ctx, resp.PsAddrs, w.psOptions()...)
	if err != nil {
		return fmt.Errorf("connect to the re-sharded parameter servers: %w", err)
	}
	if err := c.PushModel(ctx, w.params, w.tables...); err != nil {
		c.Close()
		return fmt.Errorf("register with the re-sharded parameter servers: %w", err)
	}
	w.log.Info("parameter servers re-sharded: routing by the new layout", "layout", resp.PsLayout, "from", len(w.cfg.PSAddrs), "to", len(resp.PsAddrs))
	w.ps.Close()
	w.ps, w.cfg.PSAddrs = c, slices.Clone(resp.PsAddrs)
	w.fresh, w.registered = false, true
	return nil
}

// psOptions are the PS client's options for this worker's flags.
func (w *Worker) psOptions() []client.Option {
	opts := []client.Option{client.WithTransportDType(w.cfg.TransportDType), client.WithCreds(w.cfg.Creds)}
	if w.cfg.PSOverGRPC {
		opts = append(opts, client.WithGRPCOnly())
	}
	return opts
}
