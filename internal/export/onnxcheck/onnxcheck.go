// Package onnxcheck runs exported ONNX files through the tools that judge
// them: python3-onnx's checker (Debian's 1.12, opset ≤ 17) and
// onnxruntime (the npm package onnxruntime-node, through hack/onnxrun.js).
// Tests use it; when a tool is missing they skip with the install hint,
// unless ELASTICDL_REQUIRE_ONNX=1 (CI), where they fail.
package onnxcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// InstallHint says how to get both tools.
const InstallHint = "install them with hack/deps.sh --pytorch (apt-get install python3-onnx nodejs npm; hack/onnxruntime.sh: npm install --ignore-scripts onnxruntime-node into ~/.cache/elasticdl-npm)"

// Tools are the located checker and runtime.
type Tools struct {
	python, node, nodePath, script string
}

// Find locates the tools; repo is the repository root (hack/onnxrun.js).
// The npm package is looked for where hack/onnxruntime.sh puts it:
// $ELASTICDL_NPM_DIR, else $XDG_CACHE_HOME/elasticdl-npm, else
// ~/.cache/elasticdl-npm.
func Find(repo string) (Tools, error) {
	// Debian's python3-onnx is /usr/bin/python3's, whatever is first on PATH.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			return Tools{}, fmt.Errorf("python3: %w", err)
		}
	}
	if out, err := exec.Command(py, "-c", "import onnx").CombinedOutput(); err != nil {
		return Tools{}, fmt.Errorf("python3-onnx: %s", strings.TrimSpace(string(out)))
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return Tools{}, fmt.Errorf("node: %w", err)
	}
	dir := os.Getenv("ELASTICDL_NPM_DIR")
	if dir == "" {
		cache, err := os.UserCacheDir() // $XDG_CACHE_HOME or ~/.cache
		if err != nil {
			return Tools{}, fmt.Errorf("npm cache: %w", err)
		}
		dir = filepath.Join(cache, "elasticdl-npm")
	}
	mods := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(mods, "onnxruntime-node", "package.json")); err != nil {
		return Tools{}, fmt.Errorf("onnxruntime-node not under %s: %w", mods, err)
	}
	return Tools{python: py, node: node, nodePath: mods, script: filepath.Join(repo, "hack", "onnxrun.js")}, nil
}

// Need is Find for a test: it skips the test when a tool is missing,
// unless ELASTICDL_REQUIRE_ONNX=1.
func Need(t testing.TB, repo string) Tools {
	t.Helper()
	tools, err := Find(repo)
	if err == nil {
		return tools
	}
	if os.Getenv("ELASTICDL_REQUIRE_ONNX") == "1" {
		t.Fatalf("ELASTICDL_REQUIRE_ONNX=1 but %v; %s", err, InstallHint)
	}
	t.Skipf("%v; %s", err, InstallHint)
	return Tools{}
}

// Check runs onnx.checker.check_model with full_check (shape inference
// too) on the file.
func (t Tools) Check(path string) error {
	const prog = "import sys, onnx; m = onnx.load(sys.argv[1]); onnx.checker.check_model(m, full_check=True)"
	if out, err := exec.Command(t.python, "-c", prog, path).CombinedOutput(); err != nil {
		return fmt.Errorf("onnx checker on %s: %v: %s", path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Input is one of a model's inputs: float32 or int64 values of shape Dims.
type Input struct {
	Name   string
	Dims   []int
	Floats []float32
	Int64s []int64
}

// Run runs the model in onnxruntime on inputs and returns output (float32).
func (t Tools) Run(model, output string, inputs []Input) ([]float32, error) {
	dir, err := os.MkdirTemp("", "onnxrun-")
	if err != nil {
		return nil, fmt.Errorf("onnxruntime: %w", err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "out.bin")
	args := []string{t.script, model, output, out}
	for i, in := range inputs {
		file := filepath.Join(dir, "in"+strconv.Itoa(i)+".bin")
		spec, raw := in.encode(file)
		if err := os.WriteFile(file, raw, 0o600); err != nil {
			return nil, fmt.Errorf("onnxruntime: %w", err)
		}
		args = append(args, spec)
	}
	cmd := exec.Command(t.node, args...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+t.nodePath)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("onnxruntime on %s: %v: %s", model, err, strings.TrimSpace(string(b)))
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("onnxruntime: %w", err)
	}
	if len(raw)%4 != 0 {
		return nil, errors.New("onnxruntime: output is not float32")
	}
	f := make([]float32, len(raw)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return f, nil
}

// encode gives the script's NAME:TYPE:DIMS:FILE argument and the bytes.
func (in Input) encode(file string) (string, []byte) {
	dims := make([]string, len(in.Dims))
	for i, d := range in.Dims {
		dims[i] = strconv.Itoa(d)
	}
	var buf bytes.Buffer
	typ := "float32"
	if in.Int64s != nil {
		typ = "int64"
		_ = binary.Write(&buf, binary.LittleEndian, in.Int64s)
	} else {
		_ = binary.Write(&buf, binary.LittleEndian, in.Floats)
	}
	return strings.Join([]string{in.Name, typ, strings.Join(dims, ","), file}, ":"), buf.Bytes()
}
