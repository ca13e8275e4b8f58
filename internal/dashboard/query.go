package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// SeqList is a published list of items numbered by increasing seqs (a
// job's events), each encoded once by the publisher. api/NAME?since=SEQ&
// limit=N answers {"oldest":O,FIELD:[the items after SEQ, at most N]}
// from these bytes: a query copies, it encodes nothing, and it takes no
// lock. Once published it must not change; appending beyond its length to
// a slice it shares is fine.
type SeqList struct {
	Field  string // the array's name in the answer: "events"
	Oldest int64  // the oldest seq the publisher holds: above since+1 says some were dropped
	Seqs   []int64
	Items  []json.RawMessage // Items[i] is the item numbered Seqs[i]
}

// after returns the items numbered above since, at most limit (≤ 0: all).
func (l *SeqList) after(since int64, limit int) []json.RawMessage {
	i := sort.Search(len(l.Seqs), func(i int) bool { return l.Seqs[i] > since })
	items := l.Items[i:]
	if limit > 0 && len(items) > limit {
		items = items[:limit]
	}
	return items
}

// listQuery is a parsed ?since=SEQ&limit=N.
type listQuery struct {
	since int64
	limit int
}

// parseListQuery reads since (≥ 0, default 0) and limit (≥ 1, default
// all); anything else is an error that says what is wrong in one line.
func parseListQuery(raw string) (listQuery, error) {
	var q listQuery
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, fmt.Errorf("bad query %q: %w", raw, err)
	}
	for name, vs := range vals {
		if len(vs) != 1 {
			return q, fmt.Errorf("%s given %d times, want once", name, len(vs))
		}
		n, err := strconv.ParseInt(vs[0], 10, 64)
		switch name {
		case "since":
			if err != nil || n < 0 {
				return q, fmt.Errorf("bad since %q: want an event seq, a whole number ≥ 0", vs[0])
			}
			q.since = n
		case "limit":
			if err != nil || n < 1 || n > 1<<31-1 {
				return q, fmt.Errorf("bad limit %q: want a whole number ≥ 1", vs[0])
			}
			q.limit = int(n)
		default:
			return q, fmt.Errorf("unknown parameter %q: want since or limit", name)
		}
	}
	return q, nil
}

// serveQuery is GET api/NAME?since=SEQ&limit=N on a published SeqList.
func (h *Hub) serveQuery(w http.ResponseWriter, r *http.Request, st *state, name string) {
	l, ok := st.lists[name]
	if !ok {
		if _, isDoc := st.docs[name]; isDoc {
			http.Error(w, "api/"+name+" takes no parameters", http.StatusBadRequest)
		} else {
			http.Error(w, "no such document", http.StatusNotFound)
		}
		return
	}
	q, err := parseListQuery(r.URL.RawQuery)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	items := l.after(q.since, q.limit)
	size := 96 + len(l.Field) + len(items)
	for _, it := range items {
		size += len(it)
	}
	b := appendHead(make([]byte, 0, size), h.boot, st.seq)
	b = append(b, `,"oldest":`...)
	b = strconv.AppendInt(b, l.Oldest, 10)
	b = append(b, `,`...)
	b = strconv.AppendQuote(b, l.Field)
	b = append(b, `:[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	b = append(b, "]}"...)
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Content-Length", strconv.Itoa(len(b)))
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}
