package master

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/history"
	"elasticdl/internal/master/job"
)

// getDoc GETs url into v; false when it is not there (yet).
func getDoc(t *testing.T, url string, v any) bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return true
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sseEvent reads the stream's next event: its name and data.
func sseEvent(t *testing.T, r *bufio.Reader) (name, data string) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && name != "":
			return name, data
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data += line[len("data: "):]
		}
	}
}

// TestDashboardServesTheJob: a master with a dashboard listener serves
// api/job (both workers running), api/events (their launches and running)
// and a stream whose snapshot holds every document, and ends the stream
// with the job.
func TestDashboardServesTheJob(t *testing.T) {
	cfg := mlpJobConfig(t)
	cfg.JobName, cfg.NumWorkers, cfg.NumPS = "board", 2, 1
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String() + "/"
	fb := newFakeBackend()
	m, err := New(cfg, Deps{Backend: fb, Registry: zooRegistry(t), Dashboard: ln})
	if err != nil {
		t.Fatal(err)
	}
	for id := range 2 {
		fb.events <- cluster.Event{Role: cluster.Worker, ID: id, Phase: cluster.Running}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(ctx)
		done <- err
	}()
	defer func() { cancel(); <-done }()

	var jd struct {
		API     int        `json:"api"`
		Boot    string     `json:"boot"`
		Job     string     `json:"job"`
		Phase   string     `json:"phase"`
		Model   string     `json:"model"`
		Workers workersDoc `json:"workers"`
	}
	poll(t, "api/job with both workers running", func() bool {
		return getDoc(t, base+"api/job", &jd) && jd.Workers.Running == 2
	})
	if jd.API != 1 || jd.Boot == "" || jd.Job != "board" || jd.Phase != "training" || jd.Model != "fashion_mnist.mlp" || jd.Workers.Target != 2 {
		t.Errorf("api/job: %+v", jd)
	}
	var ed eventsDoc
	poll(t, "api/events with 3 launches and 2 running", func() bool {
		n := map[string]int{}
		if getDoc(t, base+"api/events", &ed) {
			for _, e := range ed.Events {
				n[e.Kind]++
			}
		}
		return n[job.OccurLaunched] == 3 && n[job.OccurRunning] == 2
	})
	if ed.Oldest != 1 || ed.Events[0].Seq != 1 {
		t.Errorf("api/events: oldest %d, first %+v", ed.Oldest, ed.Events[0])
	}
	var q eventsDoc
	if !getDoc(t, base+"api/events?since=2&limit=2", &q) || q.Oldest != 1 || len(q.Events) != 2 || q.Events[0].Seq != 3 || q.Events[1].Seq != 4 {
		t.Errorf("api/events?since=2&limit=2: %+v", q)
	}

	resp, err := http.Get(base + "api/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	name, data := sseEvent(t, r)
	var snap map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &snap); name != "snapshot" || err != nil {
		t.Fatalf("the stream's first event: %s %v", name, err)
	}
	for _, k := range []string{"api", "boot", "seq", "job", "events", "series", "timeline", "summary"} {
		if snap[k] == nil {
			t.Errorf("the snapshot has no %q", k)
		}
	}
	cancel()
	for name != "ended" {
		name, data = sseEvent(t, r)
	}
	if !strings.Contains(data, `"status":"failed"`) {
		t.Errorf("ended: %.300s, want the final summary", data)
	}
	// The end closes every lane: the PS and workers the master stopped
	// after its last step raise no exit of their own.
	var end struct {
		Timeline struct {
			Slots []struct {
				Role     string
				Segments []history.Segment
			}
		}
	}
	if err := json.Unmarshal([]byte(data), &end); err != nil || len(end.Timeline.Slots) != 3 {
		t.Fatalf("ended's timeline: %v, %d slots", err, len(end.Timeline.Slots))
	}
	for _, sl := range end.Timeline.Slots {
		for _, sg := range sl.Segments {
			if sg.Ended == nil {
				t.Errorf("%s/%d (id %d) is still open after the end", sl.Role, sg.Slot, sg.ID)
			}
		}
	}
}

