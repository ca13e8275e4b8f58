package worker

import (
	"fmt"
	"math/rand"

	"elasticdl/data"
	"elasticdl/nn"
	"elasticdl/proto/masterpb"
)

// A task's records: data sources, opened once and shared by the tasks
// that read them, and the minibatches cut from a task's records.

// openSource is a data source being opened, or open.
type openSource struct {
	done chan struct{}
	src  data.Source
	err  error
}

// source returns the source name, opening it in the background the first
// time. A failed open is forgotten once seen, so that a later task tries
// again.
func (w *Worker) source(name string) *openSource {
	w.sourcesMu.Lock()
	defer w.sourcesMu.Unlock()
	if o, ok := w.sources[name]; ok {
		return o
	}
	o := &openSource{done: make(chan struct{})}
	w.sources[name] = o
	go func() {
		defer close(o.done)
		o.src, o.err = data.Open(name)
	}()
	return o
}

func (w *Worker) closeSources() {
	w.sourcesMu.Lock()
	defer w.sourcesMu.Unlock()
	for _, o := range w.sources {
		<-o.done
		if o.err == nil {
			o.src.Close()
		}
	}
}

// aheadRead is a task's records being read before the task's turn: on
// object storage a task's ranged GETs take a while, and the CPU trains the
// task before meanwhile.
type aheadRead struct {
	name       string
	start, end int64
	done       chan struct{}
	b          *data.Batch
	err        error
}

// readAhead starts reading t's records in the background, in place of any
// read ahead not taken.
func (w *Worker) readAhead(t *masterpb.Task) {
	s := t.GetShard()
	if s == nil || s.GetEnd() <= s.GetStart() {
		return
	}
	a := &aheadRead{name: s.GetName(), start: s.GetStart(), end: s.GetEnd(), done: make(chan struct{})}
	o := w.source(a.name)
	w.sourcesMu.Lock()
	w.ahead = a
	w.sourcesMu.Unlock()
	go func() {
		defer close(a.done)
		<-o.done
		if o.err != nil {
			a.err = o.err
			return
		}
		a.b, a.err = o.src.Read(a.start, a.end)
	}()
}

// takeAhead is the read ahead of shard s's records, if there is one.
func (w *Worker) takeAhead(s *masterpb.Shard) *aheadRead {
	w.sourcesMu.Lock()
	defer w.sourcesMu.Unlock()
	a := w.ahead
	if a == nil || a.name != s.GetName() || a.start != s.GetStart() || a.end != s.GetEnd() {
		return nil
	}
	w.ahead = nil
	return a
}

func (w *Worker) read(t *masterpb.Task, report *masterpb.ReportTaskResultRequest) (*data.Batch, error) {
	s := t.GetShard()
	if a := w.takeAhead(s); a != nil {
		<-a.done
		if a.err == nil {
			return counted(a.b, report), nil
		}
		// A failed read ahead is tried again below, as any read.
	}
	o := w.source(s.Name)
	<-o.done
	if o.err != nil {
		w.sourcesMu.Lock()
		if w.sources[s.Name] == o {
			delete(w.sources, s.Name)
		}
		w.sourcesMu.Unlock()
		return nil, o.err
	}
	src := o.src
	b, err := src.Read(s.Start, s.End)
	if err != nil {
		return nil, err
	}
	return counted(b, report), nil
}

// counted puts b's corrupt records in the task's report.
func counted(b *data.Batch, report *masterpb.ReportTaskResultRequest) *data.Batch {
	report.CorruptRecords = int64(len(b.Corrupt))
	if len(b.Corrupt) > 0 {
		report.FirstCorruptError = b.Corrupt[0].Error()
	}
	return b
}

// minibatches calls fn for consecutive slices of at most MinibatchSize
// records of b: their dense inputs shaped as the model's input, their
// categorical ids (none for a model without embeddings) and labels.
func (w *Worker) minibatches(b *data.Batch, fn func(x *nn.Tensor, ids []int64, labels []int32) error) error {
	nc := w.spec.NumCategorical()
	if nc > 0 && (b.NumCategorical != nc || len(b.Categorical) != b.N*nc) {
		return fmt.Errorf("records have %d categorical ids, model %s expects %d", b.NumCategorical, w.spec.Name, nc)
	}
	per := w.spec.InputSize()
	if len(b.Features) != b.N*per {
		return fmt.Errorf("records have %d dense features, model %s expects %d", len(b.Features)/max(b.N, 1), w.spec.Name, per)
	}
	for lo := 0; lo < b.N; lo += w.cfg.MinibatchSize {
		hi := min(lo+w.cfg.MinibatchSize, b.N)
		x := &nn.Tensor{Shape: w.spec.BatchShape(hi - lo), Data: b.Features[lo*per : hi*per]}
		if err := fn(x, b.Categorical[lo*nc:hi*nc], b.Labels[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// shuffle permutes the records of b, reproducibly for a task (the same
// order whoever trains it). The features move into scratch (nil: a new
// buffer), and the buffer they were in is returned for the next task's.
func shuffle(b *data.Batch, taskID int64, epoch int32, scratch []float32) (spare []float32) {
	rng := rand.New(rand.NewSource(taskID*1_000_003 + int64(epoch)))
	perm := make([]int, b.N)
	for i := range perm {
		perm[i] = i
	}
	rng.Shuffle(b.N, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	return b.Permute(perm, scratch)
}
