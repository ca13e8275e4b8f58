package tfevents

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// FilePrefix starts the name of every event file; TensorBoard loads the
// files whose name holds "tfevents".
const FilePrefix = "events.out.tfevents."

// Writer appends events to one event file. Write buffers; Flush writes
// the buffer in one call, so a reader sees whole records, and a writer
// never blocks on the disk while it buffers. Not safe for concurrent use.
type Writer struct {
	f    *os.File
	path string
	buf  []byte
}

// Create makes dir if needed and starts a new event file in it, named as
// TensorBoard's writer does — events.out.tfevents.<unix seconds>.<host> —
// plus the pid, and a counter should that name be taken (two writers never
// share a file). The header event is buffered, written by the first Flush.
func Create(dir string, now time.Time) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard log dir: %w", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	base := fmt.Sprintf("%s%d.%s.%d", FilePrefix, now.Unix(), host, os.Getpid())
	for i := 0; ; i++ {
		name := base
		if i > 0 {
			name += "." + strconv.Itoa(i)
		}
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		switch {
		case errors.Is(err, os.ErrExist) && i < 1000:
			continue
		case err != nil:
			return nil, fmt.Errorf("creating event file: %w", err)
		}
		w := &Writer{f: f, path: path}
		w.Write(Event{WallTime: WallTime(now), FileVersion: FileVersion})
		return w, nil
	}
}

// WallTime is t as an Event's wall_time: seconds since the Unix epoch.
func WallTime(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}

// Path is the event file's path.
func (w *Writer) Path() string { return w.path }

// Write buffers e as one record.
func (w *Writer) Write(e Event) { w.buf = AppendRecord(w.buf, e.Marshal()) }

// WriteScalars buffers one summary event of values at step.
func (w *Writer) WriteScalars(t time.Time, step int64, values ...Value) {
	w.Write(Event{WallTime: WallTime(t), Step: step, Values: values})
}

// Flush writes what Write buffered. On error the buffer is dropped: the
// events are lost, the file's later records stay readable unless the
// write was cut inside a record.
func (w *Writer) Flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.f.Write(w.buf)
	w.buf = w.buf[:0]
	if err != nil {
		return fmt.Errorf("writing event file: %w", err)
	}
	return nil
}

// Close flushes and closes the file.
func (w *Writer) Close() error {
	err := w.Flush()
	if cerr := w.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing event file: %w", cerr)
	}
	return err
}

// ReadEvents decodes every event of r. The first must be a header
// (file_version "brain.Event:…"), as in every file TensorBoard writes.
func ReadEvents(r io.Reader) ([]Event, error) {
	rr := NewRecordReader(r)
	var events []Event
	for {
		off := rr.Offset()
		data, err := rr.Next()
		if err == io.EOF {
			return events, nil
		}
		if err != nil {
			return events, err
		}
		e, err := ParseEvent(data)
		if err != nil {
			return events, fmt.Errorf("record at offset %d: %w", off, err)
		}
		if len(events) == 0 && !strings.HasPrefix(e.FileVersion, "brain.Event:") {
			return nil, fmt.Errorf("first record is not an event file header (file_version %q)", e.FileVersion)
		}
		events = append(events, e)
	}
}

// Scalar is one value of one summary event.
type Scalar struct {
	WallTime float64
	Step     int64
	Tag      string
	Value    float64
}

// ReadScalars reads every event file of dir, in name order (TensorBoard's
// order), and returns their scalars in file order.
func ReadScalars(dir string) ([]Scalar, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*tfevents*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []Scalar
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		events, err := ReadEvents(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, e := range events {
			for _, v := range e.Values {
				out = append(out, Scalar{WallTime: e.WallTime, Step: e.Step, Tag: v.Tag, Value: v.Value})
			}
		}
	}
	return out, nil
}
