package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"elasticdl/internal/cluster"
	"elasticdl/internal/tlsid"
	"elasticdl/internal/tlsid/tlstest"
)

// An instance's key is on disk, for it only, while it runs, and gone when
// it has exited.
func TestTLSBundleLivesWithItsInstance(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, Config{TLSDir: dir})
	bundle := tlstest.NewJob(t, "job1").Bundle(tlsid.Worker, 3)
	spec := cluster.InstanceSpec{Role: cluster.Worker, ID: 3, Args: []string{"sleep"}, TLS: &bundle}
	if err := b.Launch(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, b); ev.Phase != cluster.Running {
		t.Fatalf("first event %+v, want Running", ev)
	}
	key := filepath.Join(dir, spec.Name(), "tls.key")
	fi, err := os.Stat(key)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the running instance's key %s: %v, %v", key, fi, err)
	}
	if err := b.Stop(context.Background(), cluster.Worker, 3); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, b); ev.Phase != cluster.Exited {
		t.Fatalf("event %+v, want Exited", ev)
	}
	if _, err := os.Stat(filepath.Join(dir, spec.Name())); !os.IsNotExist(err) {
		t.Errorf("the exited instance's bundle is still there: %v", err)
	}
}
