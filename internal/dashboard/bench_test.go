package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkPublish: the publisher's cost per Publish (a 1 KiB delta, a
// 35 KiB snapshot and one document, about a job's view at 200 workers),
// with no stream and with 16 streams reading everything they are sent.
func BenchmarkPublish(b *testing.B) {
	snapshot := raw(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("s", 35<<10)))
	delta := raw(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("d", 1<<10)))
	for _, c := range []struct {
		readers  int
		interval time.Duration
	}{{0, 0}, {16, 0}, {16, time.Millisecond}} {
		name := fmt.Sprintf("readers=%d", c.readers)
		if c.interval > 0 {
			name += "/interval=" + c.interval.String()
		}
		b.Run(name, func(b *testing.B) {
			h := New(Options{Interval: c.interval})
			srv := httptest.NewServer(h.Handler())
			defer srv.Close()
			defer h.Close()
			h.Publish(Update{Snapshot: snapshot})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for range c.readers {
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/stream", nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatal(err, resp)
				}
				go func() { _, _ = io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
			}
			docs := map[string]json.RawMessage{"job": snapshot}
			b.ReportAllocs()
			for b.Loop() {
				h.Publish(Update{Snapshot: snapshot, Delta: delta, Docs: docs})
			}
		})
	}
}
