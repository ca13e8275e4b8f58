package statestore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/internal/atomicfile"
)

// What was saved is what a later master loads; nothing saved loads as
// nothing; a save leaves no temporary file behind.
func TestSaveLoad(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "out", "master_state.json")
	f, err := Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.Load(ctx); ok || err != nil {
		t.Fatalf("empty store: ok %v, err %v", ok, err)
	}
	for _, s := range []string{`{"v":1}`, `{"v":2}`} {
		if err := f.Save(ctx, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	if err := f.Save(ctx, []byte("x")); err == nil {
		t.Fatal("a closed store saved")
	}
	g, err := Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if b, ok, err := g.Load(ctx); !ok || err != nil || string(b) != `{"v":2}` {
		t.Fatalf("loaded %q, %v, %v", b, ok, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		switch e.Name() {
		case "master_state.json.0", "master_state.json.1", "master_state.json.lock":
		default:
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// saveAll saves each state in turn to the store at path, opened afresh.
func saveAll(t *testing.T, path string, states ...string) {
	t.Helper()
	f, err := Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range states {
		if err := f.Save(context.Background(), []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
}

func wantLoad(t *testing.T, path, want string) {
	t.Helper()
	f, err := Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, ok, err := f.Load(context.Background())
	if err != nil || !ok || string(b) != want {
		t.Fatalf("loaded %q, %v, %v; want %q", b, ok, err, want)
	}
}

// A save cut short by a crash (the slot it was writing holds part of it,
// or damaged bytes) leaves the state before it; the next save goes on
// from there. A master that saves without loading first continues the
// sequence, and never overwrites the latest state.
func TestTornSaveKeepsTheLastState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	saveAll(t, path, `{"v":1}`, `{"v":2}`) // slot 1 then slot 0
	whole, err := os.ReadFile(path + ".0")
	if err != nil {
		t.Fatal(err)
	}
	saveAll(t, path, `{"v":3, "longer":true}`) // slot 1, without a Load
	wantLoad(t, path, `{"v":3, "longer":true}`)
	// Save 4 goes to slot 0: cut short there, or damaged, it is passed over.
	four := strings.Replace(string(whole), "0000000000000002", "0000000000000004", 1)
	for name, torn := range map[string]string{
		"cut short":       four[:len(four)-3],
		"header only":     four[:headerLen],
		"half the header": four[:headerLen/2],
		"a byte flipped":  strings.Replace(four, `"v":2`, `"v":4`, 1),
	} {
		if err := os.WriteFile(path+".0", []byte(torn), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) { wantLoad(t, path, `{"v":3, "longer":true}`) })
	}
	saveAll(t, path, `{"v":5}`)
	wantLoad(t, path, `{"v":5}`)
	// A shorter state in a slot that held a longer one: its length counts,
	// not the file's.
	saveAll(t, path, `{}`)
	wantLoad(t, path, `{}`)
}

// Only the first save, cut short: there is no state. Both slots damaged:
// an error that names them, not a fresh start.
func TestDamagedSlots(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".1", []byte("elasticdl-state 1 seq=00000000"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, ok, err := f.Load(ctx); ok || err != nil {
		t.Fatalf("the first save cut short: %q, %v, %v; want no state", b, ok, err)
	}
	f.Close()
	saveAll(t, path, `{"v":1}`, `{"v":2}`)
	for _, i := range []string{".0", ".1"} {
		if err := os.WriteFile(path+i, []byte("garbage that is longer than a header, and not one at all..........."), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g, err := Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, _, err := g.Load(ctx); err == nil || !strings.Contains(err.Error(), path+".0") || !strings.Contains(err.Error(), path+".1") {
		t.Fatalf("both slots damaged: %v, want an error naming both", err)
	}
}

// A state an older version saved whole at path loads while the slots hold
// none, and goes once the slots hold one; one left behind by a crash
// before its removal is passed over, and goes with the next master's
// first save.
func TestOldStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	for _, c := range []struct{ loads, next string }{
		{`{"old":true}`, `{"new":true}`},
		{`{"new":true}`, `{"newer":true}`},
	} {
		if err := os.WriteFile(path, []byte(`{"old":true}`), 0o644); err != nil {
			t.Fatal(err)
		}
		wantLoad(t, path, c.loads)
		saveAll(t, path, c.next)
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the old state file is still there after saving %s: %v", c.next, err)
		}
		wantLoad(t, path, c.next)
	}
}

// What a slot file's bytes hold: a whole state (whatever stale bytes
// follow it), nothing, or why not a state.
func TestDecodeSlot(t *testing.T) {
	whole := appendSlot(nil, 5, []byte(`{"v":5}`))
	for _, c := range []struct {
		name string
		b    []byte
		want string // the state, "" for none; "empty", or an error's words
	}{
		{"whole", whole, `{"v":5}`},
		{"stale bytes after it", append(slices.Clone(whole), "tail of a longer save"...), `{"v":5}`},
		{"empty", nil, "empty"},
		{"short", whole[:10], "shorter than a header"},
		{"cut short", whole[:len(whole)-1], "header says 7 bytes"},
		{"not a slot", []byte(strings.Repeat("x", headerLen+7)), "not a state slot"},
		{"bad number", bytes.Replace(whole, []byte("seq=0"), []byte("seq=g"), 1), "invalid syntax"},
		{"a byte flipped", bytes.Replace(whole, []byte(`"v":5`), []byte(`"v":6`), 1), "checksum mismatch"},
	} {
		s := decodeSlot(c.b)
		var got string
		switch {
		case s.err != nil:
			got = s.err.Error()
		case s.empty:
			got = "empty"
		default:
			got = string(s.data)
			if s.seq != 5 {
				t.Errorf("%s: seq %d, want 5", c.name, s.seq)
			}
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// Which slot's state loads.
func TestLatest(t *testing.T) {
	state := func(seq uint64) slot { return slot{seq: seq, data: []byte("s")} }
	empty, torn := slot{empty: true}, slot{err: errors.New("torn")}
	for _, c := range []struct {
		name string
		s    [2]slot
		want int
	}{
		{"the newer of two", [2]slot{state(4), state(3)}, 0},
		{"the newer of two, in slot 1", [2]slot{state(2), state(3)}, 1},
		{"the whole one beside a torn save", [2]slot{torn, state(3)}, 1},
		{"the whole one beside a torn save, in slot 0", [2]slot{state(2), torn}, 0},
		{"the first save", [2]slot{empty, state(1)}, 1},
		{"nothing saved", [2]slot{empty, empty}, none},
		{"the first save cut short", [2]slot{empty, torn}, none},
		{"slot 0 torn beside an empty slot 1: never a first save", [2]slot{torn, empty}, damaged},
		{"both torn", [2]slot{torn, torn}, damaged},
	} {
		if got := latest(c.s); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// BenchmarkSave: one durable save of a 40 KB state (a master saves a few
// hundred a second), in a slot, against a whole file written and renamed
// (the store before the slots).
func BenchmarkSave(b *testing.B) {
	data := []byte(strings.Repeat("x", 40<<10))
	b.Run("slot", func(b *testing.B) {
		f, err := Open(filepath.Join(b.TempDir(), "state.json"), 0)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		for b.Loop() {
			if err := f.Save(context.Background(), data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("whole-file", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "state.json")
		for b.Loop() {
			if err := atomicfile.Write(path, data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// One master at a time: a second cannot take the store while the first
// holds it, and takes it once the first lets go — or dies.
func TestFencing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, 100*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Fatalf("second master: %v, want ErrLocked", err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		f.Close()
	}()
	g, err := Open(path, 5*time.Second)
	if err != nil {
		t.Fatalf("after the first let go: %v", err)
	}
	g.Close()

	// A master process killed with SIGKILL frees the lock at once.
	// flock(1) runs sleep holding the lock: kill both (the process group).
	holder := exec.Command("flock", "-x", path+".lock", "sleep", "60")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := holder.Start(); err != nil {
		t.Skipf("flock(1) not available: %v", err)
	}
	waitLocked(t, path)
	syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
	holder.Wait()
	h, err := Open(path, 5*time.Second)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	h.Close()
}

func waitLocked(t *testing.T, path string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		f, err := Open(path, 0)
		if errors.Is(err, ErrLocked) {
			return
		}
		if err == nil {
			f.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the other process never took the lock")
}

// A store where none can be made is an error at once, not a lock wait.
func TestOpenUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(file, "state.json"), time.Minute); err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("Open under a file: %v, want an error that is not ErrLocked", err)
	}
}
