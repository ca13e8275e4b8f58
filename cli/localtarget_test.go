package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWatchTargetFile: each new value is reported once, a number as a
// target, anything else as bad; a missing file asks for nothing.
func TestWatchTargetFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "target-workers")
	var mu sync.Mutex
	var targets []int
	var bad []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchTargetFile(ctx, path, 5*time.Millisecond, func(n int) {
			mu.Lock()
			targets = append(targets, n)
			mu.Unlock()
		}, func(v string) {
			mu.Lock()
			bad = append(bad, v)
			mu.Unlock()
		})
	}()
	seen := func(n int) bool {
		deadline := time.Now().Add(30 * time.Second) // a hang guard
		for time.Now().Before(deadline) {
			mu.Lock()
			got := len(targets) + len(bad)
			mu.Unlock()
			if got >= n {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
	time.Sleep(20 * time.Millisecond) // no file yet: a chance to report something wrongly
	// Each write waits for the watcher's report of it (reports so far):
	// "3" after "3\n" is the same target, no report of its own.
	for _, w := range []struct {
		v       string
		reports int
	}{{"3\n", 1}, {"3", 1}, {"many", 2}, {"1", 3}} {
		if err := os.WriteFile(path, []byte(w.v), 0o644); err != nil {
			t.Fatal(err)
		}
		if !seen(w.reports) {
			t.Fatalf("the watcher did not report %q", w.v)
		}
	}
	cancel()
	<-done
	if !slices.Equal(targets, []int{3, 1}) || !slices.Equal(bad, []string{"many"}) {
		t.Errorf("targets %v, bad %v; want [3 1] and [many]", targets, bad)
	}
}

// TestScaleLocalWritesTheTarget: `elasticdl scale --output=DIR` writes the
// file the job's master watches.
func TestScaleLocalWritesTheTarget(t *testing.T) {
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "master"), 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	env := Env{Stdout: &stdout, Stderr: &stderr}
	if err := runScaleLocal(env, []string{"--output=" + out, "--workers=2"}); err != nil {
		t.Fatalf("scale: %v (%s)", err, stderr.String())
	}
	data, err := os.ReadFile(targetFile(out))
	if err != nil || strings.TrimSpace(string(data)) != "2" {
		t.Fatalf("target file %q, %v; want 2", data, err)
	}
	if !strings.Contains(stdout.String(), "asked for 2 workers") {
		t.Errorf("stdout %q", stdout.String())
	}
}
