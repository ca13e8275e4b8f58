// Package statestore keeps a job master's persisted state where a master
// that starts after a crash finds it (master failover): the last state
// saved survives any crash, and only one master at a time may save.
// File is the local backend's store, a file under the job's output
// directory.
package statestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"elasticdl/internal/atomicfile"
)

// ErrLocked: another master holds the store.
var ErrLocked = errors.New("state store held by another master")

// File is a state file, written atomically (atomicfile), and a lock file (flock) that fences a
// stale master: the lock goes with the process that holds it, so a master
// killed with SIGKILL frees it at once, and one still alive keeps a second
// from writing.
type File struct {
	path string
	lock *os.File
}

// Open takes the store at path (its lock is path + ".lock"), waiting up to
// wait for a master that holds it to let go; ErrLocked when it does not.
func Open(path string, wait time.Duration) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("state store: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("state store: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &File{path: path, lock: lock}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			lock.Close()
			return nil, fmt.Errorf("state store: lock %s: %w", lock.Name(), err)
		}
		if time.Now().After(deadline) {
			lock.Close()
			return nil, fmt.Errorf("%w: %s", ErrLocked, lock.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Load returns the last state saved, or ok false when there is none.
func (f *File) Load(context.Context) (data []byte, ok bool, err error) {
	b, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("state store: %w", err)
	}
	return b, true, nil
}

// Save replaces the state with data; when it returns nil, data survives a
// crash of the process or the machine.
func (f *File) Save(_ context.Context, data []byte) error {
	if f.lock == nil {
		return errors.New("state store: closed")
	}
	if err := atomicfile.Write(f.path, data); err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	return nil
}

// Close lets the store go (another master may take it).
func (f *File) Close() error {
	if f.lock == nil {
		return nil
	}
	err := f.lock.Close() // closing the descriptor releases the flock
	f.lock = nil
	return err
}
