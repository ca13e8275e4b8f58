package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"elasticdl/internal/export"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/storage"
)

// exportOptions are export's flags.
type exportOptions struct {
	modelDef, modelParams, checkpointDir, format, output string
	workerCommand, data                                  string
}

// runExport is `elasticdl export`: a saved model (a checkpoint, or a
// training job's OUTPUT/model) written as a file other runtimes serve.
func runExport(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "export")
	var o exportOptions
	fs.StringVar(&o.modelDef, "model_def", "", "the model: one of `elasticdl zoo` (e.g. fashion_mnist.cnn), or a model file path/model.yaml")
	fs.StringVar(&o.modelParams, "model_params", "", "the model's parameters, as the training job had them: semicolon-separated key=value")
	fs.StringVar(&o.checkpointDir, "checkpoint_dir_for_init", "", "the model to export: a checkpoint directory (--checkpoint_dir of a training job) or a training job's OUTPUT/model")
	fs.StringVar(&o.format, "format", "", "the file format: onnx (opset 17; the default for --model_def), or pytorch (a state_dict; the default for --worker_command, which also takes onnx)")
	fs.StringVar(&o.output, "output", "", "the file to write, e.g. model.onnx")
	fs.StringVar(&o.data, "data", "", "--worker_command to ONNX: a data source of the model's input (its --training_data): one record gives the graph's input shape")
	fs.StringVar(&o.workerCommand, "worker_command", "", "a PyTorch job's program (as it trained): run with elasticdl.connect() returning an exporter, whose register(model) writes the checkpoint as the module's state_dict (docs/python.md)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return usageError{err}
	}
	if o.workerCommand != "" {
		return exportPyTorch(ctx, env, o)
	}
	spec, err := env.Registry.Resolve(o.modelDef, o.modelParams)
	if err != nil {
		return usageError{fmt.Errorf("--model_def: %w", err)}
	}
	loaded, err := export.Load(spec, o.checkpointDir)
	if err != nil {
		return fmt.Errorf("--checkpoint_dir_for_init: %s", checkpointProblem(o.checkpointDir, err))
	}
	m, err := export.ONNX(spec, loaded.Net, loaded.Tables)
	if err != nil {
		return fmt.Errorf("export %s to ONNX: %w", spec.Name, err)
	}
	if storage.IsRemote(o.output) {
		err = storage.WriteObject(ctx, o.output, m.Marshal(), os.Getenv)
	} else {
		err = export.WriteFile(o.output, m.Marshal())
	}
	if err != nil {
		return fmt.Errorf("--output: cannot write %s: %w", o.output, unwrapPath(err))
	}
	inputs := fmt.Sprintf("input %q", export.InputFeatures)
	if spec.IsSparse() {
		inputs = fmt.Sprintf("inputs %q and %q", export.InputDense, export.InputIDs)
	}
	fmt.Fprintf(env.Stdout, "wrote %s (ONNX opset 17) of model %s from %s; %s, outputs %q and %q\n",
		o.output, spec.Name, loaded.Dir, inputs, export.OutputLogits, export.OutputProbs)
	return nil
}

// check validates the flags that need no file.
func (o exportOptions) check() error {
	switch {
	case o.modelDef == "" && o.workerCommand == "":
		return errors.New("--model_def: required (or --worker_command, a PyTorch job's program)")
	case o.modelDef != "" && o.workerCommand != "":
		return errors.New("--model_def and --worker_command: give one (a worker program defines its model)")
	case o.checkpointDir == "":
		return errors.New("--checkpoint_dir_for_init: required: the checkpoint directory, or a training job's OUTPUT/model")
	case o.workerCommand == "" && o.format != "" && o.format != "onnx":
		return fmt.Errorf("--format=%s: want onnx (pytorch is for a --worker_command model)", o.format)
	case o.workerCommand != "" && o.format != "" && o.format != "pytorch" && o.format != "onnx":
		return fmt.Errorf("--format=%s: want pytorch (a state_dict) or onnx", o.format)
	case o.workerCommand != "" && o.format == "onnx" && o.data == "":
		return errors.New("--data: required for --worker_command to ONNX: a data source of the model's input, for its shape")
	case o.output == "":
		return errors.New("--output: required: the file to write, e.g. model.onnx")
	}
	if storage.IsRemote(o.output) {
		if o.workerCommand != "" {
			return errors.New("--output: a --worker_command model is exported to a local file")
		}
		return nil
	}
	if fi, err := os.Stat(o.output); err == nil && fi.IsDir() {
		return fmt.Errorf("--output: %s is a directory; give a file name", o.output)
	}
	if fi, err := os.Stat(filepath.Dir(o.output)); err != nil || !fi.IsDir() {
		return fmt.Errorf("--output: directory %s does not exist: create it first", filepath.Dir(o.output))
	}
	return nil
}

// checkpointProblem says in one line why dir gave no model.
func checkpointProblem(dir string, err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("%s does not exist", dir)
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		return fmt.Sprintf("%s holds no complete checkpoint (a training job's model is in its --output directory's model/)", dir)
	}
	return err.Error()
}

// unwrapPath drops a *PathError's repeated path, keeping its reason.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
