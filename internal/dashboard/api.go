package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"time"
)

// The page: plain files, so that a fresh clone builds with go build alone.
//
//go:embed assets
var assetFS embed.FS

type asset struct {
	data []byte
	etag string
}

// assets maps a file's name under assets/ to its content and ETag, hashed
// once per hub.
type assets map[string]asset

func loadAssets() assets {
	a := assets{}
	_ = fs.WalkDir(assetFS, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := assetFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		a[p[len("assets/"):]] = asset{data: data, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	return a
}

// Handler serves the dashboard: the page at / and assets/*, the stream at
// api/stream and each published document at api/NAME. Paths are absolute
// here, and relative in the page, so it also works behind a proxy that
// strips a prefix (the API server's pods/proxy).
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/stream", h.serveStream)
	mux.HandleFunc("GET /api/{name...}", h.serveDoc)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		h.serveAsset(w, r, h.opts.Page)
	})
	mux.HandleFunc("GET /assets/{file...}", func(w http.ResponseWriter, r *http.Request) {
		h.serveAsset(w, r, r.PathValue("file"))
	})
	return mux
}

// serveDoc is GET api/NAME: the latest published document NAME, in the
// envelope, from the immutable state (no lock, no copy of the document);
// with a query, a published list's items (serveQuery).
func (h *Hub) serveDoc(w http.ResponseWriter, r *http.Request) {
	st := h.cur.Load()
	name := r.PathValue("name")
	if r.URL.RawQuery != "" {
		h.serveQuery(w, r, st, name)
		return
	}
	doc, ok := st.docs[name]
	if !ok {
		http.Error(w, "no such document", http.StatusNotFound)
		return
	}
	head, rest, tail := envelopeParts(h.boot, st.seq, doc)
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Content-Length", strconv.Itoa(len(head)+len(rest)+len(tail)))
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	if r.Method == http.MethodHead {
		return
	}
	for _, p := range [][]byte{head, rest, []byte(tail)} {
		if _, err := w.Write(p); err != nil {
			return
		}
	}
}

// serveAsset serves an embedded file; ServeContent answers If-None-Match
// with 304 from the ETag. no-cache makes the browser revalidate each load,
// so a new binary's page is never mixed with an old one's script.
func (h *Hub) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := h.assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", a.etag)
	w.Header().Set("Cache-Control", "no-cache")
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	http.ServeContent(w, r, path.Base(name), time.Time{}, bytes.NewReader(a.data))
}
