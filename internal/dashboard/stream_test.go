package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestStreamFraming(t *testing.T) {
	h, srv := newServer(t, Options{Interval: 1})
	// Indented JSON: its line breaks must not split the data line.
	h.Publish(Update{Snapshot: raw("{\n  \"job\": \"mnist\",\n  \"workers\": [1, 2]\n}")})
	s := openStream(t, srv.URL, "")
	if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	if cc := s.resp.Header.Get("Cache-Control"); cc != "no-cache" {
		t.Fatalf("Cache-Control %q", cc)
	}
	first := <-s.events
	if first.Retry != 1000 {
		t.Fatalf("first message %+v, want retry: 1000", first)
	}
	d := wantEvent(t, s.next(t), "snapshot", h, 1)
	if d["job"] != "mnist" || len(d["workers"].([]any)) != 2 {
		t.Fatalf("snapshot data %v", d)
	}
	h.Publish(Update{Delta: raw(`{"workers":[1,2,3]}`)})
	d = wantEvent(t, s.next(t), "delta", h, 2)
	if len(d["workers"].([]any)) != 3 {
		t.Fatalf("delta data %v", d)
	}
	// A publish with no delta sends nothing; the next delta has its own seq.
	h.Publish(Update{Snapshot: raw(`{"job":"mnist","workers":[]}`)})
	h.Publish(Update{Delta: raw(`{"workers":[]}`)})
	wantEvent(t, s.next(t), "delta", h, 4)

	// HEAD answers at once and holds no slot.
	resp, err := http.Head(srv.URL + "/api/stream")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD api/stream: %v %v", resp, err)
	}
	if n := h.Streams(); n != 1 {
		t.Fatalf("%d streams after a HEAD, want 1", n)
	}
}

func TestStreamWaitsForFirstPublish(t *testing.T) {
	h, srv := newServer(t, Options{Interval: 1})
	s := openStream(t, srv.URL, "")
	h.Publish(Update{Snapshot: raw(`{"a":1}`), Delta: raw(`{"a":1}`)})
	wantEvent(t, s.next(t), "snapshot", h, 1)
}

func TestStreamResume(t *testing.T) {
	h, srv := newServer(t, Options{Interval: 1})
	h.Publish(Update{Snapshot: raw(`{"n":1}`)})
	for n := 2; n <= 3; n++ {
		h.Publish(Update{Snapshot: raw(fmt.Sprintf(`{"n":%d}`, n)), Delta: raw(fmt.Sprintf(`{"n":%d}`, n))})
	}
	s := openStream(t, srv.URL, eventID(h.Boot(), 2))
	if d := wantEvent(t, s.next(t), "delta", h, 3); d["n"] != float64(3) {
		t.Fatalf("resumed delta %v", d)
	}
	h.Publish(Update{Delta: raw(`{"n":4}`)})
	wantEvent(t, s.next(t), "delta", h, 4)
}

// TestStreamResync: a stream that cannot resume from the ring gets a
// snapshot of the current state.
func TestStreamResync(t *testing.T) {
	h, srv := newServer(t, Options{Interval: 1, RingItems: 2})
	for n := 1; n <= 5; n++ {
		h.Publish(Update{Snapshot: raw(fmt.Sprintf(`{"n":%d}`, n)), Delta: raw(fmt.Sprintf(`{"n":%d}`, n))})
	}
	// The ring holds seqs 4 and 5: resuming from 3 or later works.
	for _, c := range []struct {
		lastID, want string
		seq          uint64
	}{
		{eventID(h.Boot(), 3), "delta", 4},
		{eventID(h.Boot(), 2), "snapshot", 5},           // older than the ring
		{eventID(h.Boot(), 99), "snapshot", 5},          // from the future
		{eventID("0123456789abcdef", 5), "snapshot", 5}, // another master
		{"garbage", "snapshot", 5},
		{eventID(h.Boot(), 5), "", 0}, // up to date: waits for the next delta
	} {
		t.Run(c.lastID, func(t *testing.T) {
			s := openStream(t, srv.URL, c.lastID)
			if c.want == "" {
				h.Publish(Update{Delta: raw(`{"n":6}`)})
				wantEvent(t, s.next(t), "delta", h, h.Seq())
				return
			}
			wantEvent(t, s.next(t), c.want, h, c.seq)
		})
	}
}

// countFlushes wraps a ResponseWriter and counts the stream's writes.
type countFlushes struct {
	http.ResponseWriter
	n *atomic.Int32
}

func (c countFlushes) FlushError() error {
	c.n.Add(1)
	return http.NewResponseController(c.ResponseWriter).Flush()
}

func (c countFlushes) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// TestStreamCoalesces: deltas published within one Interval of a write go
// out together in the next write; Close cuts the wait short and the stream
// ends with no "ended", so that the browser reconnects to the next master.
func TestStreamCoalesces(t *testing.T) {
	h := New(Options{Interval: 1 << 62})
	var flushes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Handler().ServeHTTP(countFlushes{w, &flushes}, r)
	}))
	t.Cleanup(srv.Close)
	h.Publish(Update{Snapshot: raw(`{}`)})
	s := openStream(t, srv.URL, "")
	wantEvent(t, s.next(t), "snapshot", h, 1)
	for n := 2; n <= 51; n++ {
		h.Publish(Update{Delta: raw(fmt.Sprintf(`{"n":%d}`, n))})
	}
	h.Close()
	for n := 2; n <= 51; n++ {
		wantEvent(t, s.next(t), "delta", h, uint64(n))
	}
	s.end(t)
	if n := flushes.Load(); n != 2 {
		t.Fatalf("%d writes, want 2 (the snapshot, then the 50 deltas at once)", n)
	}
	if r := openStream(t, srv.URL, ""); r.resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a stream after Close: %s", r.resp.Status)
	}
}

