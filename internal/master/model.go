package master

import (
	"cmp"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"

	"elasticdl/internal/export"
	"elasticdl/internal/master/job"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/ps/client"
	"elasticdl/internal/storage"
	"elasticdl/internal/wire"
	"elasticdl/model"
	"elasticdl/proto/masterpb"
	"elasticdl/proto/pserverpb"
)

// saveModel pulls the trained parameters from the parameter servers and
// writes them as a one-shard checkpoint without optimizer slots,
// --output/model/version-N/variables-0-of-1.ckpt, so that another job can
// start from it with --checkpoint_dir_for_init=OUTPUT/model. A model with
// embedding tables is written by the PS themselves (SaveModel), one file
// per shard with slots and table rows, --output/model/version-N/
// variables-i-of-n.ckpt; the path returned is then the version directory.
// It also records in the summary the checkpoints the PS restored.
func (m *Master) saveModel(ctx context.Context, s *job.Save) job.Saved {
	addrs, _ := m.psAddrs()
	if !m.cfg.UseAsync {
		// Sync SGD: no gradient is left unapplied in an accumulator.
		if err := setLiveWorkers(ctx, addrs, s.FlushLive, s.FlushGen, true, m.routes.tls.Creds()); err != nil {
			return job.Saved{Err: fmt.Errorf("flush accumulated gradients: %w", err)}
		}
	}
	c, err := client.Dial(ctx, addrs, client.WithCreds(m.routes.tls.Creds()))
	if err != nil {
		return job.Saved{Err: err}
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		return job.Saved{Err: fmt.Errorf("status of the PS: %w", err)}
	}
	saved := job.Saved{Restores: m.restores(st)}
	saved.ModelPath, saved.ModelVersion, saved.Err = m.writeModel(ctx, c, st)
	return saved
}

