package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestDocs(t *testing.T) {
	h, srv := newServer(t, Options{})
	if resp, _ := get(t, srv.URL+"/api/job"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("before any publish: %s", resp.Status)
	}
	h.Publish(Update{Docs: map[string]json.RawMessage{
		"job":            raw(`{"phase":"running"}`),
		"cluster/series": raw(`[1, 2]`),
		"empty":          raw(` { } `),
	}})
	h.Publish(Update{Docs: map[string]json.RawMessage{"job": raw("{\n\"phase\": \"succeeded\"\n}")}})

	for _, c := range []struct{ name, want string }{
		{"job", `"phase":"succeeded"`},     // the latest
		{"cluster/series", `"data":[1,2]`}, // kept; not an object, so under "data"
		{"empty", `"seq":2}`},
	} {
		resp, body := get(t, srv.URL+"/api/"+c.name)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("api/%s: %s", c.name, resp.Status)
		}
		if ct, cc := resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"); ct != "application/json" || cc != "no-cache" {
			t.Fatalf("api/%s: Content-Type %q, Cache-Control %q", c.name, ct, cc)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("api/%s: %v\n%s", c.name, err, body)
		}
		if m["api"] != float64(1) || m["boot"] != h.Boot() || m["seq"] != float64(2) {
			t.Fatalf("api/%s: envelope %s", c.name, body)
		}
		var compact strings.Builder
		for _, f := range strings.Fields(body) {
			compact.WriteString(f)
		}
		if !strings.Contains(compact.String(), c.want) {
			t.Fatalf("api/%s: %s, want %s in it", c.name, body, c.want)
		}
	}

	h.Publish(Update{Docs: map[string]json.RawMessage{"empty": nil}})
	if resp, _ := get(t, srv.URL+"/api/empty"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a removed document: %s", resp.Status)
	}
}

// TestEnvelope: every shape of document gives valid JSON with the fields.
func TestEnvelope(t *testing.T) {
	for _, doc := range []string{`{}`, ` {  } `, `{"a":1}`, "{\n \"a\": [1,\n2]\r\n}", `[1]`, `null`, `"s"`, `3`, ``} {
		for _, b := range [][]byte{
			appendEnvelope(nil, "ab", 7, []byte(doc)),
			[]byte(strings.TrimSuffix(strings.TrimPrefix(string(appendData(nil, "ab", 7, []byte(doc))), "data: "), "\n")),
		} {
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil || m["api"] != float64(1) || m["boot"] != "ab" || m["seq"] != float64(7) {
				t.Fatalf("%q -> %s: %v", doc, b, err)
			}
		}
		head, rest, tail := envelopeParts("ab", 7, []byte(doc))
		if got, want := string(head)+string(rest)+tail, string(appendEnvelope(nil, "ab", 7, []byte(doc))); got != want {
			t.Fatalf("%q: parts %s, append %s", doc, got, want)
		}
	}
	if d := appendData(nil, "ab", 1, []byte("{\"a\":\n1\r}")); strings.Count(string(d), "\n") != 1 || strings.Contains(string(d), "\r") {
		t.Fatalf("data line %q", d)
	}
}

func TestAssets(t *testing.T) {
	for _, page := range []string{"index.html", "cluster.html"} {
		_, srv := newServer(t, Options{Page: page})
		resp, body := get(t, srv.URL+"/")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("%s at /: %s %s", page, resp.Status, resp.Header.Get("Content-Type"))
		}
		// Relative URLs only, and nothing from elsewhere: the page must
		// work under a proxy's path prefix, offline. Every one is served.
		links := []string{"/"}
		for _, m := range regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(body, -1) {
			if strings.HasPrefix(m[1], "/") || strings.Contains(m[1], "//") {
				t.Fatalf("%s links %q", page, m[1])
			}
			links = append(links, "/"+m[1])
		}
		for _, want := range []string{"/assets/style.css", "/assets/chart.js", "/assets/live.js"} {
			if !slices.Contains(links, want) {
				t.Fatalf("%s links %v, not %s", page, links, want)
			}
		}
		for _, p := range links {
			resp, body := get(t, srv.URL+p)
			etag := resp.Header.Get("ETag")
			if resp.StatusCode != http.StatusOK || etag == "" || resp.Header.Get("Cache-Control") != "no-cache" || body == "" {
				t.Fatalf("%s: %s, ETag %q, Cache-Control %q", p, resp.Status, etag, resp.Header.Get("Cache-Control"))
			}
			if resp, body := get(t, srv.URL+p, "If-None-Match", etag); resp.StatusCode != http.StatusNotModified || body != "" {
				t.Fatalf("%s with If-None-Match: %s", p, resp.Status)
			}
			if resp, _ := get(t, srv.URL+p, "If-None-Match", `"stale"`); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s with a stale ETag: %s", p, resp.Status)
			}
			if ct := resp.Header.Get("Content-Type"); strings.HasSuffix(p, ".js") && !strings.Contains(ct, "javascript") ||
				strings.HasSuffix(p, ".css") && !strings.Contains(ct, "text/css") {
				t.Fatalf("%s: Content-Type %q", p, ct)
			}
		}
		if resp, _ := get(t, srv.URL+"/assets/nope.js"); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("a missing asset: %s", resp.Status)
		}
	}
}

// TestServer: Serve answers until its context ends, then ends the streams
// (no "ended": the job goes on, with another master) and returns.
func TestServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{})
	h.Publish(Update{Snapshot: raw(`{}`), Docs: map[string]json.RawMessage{"job": raw(`{"n":1}`)}})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- (&Server{Hub: h}).Serve(ctx, ln) }()
	base := fmt.Sprintf("http://%s", ln.Addr())
	if resp, body := get(t, base+"/api/job"); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"n":1`) {
		t.Fatalf("api/job: %s %s", resp.Status, body)
	}
	s := openStream(t, base, "")
	wantEvent(t, s.next(t), "snapshot", h, 1)
	cancel()
	s.end(t)
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(guard):
		t.Fatal("Serve did not return")
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the listener is still open")
	}
}