// TestDashboardAfterFailover: the master that takes over serves the
// restored history: the first master's events, then resumed.
func TestDashboardAfterFailover(t *testing.T) {
	reg := zooRegistry(t)
	cfg := mlpJobConfig(t)
	cfg.RunID, cfg.NumWorkers, cfg.NumPS = "run1", 2, 1
	store, file := &memStore{}, HistoryFileName(cfg.Output)
	first, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: reg, Store: store, HandOver: true, History: HistoryFile(file)})
	if err != nil {
		t.Fatal(err)
	}
	err = runUntil(t, first, "3 launches", func(p history.Persisted) bool { return kinds(p)[job.OccurLaunched] == 3 })
	if !errors.Is(err, ErrHandedOver) {
		t.Fatalf("first master: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	next, err := New(cfg, Deps{Backend: newFakeBackend(), Registry: reg, Store: store, HandOver: true, History: HistoryFile(file), Dashboard: ln})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := next.Run(ctx)
		done <- err
	}()
	defer func() { cancel(); <-done }()
	var ed eventsDoc
	poll(t, "api/events with the first master's launches and resumed", func() bool {
		n := map[string]int{}
		if getDoc(t, "http://"+ln.Addr().String()+"/api/events", &ed) {
			for _, e := range ed.Events {
				n[e.Kind]++
			}
		}
		return n[job.OccurLaunched] >= 3 && n[job.OccurResumed] == 1
	})
	if ed.Events[0].Seq != 1 || ed.Events[0].Kind != job.OccurPhase {
		t.Errorf("the first event served: %+v, want the first master's", ed.Events[0])
	}
}

// TestBoardDelta: a delta carries the job, only the events and samples
// new since the last publish, and the whole series once it was thinned.
func TestBoardDelta(t *testing.T) {
	b := &board{}
	h := history.New()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var v job.View
	publish := func() (docs map[string]json.RawMessage, d deltaDoc) {
		t.Helper()
		docs, data, err := b.build(jobHead{Job: "j"}, v, boardDataOf(h, v, b), at, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.sent.any = true
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatal(err)
		}
		return docs, d
	}
	h.Add([]job.Occurrence{{Kind: job.OccurPhase}, {Kind: job.OccurLaunched, Role: cluster.Worker}})
	h.Sample(v, at)
	docs, _ := publish()
	for _, name := range []string{"job", "events", "series", "timeline", "summary"} {
		if docs[name] == nil {
			t.Errorf("no %s document", name)
		}
	}
	h.Add([]job.Occurrence{{Kind: job.OccurRunning, Role: cluster.Worker}})
	at = at.Add(time.Second)
	h.Sample(v, at)
	_, d := publish()
	if len(d.Events) != 1 || !strings.HasPrefix(string(d.Events[0]), `{"seq":3,`) || len(d.Samples) != 1 || d.Series != nil || d.Job == nil || d.Timeline == nil {
		t.Fatalf("delta: %d events %+v, %d samples, series %s, timeline %s", len(d.Events), d.Events, len(d.Samples), d.Series, d.Timeline)
	}
	_, d = publish()
	if d.Events != nil || d.Samples != nil || d.Timeline != nil || d.Summary != nil || d.Job == nil {
		t.Errorf("a delta with nothing new: %+v", d)
	}
	for range history.MaxSamples {
		at = at.Add(time.Second)
		h.Sample(v, at)
	}
	if _, d = publish(); d.Series == nil || d.Samples != nil {
		t.Errorf("after thinning: series %d bytes, %d samples", len(d.Series), len(d.Samples))
	}
}

// boardDataOf is historyKeeper.boardInput on a bare history, for b.
func boardDataOf(h *history.History, v job.View, b *board) boardData {
	k := &historyKeeper{h: h}
	return k.boardInput(v, b.sent.lastEvent, b.sent.series.stride, len(b.sent.series.samples))
}

