package master

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"elasticdl/internal/dashboard"
	"elasticdl/internal/master/history"
	"elasticdl/internal/master/job"
)

// The board encodes each event and each sample once, when it is new, and
// builds the documents that hold them by joining those bytes: a tick
// encodes what is new, not the whole history (a full series is 720
// samples).

// eventLog is the events held, each encoded once, oldest first. Its
// slices are shared with the SeqLists published (served to api/events
// queries): it only appends beyond them or drops from the front.
type eventLog struct {
	oldest int64
	seqs   []int64
	items  []json.RawMessage
}

// add encodes events (new, in seq order) and drops those older than
// oldest; it returns the new ones' encodings.
func (l *eventLog) add(oldest int64, events []history.Event) ([]json.RawMessage, error) {
	start := len(l.items)
	for _, e := range events {
		data, err := json.Marshal(e)
		if err != nil {
			l.seqs, l.items = l.seqs[:start], l.items[:start]
			return nil, fmt.Errorf("encode event %d: %w", e.Seq, err)
		}
		l.seqs = append(l.seqs, e.Seq)
		l.items = append(l.items, data)
	}
	added := l.items[start:]
	drop := 0
	for drop < len(l.seqs) && l.seqs[drop] < oldest {
		drop++
	}
	l.seqs, l.items, l.oldest = l.seqs[drop:], l.items[drop:], oldest
	return added, nil
}

// list is the log as served to queries; it stays valid as l grows.
func (l *eventLog) list() *dashboard.SeqList {
	return &dashboard.SeqList{Field: "events", Oldest: l.oldest, Seqs: slices.Clip(l.seqs), Items: slices.Clip(l.items)}
}

// doc is api/events: {"oldest":O,"events":[…]}.
func (l *eventLog) doc() json.RawMessage {
	b := append([]byte(`{"oldest":`), strconv.FormatInt(l.oldest, 10)...)
	b = append(b, `,"events":`...)
	return append(joinItems(b, l.items), '}')
}

// last is the newest event's seq, or or.
func (l *eventLog) last(or int64) int64 {
	if n := len(l.seqs); n > 0 {
		return l.seqs[n-1]
	}
	return or
}

// seriesEnc is the series as last published: its stride, each sample
// encoded once, and the evaluations (few; encoded when they change).
type seriesEnc struct {
	stride  time.Duration
	samples []json.RawMessage
	evals   int
	evalsJS json.RawMessage
}

// update takes the samples from index from on (all of them when from is
// 0) and the evaluations, and says what changed: the new samples only,
// or the whole document (first time, thinned, new evaluations); neither
// when nothing did.
func (s *seriesEnc) update(any bool, stride time.Duration, from int, samples []history.Sample, evals []job.EvalRecord) (added []json.RawMessage, whole bool, err error) {
	whole = !any || stride != s.stride || from != len(s.samples) || len(evals) != s.evals
	if !whole && len(samples) == 0 {
		return nil, false, nil
	}
	enc := make([]json.RawMessage, 0, len(samples))
	for _, smp := range samples {
		data, err := json.Marshal(smp)
		if err != nil {
			return nil, false, fmt.Errorf("encode the sample at %s: %w", smp.T.Format(time.RFC3339), err)
		}
		enc = append(enc, data)
	}
	if len(evals) != s.evals || s.evalsJS == nil {
		js, err := json.Marshal(orEmpty(evals))
		if err != nil {
			return nil, false, fmt.Errorf("encode the evaluations: %w", err)
		}
		s.evals, s.evalsJS = len(evals), js
	}
	if from == 0 {
		s.samples = nil // thinned: a new slice, the old one may be in use
	}
	s.samples = append(s.samples, enc...)
	s.stride = stride
	return enc, whole, nil
}

// doc is api/series: {"stride_seconds":S,"samples":[…],"evals":[…]}.
func (s *seriesEnc) doc() json.RawMessage {
	b := append([]byte(`{"stride_seconds":`), strconv.FormatFloat(s.stride.Seconds(), 'f', -1, 64)...)
	b = append(b, `,"samples":`...)
	b = joinItems(b, s.samples)
	b = append(b, `,"evals":`...)
	b = append(b, s.evalsJS...)
	return append(b, '}')
}

// joinItems appends items as a JSON array.
func joinItems(b []byte, items []json.RawMessage) []byte {
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, ']')
}

// joinDocs is the stream's snapshot: an object of the documents, by name
// in order, joined as they are (each is the output of json.Marshal or of
// the joins above, so valid and compact).
func joinDocs(docs map[string]json.RawMessage) json.RawMessage {
	names := make([]string, 0, len(docs))
	size := 2
	for name, d := range docs {
		names = append(names, name)
		size += len(name) + len(d) + 4
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, name)
		b = append(b, ':')
		b = append(b, docs[name]...)
	}
	return append(b, '}')
}
