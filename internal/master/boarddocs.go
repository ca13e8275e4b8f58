package master

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/history"
	"elasticdl/internal/master/job"
)

// The dashboard's documents (docs/dashboard.md): their JSON names are
// part of the documented API, version 1.

// jobHead is what the job document says of the job that never changes.
type jobHead struct {
	Job      string `json:"job"`
	Mode     string `json:"mode"`
	Model    string `json:"model"`
	Strategy string `json:"strategy"` // ps-sync, ps-async, allreduce
}

// jobDoc is api/job: the job now. It is in every delta, so it stays small
// at any size: the instances are in the timeline.
type jobDoc struct {
	jobHead
	Phase          string     `json:"phase"`
	StartedAt      *time.Time `json:"started_at"`
	ElapsedSeconds float64    `json:"elapsed_seconds"`
	ETASeconds     *float64   `json:"eta_seconds"`
	Epoch          int        `json:"epoch"`
	NumEpochs      int        `json:"num_epochs"`
	EpochsDone     int        `json:"epochs_done"`
	RecordsDone    int64      `json:"records_done"`
	RecordsTotal   int64      `json:"records_total"`
	Epochs         []epochDoc `json:"epochs"`
	Workers        workersDoc `json:"workers"`
	PS             psDoc      `json:"ps"`
	Ring           ringDoc    `json:"ring"`
	ModelVersion   int64      `json:"model_version"`
}

// epochDoc is one epoch's ledger: records trained at least once, twice or
// more, and never (only once final: all its tasks done).
type epochDoc struct {
	Epoch   int   `json:"epoch"`
	Records int64 `json:"records"`
	Trained int64 `json:"trained"`
	Twice   int64 `json:"twice"`
	Missed  int64 `json:"missed"`
	Final   bool  `json:"final"`
}

type workersDoc struct {
	Target  int `json:"target"`
	Min     int `json:"min"`
	Max     int `json:"max"`
	Running int `json:"running"`
	Pending int `json:"pending"`
}

type psDoc struct {
	Count   int   `json:"count"`
	Target  int   `json:"target"`
	Running int   `json:"running"`
	Pending int   `json:"pending"`
	Layout  int64 `json:"layout"`
}

type ringDoc struct {
	Version   int64 `json:"version"`
	WorldSize int   `json:"world_size"`
}

// eventsDoc is api/events: the latest events; oldest > 1 says older ones
// were dropped. The board joins it from each event's encoding (eventLog):
// this is the shape the join must give, as TestBoardEncodesWhatIsNew and
// the API's readers check.
type eventsDoc struct {
	Oldest int64           `json:"oldest"`
	Events []history.Event `json:"events"`
}

// seriesDoc is api/series: samples stride apart, and the evaluations;
// joined from each sample's encoding (seriesEnc) in this shape.
type seriesDoc struct {
	StrideSeconds float64          `json:"stride_seconds"`
	Samples       []history.Sample `json:"samples"`
	Evals         []job.EvalRecord `json:"evals"`
}

// timelineDoc is api/timeline: each slot's segments, workers first, and
// the ring's recoveries and the PS re-shards.
type timelineDoc struct {
	Slots    []slotDoc          `json:"slots"`
	Ring     []job.RingRecovery `json:"ring"`
	Reshards []job.PSReshard    `json:"reshards"`
}

type slotDoc struct {
	Role     cluster.Role      `json:"role"`
	Slot     int               `json:"slot"`
	Segments []history.Segment `json:"segments"`
}

// deltaDoc is a stream's "delta": the job now, and what else changed
// since the previous one. Events and Samples are the new ones; Series and
// Timeline come whole when they changed otherwise.
type deltaDoc struct {
	Job      json.RawMessage   `json:"job"`
	Events   []json.RawMessage `json:"events,omitempty"`  // history.Event
	Samples  []json.RawMessage `json:"samples,omitempty"` // history.Sample
	Series   json.RawMessage   `json:"series,omitempty"`
	Timeline json.RawMessage   `json:"timeline,omitempty"`
	Summary  json.RawMessage   `json:"summary,omitempty"`
}

// build returns the documents (the api/NAME ones, which together are the
// stream's snapshot) and the delta since the last publish, and records
// what it covered. final: the job's summary at its end.
func (b *board) build(head jobHead, v job.View, in boardData, now time.Time, final *Summary) (map[string]json.RawMessage, json.RawMessage, error) {
	docs := map[string]json.RawMessage{}
	for name, d := range b.sent.docs {
		docs[name] = d
	}
	var delta deltaDoc
	var err error
	enc := func(name string, doc any) json.RawMessage {
		if err != nil {
			return nil
		}
		var data []byte
		if data, err = json.Marshal(doc); err != nil {
			err = fmt.Errorf("encode %s: %w", name, err)
		}
		docs[name] = data
		return data
	}
	delta.Job = enc("job", newJobDoc(head, v, in.eta, now))
	newEvents := len(in.events) > 0 || !b.sent.any
	if newEvents && err == nil {
		delta.Events, err = b.sent.events.add(in.oldest, in.events)
		docs["events"] = b.sent.events.doc()
		b.sent.lastEvent = b.sent.events.last(b.sent.lastEvent)
	}
	if err == nil {
		delta.Samples, delta.Series, err = b.series(in, v)
		switch {
		case delta.Series != nil:
			docs["series"] = delta.Series
		case delta.Samples != nil:
			docs["series"] = b.sent.series.doc()
		}
	}
	if mark := newTimelineMark(in, v, b.sent.lastEvent); mark != b.sent.timeline || !b.sent.any {
		delta.Timeline = enc("timeline", newTimelineDoc(in.segments, v))
		b.sent.timeline = mark
	}
	if sum := enc("summary", summaryNow(v, now, final)); final != nil || newEvents {
		delta.Summary = sum
	}
	if err != nil {
		return nil, nil, err
	}
	b.sent.docs = docs
	data, err := json.Marshal(delta)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the delta: %w", err)
	}
	return docs, data, nil
}

