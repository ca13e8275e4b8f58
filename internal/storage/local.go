package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Local is a directory tree on a local (or mounted) file system.
type Local struct{ root string }

// NewLocal is the store rooted at dir (created on the first write).
func NewLocal(dir string) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: %s: %w", dir, err)
	}
	return &Local{root: abs}, nil
}

func (l *Local) path(name string) (string, error) {
	n, err := cleanName(name)
	if err != nil {
		return "", err
	}
	return filepath.Join(l.root, filepath.FromSlash(n)), nil
}

// URL is the object's path.
func (l *Local) URL(name string) string { return filepath.Join(l.root, filepath.FromSlash(name)) }

// Create writes to a temporary file beside name, renamed on Close.
func (l *Local) Create(_ context.Context, name string) (Writer, error) {
	p, err := l.path(name)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	return &localWriter{f: f, dst: p}, nil
}

type localWriter struct {
	f   *os.File
	dst string
}

func (w *localWriter) Write(b []byte) (int, error) { return w.f.Write(b) }

func (w *localWriter) Abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// Close syncs and renames: the object appears whole or not at all.
func (w *localWriter) Close() error {
	err := w.f.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.f.Name(), w.dst)
	}
	if err != nil {
		os.Remove(w.f.Name())
		return fmt.Errorf("write %s: %w", w.dst, err)
	}
	return nil
}

// Open opens a file for ranged reads.
func (l *Local) Open(_ context.Context, name string) (Reader, error) {
	p, err := l.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open %w", err) // *PathError names the file
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %w", err)
	}
	if st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("open %s: a directory, not an object", p)
	}
	return &localReader{File: f, size: st.Size()}, nil
}

type localReader struct {
	*os.File
	size int64
}

func (r *localReader) Size() int64 { return r.size }

// Stat describes one file.
func (l *Local) Stat(_ context.Context, name string) (Info, error) {
	p, err := l.path(name)
	if err != nil {
		return Info{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return Info{}, fmt.Errorf("stat %w", err)
	}
	return Info{Name: name, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// List walks the tree under prefix's directory, leaving out the
// temporary files of writes in flight.
func (l *Local) List(_ context.Context, prefix string) ([]Info, error) {
	dir := l.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		if _, err := cleanName(prefix[:i+1] + "x"); err != nil {
			return nil, err
		}
		dir = filepath.Join(l.root, filepath.FromSlash(prefix[:i]))
	}
	var out []Info
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return fs.SkipAll
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".") && strings.Contains(d.Name(), ".tmp-") {
			return nil
		}
		rel, _ := filepath.Rel(l.root, p)
		rel = filepath.ToSlash(rel)
		if !strings.HasPrefix(rel, prefix) {
			return nil
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, Info{Name: rel, Size: st.Size(), ModTime: st.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.URL(prefix), err)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete removes a file; a missing one is not an error.
func (l *Local) Delete(_ context.Context, name string) error {
	p, err := l.path(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %w", err)
	}
	return nil
}
