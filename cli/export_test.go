package cli

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/wire"
	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/proto/pserverpb"
)

// writeInitial writes spec's initial parameters as a training job's model
// would be: OUTPUT/model/version-N/...
func writeInitial(t *testing.T, spec model.Spec, output string) {
	t.Helper()
	c := &pserverpb.Checkpoint{Version: 4, NumShards: 1}
	for _, p := range spec.Build(rand.New(rand.NewSource(5))).Params() {
		c.DenseParameters = append(c.DenseParameters, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
	}
	if _, err := checkpoint.Write(filepath.Join(output, "model"), c); err != nil {
		t.Fatal(err)
	}
}

func TestExport(t *testing.T) {
	dir := t.TempDir()
	mlp, cnn := filepath.Join(dir, "mlp"), filepath.Join(dir, "cnn")
	writeInitial(t, zoo.MLPSpec(), mlp)
	writeInitial(t, zoo.CNNSpec(), cnn)
	file := filepath.Join(dir, "parent-is-a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "m.onnx")
	for _, tc := range []struct {
		name, model, ckpt, output string
		code                      int
		want                      string // in stdout on success, stderr otherwise
	}{
		{"job output", "fashion_mnist.mlp", mlp, out, 0, "wrote " + out + " (ONNX opset 17) of model fashion_mnist.mlp from " + filepath.Join(mlp, "model", "version-4") + "; input \"features\""},
		{"model dir", "fashion_mnist.cnn", filepath.Join(cnn, "model"), out, 0, "of model fashion_mnist.cnn"},
		{"missing checkpoint", "fashion_mnist.mlp", filepath.Join(dir, "none"), out, 1,
			"elasticdl export: --checkpoint_dir_for_init: " + filepath.Join(dir, "none") + " does not exist\n"},
		{"empty checkpoint dir", "fashion_mnist.mlp", dir, out, 1, "holds no complete checkpoint"},
		{"another model", "fashion_mnist.mlp", cnn, out, 1,
			"elasticdl export: --checkpoint_dir_for_init: " + filepath.Join(cnn, "model", "version-4") + " does not fit model fashion_mnist.mlp: parameter \"dense_1/kernel\" has shape [1568 128], the model [784 256]\n"},
		{"another shape", "fashion_mnist.cnn_wide", cnn, out, 1, "parameter \"conv2d_1/kernel\" has shape [3 3 1 16], the model [3 3 1 32]"},
		{"no directory", "fashion_mnist.mlp", mlp, filepath.Join(dir, "nodir", "m.onnx"), 2, "--output: directory " + filepath.Join(dir, "nodir") + " does not exist"},
		{"output is a directory", "fashion_mnist.mlp", mlp, dir, 2, "--output: " + dir + " is a directory"},
		{"parent is a file", "fashion_mnist.mlp", mlp, filepath.Join(file, "m.onnx"), 2, "--output: directory " + file + " does not exist"},
		{"bad format", "fashion_mnist.mlp", mlp, out, 2, "--format=pt: want onnx (pytorch is for a --worker_command model)"},
		{"unknown model", "nope", mlp, out, 2, "--model_def: model \"nope\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"export", "--model_def=" + tc.model, "--checkpoint_dir_for_init=" + tc.ckpt, "--output=" + tc.output}
			if tc.name == "bad format" {
				args = append(args, "--format=pt")
			}
			code, stdout, stderr := run(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			got := stdout
			if code != 0 {
				got = stderr
				if strings.Count(stderr, "\n") != 1 {
					t.Errorf("stderr %q: want one line", stderr)
				}
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("output %q, want it to contain %q", got, tc.want)
			}
		})
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
		t.Errorf("%s: %v, want a file", out, err)
	}
}

// TestExportWorkerCommandFlags: a PyTorch program's export takes no
// --model_def and exports as pytorch; its program must be there.
func TestExportWorkerCommandFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.pt")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--worker_command=python3 train.py", "--model_def=fashion_mnist.mlp"}, "--model_def and --worker_command: give one"},
		{[]string{"--worker_command=python3 train.py", "--format=onnx"}, "--data: required for --worker_command to ONNX"},
		{[]string{"--worker_command=python3 train.py", "--format=pt"}, "--format=pt: want pytorch (a state_dict) or onnx"},
		{[]string{"--worker_command=no-such-program train.py"}, "--worker_command: exec: \"no-such-program\": executable file not found"},
	} {
		args := append([]string{"export", "--checkpoint_dir_for_init=" + t.TempDir(), "--output=" + out}, tc.args...)
		code, _, stderr := run(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestTrainExportFormat: train's --export_format is checked with the
// other flags, before anything starts.
func TestTrainExportFormat(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model_def=fashion_mnist.mlp", "--export_format=pt"}, `--export_format: "pt": want onnx`},
		{[]string{"--worker_command=python3 train.py", "--optimizer=sgd", "--export_format=onnx"}, "--export_format: applies to elasticdl's own models"},
	} {
		args := append([]string{"train", "--training_data=x", "--output=" + t.TempDir()}, tc.args...)
		code, _, stderr := run(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
