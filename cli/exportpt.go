package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"elasticdl/internal/roleflags"
)

// exportPyTorch runs a PyTorch job's program as an exporter: with
// ELASTICDL_EXPORT set, elasticdl.connect() in it returns the SDK's
// Exporter, whose register(model) writes the checkpoint as the module's
// own state_dict (python/elasticdl/export.py). Only the program knows its
// module, so it is the program that exports.
func exportPyTorch(ctx context.Context, env Env, o exportOptions) error {
	argv, err := roleflags.SplitCommand(o.workerCommand)
	if err != nil {
		return usageError{fmt.Errorf("--worker_command: %w", err)}
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return usageError{fmt.Errorf("--worker_command: %w", err)}
	}
	out, err1 := filepath.Abs(o.output)
	dir, err2 := filepath.Abs(o.checkpointDir)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("export: %v %v", err1, err2)
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("--checkpoint_dir_for_init: %s", checkpointProblem(o.checkpointDir, err))
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	format := o.format
	if format == "" {
		format = "pytorch"
	}
	cmd.Env = append(os.Environ(), "ELASTICDL_EXPORT="+out, "ELASTICDL_EXPORT_CHECKPOINT="+dir, "ELASTICDL_MODEL_PARAMS="+o.modelParams,
		"ELASTICDL_EXPORT_FORMAT="+format, "ELASTICDL_EXPORT_DATA="+o.data)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = env.Stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("export with %s: %v: %s", o.workerCommand, err, lastLine(stderr.String()))
	}
	return nil
}

// lastLine is a program's last line of output: a Python traceback's is
// the exception.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
