package dashboard

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// eventsList is a SeqList of events 3…7 (1 and 2 were dropped).
func eventsList() *SeqList {
	l := &SeqList{Field: "events", Oldest: 3}
	for seq := int64(3); seq <= 7; seq++ {
		l.Seqs = append(l.Seqs, seq)
		b, _ := json.Marshal(map[string]any{"seq": seq, "kind": "running"})
		l.Items = append(l.Items, b)
	}
	return l
}

func TestListQuery(t *testing.T) {
	h, srv := newServer(t, Options{})
	h.Publish(Update{Docs: map[string]json.RawMessage{"events": raw(`{"oldest":3,"events":[]}`), "job": raw(`{}`)},
		Lists: map[string]*SeqList{"events": eventsList()}})
	for _, c := range []struct {
		query  string
		oldest float64
		seqs   []float64
	}{
		{"since=0", 3, []float64{3, 4, 5, 6, 7}},
		{"since=4", 3, []float64{5, 6, 7}},
		{"since=4&limit=2", 3, []float64{5, 6}},
		{"limit=1", 3, []float64{3}},
		{"since=7", 3, nil},
		{"since=100", 3, nil},
	} {
		resp, body := get(t, srv.URL+"/api/events?"+c.query)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("?%s: %s %q\n%s", c.query, resp.Status, resp.Header.Get("Content-Type"), body)
		}
		var d struct {
			API    int              `json:"api"`
			Boot   string           `json:"boot"`
			Seq    uint64           `json:"seq"`
			Oldest float64          `json:"oldest"`
			Events []map[string]any `json:"events"`
		}
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatalf("?%s: %v\n%s", c.query, err, body)
		}
		var seqs []float64
		for _, e := range d.Events {
			seqs = append(seqs, e["seq"].(float64))
		}
		if d.API != APIVersion || d.Boot != h.Boot() || d.Seq != 1 || d.Oldest != c.oldest || !equal(seqs, c.seqs) || d.Events == nil {
			t.Errorf("?%s: %s", c.query, body)
		}
	}
	// Without a query it is the published document.
	if _, body := get(t, srv.URL+"/api/events"); !strings.Contains(body, `"oldest":3,"events":[]`) {
		t.Errorf("api/events: %s", body)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Bad queries: 400 and one line that says what is wrong.
func TestListQueryRefused(t *testing.T) {
	h, srv := newServer(t, Options{})
	if resp, _ := get(t, srv.URL+"/api/events?since=1"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("before any publish: %s", resp.Status)
	}
	h.Publish(Update{Docs: map[string]json.RawMessage{"job": raw(`{}`)}, Lists: map[string]*SeqList{"events": eventsList()}})
	for _, c := range []struct{ path, want string }{
		{"events?since=-1", `bad since "-1"`},
		{"events?since=abc", `bad since "abc"`},
		{"events?since=", `bad since ""`},
		{"events?since=1.5", `bad since "1.5"`},
		{"events?limit=0", `bad limit "0"`},
		{"events?limit=-3", `bad limit "-3"`},
		{"events?limit=x", `bad limit "x"`},
		{"events?limit=99999999999", `bad limit "99999999999"`},
		{"events?since=1&since=2", `since given 2 times`},
		{"events?from=1", `unknown parameter "from"`},
		{"events?since=%zz", `bad query`},
		{"job?since=1", `api/job takes no parameters`},
	} {
		resp, body := get(t, srv.URL+"/api/"+c.path)
		if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(body, c.want) || strings.Count(body, "\n") != 1 {
			t.Errorf("api/%s: %s %q, want 400 %q…", c.path, resp.Status, body, c.want)
		}
	}
	if resp, _ := get(t, srv.URL+"/api/nothing?since=1"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("api/nothing?since=1: %s, want 404", resp.Status)
	}
	// A nil list removes it.
	h.Publish(Update{Lists: map[string]*SeqList{"events": nil}})
	if resp, _ := get(t, srv.URL+"/api/events?since=1"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("after removing the list: %s, want 404", resp.Status)
	}
}
