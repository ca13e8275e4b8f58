package statestore

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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
		if e.Name() != "master_state.json" && e.Name() != "master_state.json.lock" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
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