func TestStreamEnded(t *testing.T) {
	h, srv := newServer(t, Options{Interval: 1})
	h.Publish(Update{Snapshot: raw(`{"phase":"running"}`)})
	s := openStream(t, srv.URL, "")
	wantEvent(t, s.next(t), "snapshot", h, 1)
	h.Publish(Update{Snapshot: raw(`{"phase":"succeeded"}`), Delta: raw(`{"phase":"succeeded"}`), Ended: true})
	wantEvent(t, s.next(t), "delta", h, 2)
	if d := wantEvent(t, s.next(t), "ended", h, 2); d["phase"] != "succeeded" {
		t.Fatalf("ended data %v", d)
	}
	s.end(t)

	// The end is final: a late publish changes nothing, and a stream opened
	// afterwards gets "ended" alone, with the whole final document.
	h.Publish(Update{Snapshot: raw(`{"phase":"zombie"}`)})
	late := openStream(t, srv.URL, "")
	if d := wantEvent(t, late.next(t), "ended", h, 2); d["phase"] != "succeeded" {
		t.Fatalf("late ended data %v", d)
	}
	late.end(t)
}

// TestCloseAfterEnd: Close lets a stream that has not yet sent the end send
// it, then return.
func TestCloseAfterEnd(t *testing.T) {
	h, srv := newServer(t, Options{Interval: 1 << 62})
	h.Publish(Update{Snapshot: raw(`{"phase":"running"}`)})
	s := openStream(t, srv.URL, "")
	wantEvent(t, s.next(t), "snapshot", h, 1)
	h.Publish(Update{Snapshot: raw(`{"phase":"failed"}`), Ended: true})
	h.Close()
	if d := wantEvent(t, s.next(t), "ended", h, 2); d["phase"] != "failed" {
		t.Fatalf("ended data %v", d)
	}
	s.end(t)
}

func TestStreamLimit(t *testing.T) {
	ended := make(chan error, 32)
	h, srv := newServer(t, Options{Interval: 1}, func(err error) { ended <- err })
	h.Publish(Update{Snapshot: raw(`{}`)})
	var streams []*sse
	for range 16 {
		s := openStream(t, srv.URL, "")
		wantEvent(t, s.next(t), "snapshot", h, 1) // admitted
		streams = append(streams, s)
	}
	over := openStream(t, srv.URL, "")
	if over.resp.StatusCode != http.StatusServiceUnavailable || over.resp.Header.Get("Retry-After") == "" {
		t.Fatalf("17th stream: %s, Retry-After %q", over.resp.Status, over.resp.Header.Get("Retry-After"))
	}
	streams[0].cancel()
	<-ended
	// The token is given back after the stream's end is reported; the next
	// stream may race it, so it tries until admitted (each try is an event).
	for {
		s := openStream(t, srv.URL, "")
		if s.resp.StatusCode == http.StatusOK {
			wantEvent(t, s.next(t), "snapshot", h, 1)
			break
		}
		s.cancel()
	}
}

// TestStreamsFollowPublishers: concurrent publishers and readers (for the
// race detector); every reader sees seqs only grow, and deltas arrive in
// order unless a snapshot replaced them.
func TestStreamsFollowPublishers(t *testing.T) {
	h, srv := newServer(t, Options{Interval: 1, RingItems: 8})
	h.Publish(Update{Snapshot: raw(`{"n":0}`)})
	const total = 400
	var wg sync.WaitGroup
	for r := range 4 {
		s := openStream(t, srv.URL, "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for last < total+2 {
				var ev event
				select {
				case e, ok := <-s.events:
					if !ok {
						t.Errorf("reader %d: stream ended: %v", r, <-s.err)
						return
					}
					ev = e
				case <-time.After(guard):
					t.Errorf("reader %d: no event after seq %d", r, last)
					return
				}
				if ev.Name == "" {
					continue // retry
				}
				var seq uint64
				if _, err := fmt.Sscanf(ev.ID, h.Boot()+".%d", &seq); err != nil {
					t.Errorf("reader %d: id %q", r, ev.ID)
					return
				}
				if ev.Name == "delta" && seq <= last || ev.Name == "snapshot" && seq < last {
					t.Errorf("reader %d: %s %d after %d", r, ev.Name, seq, last)
					return
				}
				last = seq
			}
		}()
	}
	var pub sync.WaitGroup
	for p := range 2 {
		pub.Add(1)
		go func() {
			defer pub.Done()
			for n := range total / 2 {
				d := raw(fmt.Sprintf(`{"p":%d,"n":%d}`, p, n))
				h.Publish(Update{Snapshot: d, Delta: d, Docs: map[string]json.RawMessage{"x": d}})
			}
		}()
	}
	pub.Wait()
	h.Publish(Update{Delta: raw(`{"last":true}`)})
	wg.Wait()
}