// writeModel writes the model the PS hold under --output/model, and
// removes any other version there.
func (m *Master) writeModel(ctx context.Context, c *client.Client, st []client.ShardStatus) (string, int64, error) {
	root := m.modelDir()
	if m.spec.Sparse != nil || m.spec.Build == nil {
		// Embedding tables live only on the PS (and a worker program's
		// model is known only to them): each shard writes itself
		// (parameters, slots, table rows) as one file of a complete
		// checkpoint version, labelled with the highest shard version.
		version := int64(-1)
		for _, s := range st {
			version = max(version, s.Version)
		}
		if _, err := c.SaveModel(ctx, root, version); err != nil {
			return "", 0, fmt.Errorf("write model: %w", err)
		}
		return checkpoint.VersionDir(root, version), version, removeOtherModels(root, version)
	}
	// Only the names and shapes matter: the values come from the PS.
	params := m.spec.Build(rand.New(rand.NewSource(m.cfg.Seed))).Params()
	if _, err := c.Pull(ctx, params); err != nil {
		return "", 0, fmt.Errorf("pull final parameters: %w", err)
	}
	tensors := make([]*pserverpb.Tensor, 0, len(params))
	for _, p := range params {
		tensors = append(tensors, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
	}
	return writeDenseModel(root, c.Version(), tensors)
}

func (m *Master) modelDir() string { return checkpoint.Join(m.cfg.Output, jobModelDir) }

// writeDenseModel writes dense parameters as a one-shard checkpoint without
// optimizer slots, the only model in root.
func writeDenseModel(root string, version int64, tensors []*pserverpb.Tensor) (string, int64, error) {
	out := &pserverpb.Checkpoint{Version: version, Shard: 0, NumShards: 1, DenseParameters: slices.Clone(tensors)}
	slices.SortFunc(out.DenseParameters, func(a, b *pserverpb.Tensor) int { return cmp.Compare(a.GetName(), b.GetName()) })
	path, err := checkpoint.Write(root, out)
	if err != nil {
		return "", 0, fmt.Errorf("write model: %w", err)
	}
	return path, version, removeOtherModels(root, version)
}

// removeOtherModels leaves one model in root: an earlier job's left there
// would be the one a warm start picks if its version were higher.
func removeOtherModels(root string, version int64) error {
	vs, err := checkpoint.Versions(root)
	if err != nil {
		return fmt.Errorf("write model: %w", err)
	}
	for _, v := range vs {
		if v == version {
			continue
		}
		if err := checkpoint.RemoveVersion(root, v); err != nil {
			return fmt.Errorf("remove an earlier model: %w", err)
		}
	}
	return nil
}

// saveUploadedModel writes the parameters an AllReduce worker uploaded
// (UploadModel checked they are the model's).
func (m *Master) saveUploadedModel(up *masterpb.UploadModelRequest) job.Saved {
	if up == nil {
		return job.Saved{Err: fmt.Errorf("the chosen worker's upload is missing")}
	}
	var saved job.Saved
	saved.ModelPath, saved.ModelVersion, saved.Err = writeDenseModel(m.modelDir(), up.GetVersion(), up.GetDenseParameters())
	return saved
}

// checkParams checks that tensors are exactly the model's dense parameters.
func (m *Master) checkParams(tensors []*pserverpb.Tensor) error {
	dims := map[string][]int64{}
	for _, t := range tensors {
		if _, err := wire.Validate(t); err != nil {
			return err
		}
		dims[t.GetName()] = t.GetDims()
	}
	if m.cfg.external() {
		// The master never builds a worker program's model: the members'
		// checksums are what says they hold the same one.
		if len(dims) != len(tensors) {
			return fmt.Errorf("%d tensors with %d names: a name is repeated", len(tensors), len(dims))
		}
		return nil
	}
	return fitsParams(dims, len(tensors), m.spec.Build(rand.New(rand.NewSource(m.cfg.Seed))).Params())
}

// restores are the checkpoints each PS's current process restored at
// start (a relaunch after a loss, or a warm start).
func (m *Master) restores(st []client.ShardStatus) []PSRestore {
	var out []PSRestore
	for i, s := range st {
		if s.RestoredVersion >= 0 {
			out = append(out, PSRestore{PS: i, Version: s.RestoredVersion, Dir: s.RestoredDir})
			m.log.Info("PS restored a checkpoint", "ps", i, "version", s.RestoredVersion, "dir", s.RestoredDir)
		}
	}
	return out
}

// resolveModel is the job's model: the registry's, or, for a worker
// program of the user's own (--worker_command), a spec that names the
// program and knows only the classes: the master never builds it.
func resolveModel(cfg *Config, reg *model.Registry) (model.Spec, error) {
	if cfg.external() {
		return model.Spec{Name: "worker command: " + cfg.WorkerCommand, NumClasses: cfg.NumClasses}, nil
	}
	spec, err := reg.Resolve(cfg.ModelDef, cfg.ModelParams)
	if err != nil {
		return spec, fmt.Errorf("--model_def/--model_params: %w", err)
	}
	return spec, nil
}

// exportModel writes the model just saved as OUTPUT/model.onnx when
// --export_format=onnx asks for it.
func (m *Master) exportModel() error {
	if m.cfg.ExportFormat == "" {
		return nil
	}
	loaded, err := export.Load(m.spec, m.modelDir())
	if err != nil {
		return fmt.Errorf("--export_format: %w", err)
	}
	om, err := export.ONNX(m.spec, loaded.Net, loaded.Tables)
	if err != nil {
		return fmt.Errorf("--export_format: %w", err)
	}
	path := checkpoint.Join(m.cfg.Output, exportFile)
	if err := writeExport(m.cfg.Output, om.Marshal()); err != nil {
		return fmt.Errorf("--export_format: %w", err)
	}
	m.log.Info("exported the model", "path", path, "format", m.cfg.ExportFormat)
	return nil
}

// exportFile is where --export_format=onnx writes the model, under
// --output.
const exportFile = "model.onnx"

// checkExportable refuses, before anything is launched, a job whose
// --export_format its model cannot meet (a layer with no ONNX mapping).
func checkExportable(cfg *Config, spec model.Spec) error {
	if cfg.ExportFormat == "" || spec.Build == nil {
		return nil
	}
	if _, err := export.ONNX(spec, spec.Build(rand.New(rand.NewSource(cfg.Seed))), nil); err != nil {
		return fmt.Errorf("--export_format=%s: %w", cfg.ExportFormat, err)
	}
	return nil
}

// writeExport writes the exported model as OUTPUT/model.onnx, a file or
// an object.
func writeExport(output string, b []byte) error {
	if !storage.IsRemote(output) {
		return export.WriteFile(filepath.Join(output, exportFile), b)
	}
	return storage.WriteObject(context.Background(), checkpoint.Join(output, exportFile), b, os.Getenv)
}
