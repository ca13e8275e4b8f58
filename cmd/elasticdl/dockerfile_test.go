package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDockerfiles checks what this machine can of deploy/Dockerfile*
// (no container runtime here): every file they COPY from the build
// context exists, and the image's entrypoint is elasticdl, which the
// master, worker and PS pods run as their command.
func TestDockerfiles(t *testing.T) {
	files, err := filepath.Glob("../../deploy/Dockerfile*")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".dockerignore") {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		entrypoint := false
		for _, line := range strings.Split(string(raw), "\n") {
			fields := strings.Fields(line)
			switch {
			case len(fields) > 2 && fields[0] == "COPY" && !strings.HasPrefix(fields[1], "--from="):
				for _, src := range fields[1 : len(fields)-1] {
					if _, err := os.Stat(filepath.Join("../..", src)); err != nil {
						t.Errorf("%s copies %s, which the repository lacks: %v", f, src, err)
					}
				}
			case len(fields) > 0 && fields[0] == "ENTRYPOINT":
				entrypoint = strings.TrimSpace(strings.TrimPrefix(line, "ENTRYPOINT")) == `["elasticdl"]`
			}
		}
		if !entrypoint {
			t.Errorf("%s: want ENTRYPOINT [\"elasticdl\"]", f)
		}
		checked++
	}
	if checked < 2 {
		t.Errorf("checked %d Dockerfiles, want deploy/Dockerfile and deploy/Dockerfile.pytorch", checked)
	}
}
