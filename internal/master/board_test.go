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
		docs, data, err := b.build(jobHead{Job: "j"}, v, boardDataOf(h, v, b.sent.lastEvent), at, nil)
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
	if len(d.Events) != 1 || d.Events[0].Seq != 3 || len(d.Samples) != 1 || d.Series != nil || d.Job == nil || d.Timeline == nil {
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

// boardDataOf is historyKeeper.boardInput on a bare history.
func boardDataOf(h *history.History, v job.View, since int64) boardData {
	k := &historyKeeper{h: h}
	return k.boardInput(v, since)
}
