package cli

import (
	"testing"

	"elasticdl/internal/cluster"
	"elasticdl/internal/tlsid"
	"elasticdl/internal/tlsid/tlstest"
)

// ringd's credentials come from the directory $ELASTICDL_TLS_DIR names;
// unset, the ring is plaintext.
func TestRingdTLSDir(t *testing.T) {
	t.Setenv(cluster.EnvTLSDir, "")
	if c, err := loadTLSDir(); c != nil || err != nil {
		t.Fatalf("unset: %v, %v; want plaintext", c, err)
	}
	dir := t.TempDir()
	if err := tlstest.NewJob(t, "job").Bundle(tlsid.Worker, 4).Write(dir); err != nil {
		t.Fatal(err)
	}
	t.Setenv(cluster.EnvTLSDir, dir)
	c, err := loadTLSDir()
	if err != nil || c.Self() != (tlsid.Identity{Job: "job", Role: tlsid.Worker, ID: 4}) {
		t.Fatalf("%v, %v; want worker 4's credentials", c, err)
	}
	t.Setenv(cluster.EnvTLSDir, t.TempDir())
	if _, err := loadTLSDir(); err == nil {
		t.Error("an empty directory loaded")
	}
}