// TestBoardEncodesWhatIsNew: the series and events documents, joined
// from each sample and event encoded once, are what encoding them whole
// gives; a publish with no new sample keeps the series' bytes (no
// encoding), and the snapshot is the documents joined.
func TestBoardEncodesWhatIsNew(t *testing.T) {
	b := &board{}
	h := history.New()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v := job.View{Records: 0, Steps: 0}
	v.Summary.Evaluations = []job.EvalRecord{{Version: 3, Accuracy: 0.5, RecordsTrained: 10}}
	var docs map[string]json.RawMessage
	publish := func() {
		t.Helper()
		var err error
		docs, _, err = b.build(jobHead{Job: "j"}, v, boardDataOf(h, v, b), at, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.sent.any = true
		stride, ss := h.Samples()
		want, _ := json.Marshal(seriesDoc{StrideSeconds: stride.Seconds(), Samples: orEmpty(ss), Evals: v.Summary.Evaluations})
		if string(docs["series"]) != string(want) {
			t.Fatalf("series:\n%s\nwant\n%s", docs["series"], want)
		}
		oldest, all := h.Events(0, 0)
		want, _ = json.Marshal(eventsDoc{Oldest: oldest, Events: orEmpty(all)})
		if string(docs["events"]) != string(want) {
			t.Fatalf("events:\n%s\nwant\n%s", docs["events"], want)
		}
		var whole map[string]json.RawMessage
		if err := json.Unmarshal(joinDocs(docs), &whole); err != nil || len(whole) != len(docs) {
			t.Fatalf("the snapshot: %v, %d of %d documents", err, len(whole), len(docs))
		}
	}
	sample := func() {
		at = at.Add(time.Second)
		v.Records += 100
		v.Steps += 10
		v.LossSum += 5
		h.Sample(v, at)
	}
	h.Add([]job.Occurrence{{Kind: job.OccurPhase}})
	sample()
	publish()
	sample()
	h.Add([]job.Occurrence{{Kind: job.OccurLaunched, Role: cluster.Worker}})
	publish()
	before := docs["series"]
	publish() // no new sample, no new event
	if &docs["series"][0] != &before[0] {
		t.Error("a publish with no new sample encoded the series again")
	}
	for range history.MaxSamples { // thinned on the way
		sample()
	}
	publish()
	v.Summary.Evaluations = append(v.Summary.Evaluations, job.EvalRecord{Version: 9, Accuracy: 0.7, RecordsTrained: 900})
	sample()
	publish()
	if l := b.sent.events.list(); l.Oldest != 1 || len(l.Seqs) != 2 || l.Seqs[1] != 2 {
		t.Errorf("the events' list: oldest %d, seqs %v", l.Oldest, l.Seqs)
	}
}

// TestEventLogDrops: events the history dropped leave the log, and the
// lists published before keep theirs.
func TestEventLogDrops(t *testing.T) {
	var l eventLog
	ev := func(seqs ...int64) []history.Event {
		var out []history.Event
		for _, s := range seqs {
			out = append(out, history.Event{Seq: s, Occurrence: job.Occurrence{Kind: job.OccurRunning}})
		}
		return out
	}
	if added, err := l.add(1, ev(1, 2, 3)); err != nil || len(added) != 3 {
		t.Fatalf("add: %d, %v", len(added), err)
	}
	first := l.list()
	if added, err := l.add(3, ev(4, 5)); err != nil || len(added) != 2 {
		t.Fatalf("add: %d, %v", len(added), err)
	}
	if second := l.list(); second.Oldest != 3 || len(second.Seqs) != 3 || second.Seqs[0] != 3 || second.Seqs[2] != 5 {
		t.Errorf("after dropping: oldest %d, seqs %v", second.Oldest, second.Seqs)
	}
	if first.Oldest != 1 || len(first.Seqs) != 3 || first.Seqs[0] != 1 || !strings.Contains(string(first.Items[2]), `"seq":3`) {
		t.Errorf("the first list changed: oldest %d, seqs %v", first.Oldest, first.Seqs)
	}
	if got := string(l.doc()); !strings.HasPrefix(got, `{"oldest":3,"events":[{"seq":3,`) {
		t.Errorf("doc: %s", got)
	}
}
