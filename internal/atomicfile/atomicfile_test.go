package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Write replaces the content and leaves no temporary file; a directory
// that does not exist is an error and creates nothing.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	for _, s := range []string{"one", "two"} {
		if err := Write(path, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "two" {
		t.Fatalf("read %q, %v", b, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want the file only", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x")); err == nil {
		t.Fatal("wrote into a directory that does not exist")
	}
}
