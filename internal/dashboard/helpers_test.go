package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// guard bounds every wait in these tests; they wait for events, and this
// only turns a hang into a failure.
const guard = 20 * time.Second

// event is one parsed SSE message.
type event struct {
	Name, ID, Data string
	Retry          int
}

// doc decodes the event's data.
func (e event) doc(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(e.Data), &m); err != nil {
		t.Fatalf("event %s %s: data is not a JSON object: %v\n%s", e.Name, e.ID, err, e.Data)
	}
	return m
}

// sse reads a stream's events in a goroutine, per the SSE parsing rules
// (field lines until a blank line; ":" lines are comments).
type sse struct {
	resp   *http.Response
	cancel context.CancelFunc
	events chan event
	err    chan error // the read's end: io.EOF when the server closed
}

func openStream(t *testing.T, base, lastID string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/stream", nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &sse{resp: resp, cancel: cancel, events: make(chan event, 4096), err: make(chan error, 1)}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return s
	}
	go s.read()
	return s
}

func (s *sse) read() {
	r := bufio.NewReader(s.resp.Body)
	var ev event
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			s.err <- err
			close(s.events)
			return
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if ev != (event{}) {
				s.events <- ev
			}
			ev = event{}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			// a comment (heartbeat)
		case "event":
			ev.Name = value
		case "id":
			ev.ID = value
		case "data":
			if ev.Data != "" {
				ev.Data += "\n"
			}
			ev.Data += value
		case "retry":
			ev.Retry, _ = strconv.Atoi(value)
		default:
			s.err <- fmt.Errorf("unknown SSE field %q", line)
			close(s.events)
			return
		}
	}
}

// next returns the next event, skipping the "retry" message.
func (s *sse) next(t *testing.T) event {
	t.Helper()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("stream ended: %v", <-s.err)
			}
			if ev.Retry != 0 && ev.Name == "" {
				continue
			}
			return ev
		case <-time.After(guard):
			t.Fatal("no event in time")
		}
	}
}

// end waits for the server to end the stream, with no further event.
func (s *sse) end(t *testing.T) {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if ok {
			t.Fatalf("want the stream's end, got event %+v", ev)
		}
		if err := <-s.err; err != io.EOF {
			t.Fatalf("stream ended with %v, want EOF", err)
		}
	case <-time.After(guard):
		t.Fatal("stream did not end in time")
	}
}

// newServer serves a new hub with opts over httptest. onStreamEnd, if
// given, hears why each stream ended; it is set before serving, so that the
// stream goroutines see it.
func newServer(t *testing.T, opts Options, onStreamEnd ...func(error)) (*Hub, *httptest.Server) {
	t.Helper()
	return newServerHooked(t, opts, nil, onStreamEnd...)
}

// newServerHooked is newServer with a hook on the streams' writes.
func newServerHooked(t *testing.T, opts Options, onWrite func(*stream, bool), onStreamEnd ...func(error)) (*Hub, *httptest.Server) {
	t.Helper()
	h := New(opts)
	if len(onStreamEnd) > 0 {
		h.testStreamDone = onStreamEnd[0]
	}
	h.testWrite = onWrite
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(func() { h.Close(); srv.Close() })
	return h, srv
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// wantEvent checks an event's name and id and returns its data.
func wantEvent(t *testing.T, ev event, name string, h *Hub, seq uint64) map[string]any {
	t.Helper()
	if ev.Name != name || ev.ID != eventID(h.Boot(), seq) {
		t.Fatalf("got event %q id %q, want %q id %q", ev.Name, ev.ID, name, eventID(h.Boot(), seq))
	}
	d := ev.doc(t)
	if d["api"] != float64(APIVersion) || d["boot"] != h.Boot() || d["seq"] != float64(seq) {
		t.Fatalf("event %s %s: envelope %v %v %v", name, ev.ID, d["api"], d["boot"], d["seq"])
	}
	return d
}
