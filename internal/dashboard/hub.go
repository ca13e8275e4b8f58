// Package dashboard serves a job's live dashboard over HTTP: a Hub that the
// master publishes pre-encoded JSON documents to, a Server-Sent Events stream
// of them (api/stream), the latest documents as plain JSON (api/NAME) and the
// embedded page (assets/). Publishing never waits for a reader: it swaps an
// immutable state behind an atomic pointer and closes a channel, and each
// stream reads that shared state at its own pace (docs/design-dashboard.md,
// decisions 3 and 4). The package knows nothing of the job core.
package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options tune a Hub; zero fields take the defaults in brackets.
type Options struct {
	Interval     time.Duration // least time between two writes to one stream [250ms]
	WriteTimeout time.Duration // deadline of each write; a stream missing it is dropped [5s]
	Heartbeat    time.Duration // a comment line after this much silence, to find dead peers [15s]
	MaxStreams   int           // concurrent streams; more get 503 [16]
	RingItems    int           // deltas kept for resuming streams [1000]
	RingBytes    int           // bytes of framed deltas kept [1 MiB]
	Logger       *slog.Logger  // [discard]
	// Page is the file under assets/ served at / [index.html, the job's
	// page]; the autoscaler serves cluster.html.
	Page string
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Interval, 250*time.Millisecond)
	def(&o.WriteTimeout, 5*time.Second)
	def(&o.Heartbeat, 15*time.Second)
	if o.MaxStreams <= 0 {
		o.MaxStreams = 16
	}
	if o.RingItems <= 0 {
		o.RingItems = 1000
	}
	if o.RingBytes <= 0 {
		o.RingBytes = 1 << 20
	}
	if o.Page == "" {
		o.Page = "index.html"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Update is one Publish. The hub keeps the byte slices it is given: the
// caller must not modify them afterwards. Every document is one JSON value
// (compact or indented); objects get the envelope's fields spliced in,
// anything else is put under "data" (see envelope).
type Update struct {
	// Snapshot is the stream's full document: sent as event "snapshot" to a
	// stream that (re)connects or fell behind, and as event "ended" once the
	// job ended. Nil keeps the previous one.
	Snapshot json.RawMessage
	// Delta is what changed since the previous Publish, sent as event
	// "delta". Nil when nothing changed for the stream.
	Delta json.RawMessage
	// Docs are served at api/NAME (NAME may hold slashes; "stream" is
	// taken). A name absent keeps its previous document; a nil document
	// removes it.
	Docs map[string]json.RawMessage
	// Lists are served at api/NAME?since=SEQ&limit=N (see SeqList); as
	// with Docs, a name absent keeps its list and a nil one removes it.
	// Without a query api/NAME is still the document in Docs.
	Lists map[string]*SeqList
	// Ended says the job ended: streams send their pending deltas, then
	// "ended" with the Snapshot, and return.
	Ended bool
}

// Hub holds the latest published state and serves it to HTTP readers. Its
// methods are safe for concurrent use.
type Hub struct {
	opts Options
	boot string
	mu   sync.Mutex // serializes publishers only; readers never take it
	cur  atomic.Pointer[state]
	sem  chan struct{} // one token per open stream
	done chan struct{} // closed by Close
	once sync.Once

	assets assets

	// testStreamDone, when set (by tests), hears why each stream returned.
	testStreamDone func(error)
	// testWrite, when set (by tests), hears each stream's writes begin
	// and end.
	testWrite func(s *stream, begin bool)
}

// state is immutable once stored in Hub.cur, except for the lazily framed
// snapshot (guarded by its sync.Once).
type state struct {
	seq      uint64 // publishes so far; 0 before the first
	snapshot []byte
	docs     map[string][]byte
	lists    map[string]*SeqList
	ended    bool
	// ring holds framed deltas, oldest first, with increasing seqs. Every
	// delta with a seq above ringFrom is in it, so a stream that has seen
	// ringFrom or later can resume from it.
	ring      []item
	ringFrom  uint64
	ringBytes int
	deadBytes int           // dropped frames still held by ring's backing array
	changed   chan struct{} // closed when the next state replaces this one

	snapOnce  sync.Once
	snapFrame []byte // "data: …" lines of the snapshot with its envelope
}

type item struct {
	seq   uint64
	frame []byte // a whole "event: delta" message, blank line included
}

// New returns a hub with a fresh random boot ID, so that a browser that
// reconnects to another master (after a failover) resyncs.
func New(opts Options) *Hub {
	opts = opts.withDefaults()
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	h := &Hub{
		opts:   opts,
		boot:   hex.EncodeToString(b[:]),
		sem:    make(chan struct{}, opts.MaxStreams),
		done:   make(chan struct{}),
		assets: loadAssets(),
	}
	h.cur.Store(&state{changed: make(chan struct{}), docs: map[string][]byte{}, lists: map[string]*SeqList{}})
	return h
}

// Boot is this hub's ID, the BOOT of every event ID "BOOT.SEQ".
func (h *Hub) Boot() string { return h.boot }

// Seq is the number of publishes so far.
func (h *Hub) Seq() uint64 { return h.cur.Load().seq }

// Streams is the number of streams open now.
func (h *Hub) Streams() int { return len(h.sem) }

// Publish makes u the current state. It never waits for readers: it frames
// the delta, swaps a pointer and wakes the streams. After Close it does
// nothing.
func (h *Hub) Publish(u Update) {
	select {
	case <-h.done:
		return
	default:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.cur.Load()
	if old.ended {
		return // the end is final; a late publisher changes nothing
	}
	st := &state{
		seq:       old.seq + 1,
		snapshot:  old.snapshot,
		ended:     u.Ended,
		ring:      old.ring,
		ringFrom:  old.ringFrom,
		ringBytes: old.ringBytes,
		deadBytes: old.deadBytes,
		changed:   make(chan struct{}),
	}
	if u.Snapshot != nil {
		st.snapshot = u.Snapshot
	}
	st.docs = merge(old.docs, u.Docs, func(d json.RawMessage) ([]byte, bool) { return d, d != nil })
	st.lists = merge(old.lists, u.Lists, func(l *SeqList) (*SeqList, bool) { return l, l != nil })
	if u.Delta != nil {
		frame := appendEvent(make([]byte, 0, len(u.Delta)+frameSlack), "delta", h.boot, st.seq, u.Delta)
		st.push(item{seq: st.seq, frame: frame}, h.opts)
	}
	h.cur.Store(st)
	close(old.changed)
}

// merge returns old updated by upd, where a value that keep refuses (nil)
// removes its name; old is shared with older states, so it is copied.
func merge[U, V any](old map[string]V, upd map[string]U, keep func(U) (V, bool)) map[string]V {
	if len(upd) == 0 {
		return old
	}
	out := make(map[string]V, len(old)+len(upd))
	for k, v := range old {
		out[k] = v
	}
	for k, u := range upd {
		if v, ok := keep(u); ok {
			out[k] = v
		} else {
			delete(out, k)
		}
	}
	return out
}

// push appends it to the ring and drops the oldest items beyond the limits.
// Older states share the ring's backing array but only see indices below
// their own length, which push never writes; so no copy is needed until
// the array is full, or holds more dropped bytes than live ones could be.
func (st *state) push(it item, o Options) {
	if len(st.ring) == cap(st.ring) || st.deadBytes > o.RingBytes {
		grown := make([]item, len(st.ring), 2*len(st.ring)+16)
		copy(grown, st.ring)
		st.ring = grown
		st.deadBytes = 0
	}
	st.ring = append(st.ring, it)
	st.ringBytes += len(it.frame)
	for len(st.ring) > 0 && (len(st.ring) > o.RingItems || st.ringBytes > o.RingBytes) {
		st.ringFrom = st.ring[0].seq
		st.ringBytes -= len(st.ring[0].frame)
		st.deadBytes += len(st.ring[0].frame)
		st.ring = st.ring[1:]
	}
}

// after returns the deltas with a seq above seq, and false when some of
// them are no longer in the ring.
func (st *state) after(seq uint64) ([]item, bool) {
	if seq < st.ringFrom || seq > st.seq {
		return nil, false
	}
	i := sort.Search(len(st.ring), func(i int) bool { return st.ring[i].seq > seq })
	return st.ring[i:], true
}

// snapshotData returns the snapshot's "data:" lines, framed once per state
// and shared by every stream that needs it.
func (st *state) snapshotData(boot string) []byte {
	st.snapOnce.Do(func() {
		st.snapFrame = appendData(make([]byte, 0, len(st.snapshot)+frameSlack), boot, st.seq, st.snapshot)
	})
	return st.snapFrame
}

// Close ends every stream: each sends its pending deltas, then "ended" if
// the job ended, and returns; a browser whose job did not end reconnects,
// to the next master. New streams are refused and Publish does nothing.
func (h *Hub) Close() {
	h.once.Do(func() { close(h.done) })
}

// eventID is the SSE id of a state: "BOOT.SEQ".
func eventID(boot string, seq uint64) string {
	return boot + "." + strconv.FormatUint(seq, 10)
}
