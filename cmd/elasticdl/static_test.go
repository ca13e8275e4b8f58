package main

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStaticBinary builds elasticdl as `make static` does (cgo off: the
// pure-Go BLAS), checks that the binary is static — no interpreter, no
// dynamic section, no shared library — and that it runs a short job of
// its own: master, PS and worker processes of the same binary.
func TestStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary and runs a job")
	}
	bin := filepath.Join(t.TempDir(), "elasticdl-static")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is linked dynamically", p.Type)
		}
	}
	if f.Section(".dynamic") != nil {
		t.Errorf("the binary has a .dynamic section")
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary imports %v (%v)", libs, err)
	}

	zoo, err := exec.Command(bin, "zoo").Output()
	if err != nil || !strings.Contains(string(zoo), "BLAS backend: gonum") {
		t.Errorf("zoo: %v\n%s", err, zoo)
	}
	out := t.TempDir()
	job := exec.Command(bin, "train", "--model_def=ctr.wide_and_deep", "--training_data=synthetic-ctr://?records=4000",
		"--validation_data=synthetic-ctr://?records=1000&offset=4000", "--num_workers=1", "--output="+out)
	if b, err := job.CombinedOutput(); err != nil {
		t.Fatalf("a job of the static binary: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(filepath.Join(out, "job_summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Status string `json:"status"`
		Eval   *struct {
			Records int64 `json:"records"`
		} `json:"eval"`
	}
	if err := json.Unmarshal(raw, &s); err != nil || s.Status != "succeeded" || s.Eval == nil || s.Eval.Records != 1000 {
		t.Errorf("summary %s (%v)", raw, err)
	}
}
