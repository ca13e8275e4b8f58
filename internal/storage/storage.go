// Package storage is where a job keeps what it reads and writes — data,
// checkpoints, the saved model, its summary, predictions and exports — on
// a local file system or in S3-compatible object storage, behind one
// interface.
//
// Object storage has no rename: an object written with Create appears
// whole when its writer closes, or not at all, and a set of objects (a
// checkpoint version) becomes visible through a manifest written last.
// Local files get the same guarantee from a temporary file renamed on
// Close.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotExist is wrapped by errors for an object that does not exist
// (errors.Is(err, fs.ErrNotExist) holds too).
var ErrNotExist = fs.ErrNotExist

// Info describes one object.
type Info struct {
	Name    string // relative to the store's root, with "/" separators
	Size    int64
	ModTime time.Time
}

// Reader reads one object by ranges (S3: ranged GETs).
type Reader interface {
	io.ReaderAt
	io.Closer
	Size() int64
	Name() string
}

// Writer writes one object; it appears under its name only when Close
// returns nil. Abort discards what was written.
type Writer interface {
	io.Writer
	Close() error
	Abort()
}

// Store is a directory tree or a bucket prefix. Names are relative,
// "/"-separated and must not climb out of the root ("..").
type Store interface {
	Create(ctx context.Context, name string) (Writer, error)
	Open(ctx context.Context, name string) (Reader, error)
	Stat(ctx context.Context, name string) (Info, error)
	// List returns the objects whose names start with prefix, sorted
	// by name (a prefix "dir/" lists a directory's tree).
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes an object; a missing one is not an error.
	Delete(ctx context.Context, name string) error
	// URL names an object for messages and for other processes.
	URL(name string) string
}

// IsRemote reports whether a location is object storage (s3://...)
// rather than a local path.
func IsRemote(location string) bool {
	return strings.HasPrefix(location, "s3://")
}

// Open opens the store at location: "s3://bucket/prefix" (credentials
// and endpoint from env, see S3Config), a "file://" URL or a local path.
func Open(ctx context.Context, location string, env func(string) string) (Store, error) {
	if !IsRemote(location) {
		p := strings.TrimPrefix(location, "file://")
		if p == "" {
			return nil, errors.New("storage: empty location")
		}
		return NewLocal(p)
	}
	u, err := url.Parse(location)
	if err != nil {
		return nil, fmt.Errorf("storage: %q: %w", location, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("storage: %q: no bucket (want s3://bucket/prefix)", location)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("storage: %q: want s3://bucket/prefix, nothing after the prefix", location)
	}
	cfg, err := S3ConfigFromEnv(env)
	if err != nil {
		return nil, fmt.Errorf("storage: %s: %w", location, err)
	}
	return NewS3(ctx, cfg, u.Host, strings.Trim(u.Path, "/"))
}

// cleanName checks a relative object name.
func cleanName(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("storage: object name %q: want a relative name", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("storage: object name %q climbs out of the store", name)
		}
	}
	return filepath.ToSlash(name), nil
}

// ReadAll reads a whole object.
func ReadAll(ctx context.Context, s Store, name string) ([]byte, error) {
	r, err := s.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b := make([]byte, r.Size())
	if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", r.Name(), err)
	}
	return b, nil
}

// WriteAll writes a whole object, visible only once complete.
func WriteAll(ctx context.Context, s Store, name string, b []byte) error {
	w, err := s.Create(ctx, name)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		w.Abort()
		return fmt.Errorf("write %s: %w", s.URL(name), err)
	}
	return w.Close()
}

// OpenParent opens the store holding the object a full location names,
// s3://bucket/prefix/name, and returns it with the object's name.
func OpenParent(ctx context.Context, location string, env func(string) string) (Store, string, error) {
	i := strings.LastIndex(location, "/")
	if !IsRemote(location) || i < len("s3://") || i == len(location)-1 {
		return nil, "", fmt.Errorf("storage: %q: want s3://bucket/prefix/name", location)
	}
	s, err := Open(ctx, location[:i], env)
	if err != nil {
		return nil, "", err
	}
	return s, location[i+1:], nil
}

// WriteObject writes b as the object a full location names.
func WriteObject(ctx context.Context, location string, b []byte, env func(string) string) error {
	s, name, err := OpenParent(ctx, location, env)
	if err != nil {
		return err
	}
	return WriteAll(ctx, s, name, b)
}