// series encodes the samples new since the last publish, and says how the
// series changed: those samples only, or (thinned, new evaluations, the
// first time) the whole document; neither when it did not.
func (b *board) series(in boardData, v job.View) ([]json.RawMessage, json.RawMessage, error) {
	added, whole, err := b.sent.series.update(b.sent.any, in.stride, in.from, in.samples, v.Summary.Evaluations)
	switch {
	case err != nil:
		return nil, nil, err
	case whole:
		return nil, b.sent.series.doc(), nil
	case len(added) == 0:
		return nil, nil, nil
	}
	return added, nil, nil
}

func newJobDoc(head jobHead, v job.View, eta *float64, now time.Time) jobDoc {
	p := v.Progress
	d := jobDoc{jobHead: head, Phase: v.Phase.String(), StartedAt: v.Summary.StartedAt, ETASeconds: eta,
		Epoch: p.Epoch, NumEpochs: p.NumEpochs, EpochsDone: p.EpochsDone, RecordsDone: p.RecordsDone, RecordsTotal: p.RecordsTotal,
		Epochs:       []epochDoc{},
		Workers:      workersDoc{Target: v.Target, Min: v.MinWorkers, Max: v.MaxWorkers, Running: v.WorkersRunning, Pending: v.WorkersPending},
		PS:           psDoc{Count: v.NumPS, Target: v.PSTarget, Running: v.PSRunning, Pending: v.PSPending, Layout: v.PSLayout},
		Ring:         ringDoc{Version: v.RingVersion, WorldSize: v.WorldSize},
		ModelVersion: v.ModelVersion}
	if v.Summary.StartedAt != nil {
		d.ElapsedSeconds = math.Round(now.Sub(*v.Summary.StartedAt).Seconds()*10) / 10
	}
	for _, c := range v.Coverage {
		d.Epochs = append(d.Epochs, epochDoc{Epoch: c.Epoch, Records: c.Records, Trained: c.RecordsTrained,
			Twice: c.RecordsTrainedTwice, Missed: c.RecordsMissed, Final: c.Finished})
	}
	return d
}

func newTimelineMark(in boardData, v job.View, lastEvent int64) timelineMark {
	m := timelineMark{lastEvent: lastEvent, segments: len(in.segments), reshards: len(v.Summary.PS.Reshards)}
	for _, s := range in.segments {
		if s.Ended == nil {
			m.open++
		} else {
			m.ended++
		}
	}
	if v.Summary.Ring != nil {
		m.recoveries = len(v.Summary.Ring.Recoveries)
	}
	return m
}

func newTimelineDoc(segments []history.Segment, v job.View) timelineDoc {
	d := timelineDoc{Slots: []slotDoc{}, Ring: []job.RingRecovery{}, Reshards: orEmpty(v.Summary.PS.Reshards)}
	if v.Summary.Ring != nil {
		d.Ring = orEmpty(v.Summary.Ring.Recoveries)
	}
	type key struct {
		role cluster.Role
		slot int
	}
	index := map[key]int{}
	for _, s := range segments {
		k := key{s.Role, s.Slot}
		i, ok := index[k]
		if !ok {
			i = len(d.Slots)
			index[k] = i
			d.Slots = append(d.Slots, slotDoc{Role: s.Role, Slot: s.Slot})
		}
		d.Slots[i].Segments = append(d.Slots[i].Segments, s)
	}
	slices.SortFunc(d.Slots, func(a, b slotDoc) int {
		// Workers first: "worker" > "ps".
		return cmp.Or(-cmp.Compare(a.Role, b.Role), cmp.Compare(a.Slot, b.Slot))
	})
	return d
}

// summaryNow is the summary as of now (status "running" until the end),
// or the final one.
func summaryNow(v job.View, now time.Time, final *Summary) *Summary {
	if final != nil {
		return final
	}
	s := v.Summary
	s.Status = "running"
	if v.Summary.StartedAt != nil {
		s.DurationSeconds = math.Round(now.Sub(*v.Summary.StartedAt).Seconds()*1000) / 1000
	}
	s.Epochs = nil
	for _, c := range v.Coverage {
		s.Epochs = append(s.Epochs, job.EpochSummary{Epoch: c.Epoch, Records: c.Records, RecordsTrained: c.RecordsTrained,
			RecordsTrainedTwice: c.RecordsTrainedTwice, RecordsMissed: c.RecordsMissed})
	}
	s.Evaluations = orEmpty(s.Evaluations)
	return &s
}

// orEmpty makes a nil slice encode as [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
