package master

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"slices"

	"elasticdl/data"
	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/storage"
	"elasticdl/model"
	"elasticdl/nn"
)

// checkOutputDir fails when the directory a file is to be written to does
// not exist.
func checkOutputDir(path string) error {
	if storage.IsRemote(path) {
		return checkRemoteOutput(context.Background(), path)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--prediction_outputs: directory %s does not exist: create it first", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--prediction_outputs: %s is not a directory", dir)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("--prediction_outputs: %s is a directory; give a file name", path)
	}
	return nil
}

// countRecords opens a data source to learn its size and check that it
// fits the model, then closes it: workers read the records themselves.
func countRecords(uri string, spec model.Spec) (int64, error) {
	src, err := data.Open(uri)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	uri = src.Name() // a snapshot's without its password
	if src.Len() == 0 {
		return 0, fmt.Errorf("%s: no records", uri)
	}
	if spec.Build == nil {
		return src.Len(), nil // a worker program's model (--worker_command): its SDK checks the records
	}
	hint := ""
	if spec.Configure != nil {
		hint = " (--model_params: " + spec.ParamsHelp + ")"
	}
	if !sameShape(src.FeatureShape(), spec.InputShape) {
		return 0, fmt.Errorf("%s: records have shape %v, model %s expects %v%s", uri, src.FeatureShape(), spec.Name, spec.InputShape, hint)
	}
	if spec.Sparse != nil {
		cs, ok := src.(data.CategoricalSource)
		if !ok {
			return 0, fmt.Errorf("%s: records have no categorical ids, model %s expects %d", uri, spec.Name, spec.Sparse.NumCategorical)
		}
		if cs.NumCategorical() != spec.Sparse.NumCategorical {
			return 0, fmt.Errorf("%s: records have %d categorical ids, model %s expects %d%s",
				uri, cs.NumCategorical(), spec.Name, spec.Sparse.NumCategorical, hint)
		}
	}
	return src.Len(), nil
}

// jobModelDir is where a training job writes its model under --output.
const jobModelDir = "model"

// loadInit loads the checkpoint of --checkpoint_dir_for_init. The flag
// may name a training job's --output directory: when it holds no complete
// checkpoint and its model/ does, that is the one, and cfg is pointed at
// it so that the PS start from it too.
func loadInit(cfg *Config, log *slog.Logger) (*checkpoint.Set, error) {
	set, err := checkpoint.Load(cfg.CheckpointDirForInit, log)
	if !errors.Is(err, checkpoint.ErrNoCheckpoint) {
		return set, err
	}
	model := checkpoint.Join(cfg.CheckpointDirForInit, jobModelDir)
	if ms, merr := checkpoint.Load(model, log); merr == nil {
		log.Info("--checkpoint_dir_for_init names a training job's output directory: starting from its model", "dir", model)
		cfg.CheckpointDirForInit = model
		return ms, nil
	}
	return nil, fmt.Errorf("%w (a training job's model is in its --output directory's %s/, which this flag also accepts)", err, jobModelDir)
}

// checkCheckpoints fails the job before anything is launched when the
// checkpoint the PS would start from does not fit the model, or when
// --checkpoint_dir_for_init holds none; otherwise every PS would fail at
// start, or every worker at its first pull. It returns the checkpoint
// the job starts from: its root directory and version (-1: none); cfg's
// --checkpoint_dir_for_init becomes the directory it was found in.
func checkCheckpoints(cfg *Config, spec model.Spec, log *slog.Logger) (root string, version int64, err error) {
	if cfg.CheckpointDir == "" && cfg.CheckpointDirForInit == "" {
		return "", -1, nil
	}
	var set *checkpoint.Set
	flagName, root := "checkpoint_dir", cfg.CheckpointDir
	if cfg.CheckpointDir != "" {
		set, err = checkpoint.Load(cfg.CheckpointDir, log)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, checkpoint.ErrNoCheckpoint) {
			return "", -1, fmt.Errorf("--checkpoint_dir: %w", err)
		}
	}
	if set == nil && cfg.CheckpointDirForInit != "" {
		flagName = "checkpoint_dir_for_init"
		if set, err = loadInit(cfg, log); err != nil {
			return "", -1, fmt.Errorf("--checkpoint_dir_for_init: %w", err)
		}
		root = cfg.CheckpointDirForInit
	}
	if set == nil {
		return "", -1, nil
	}
	if spec.Build == nil {
		// A worker program's model: the workers check the parameters they
		// pull against their own.
		log.Info("the job starts from a checkpoint", "dir", set.Dir, "version", set.Version, "shards", set.NumShards)
		return root, set.Version, nil
	}
	// Only the names and shapes matter.
	params := spec.Build(rand.New(rand.NewSource(cfg.Seed))).Params()
	dims := map[string][]int64{}
	for _, c := range set.Shards {
		for _, t := range c.GetDenseParameters() {
			dims[t.GetName()] = t.GetDims()
		}
	}
	if err := fitsParams(dims, len(dims), params); err != nil {
		return "", -1, fmt.Errorf("--%s: %s does not fit model %s: %w", flagName, set.Dir, spec.Name, err)
	}
	if err := checkTables(set, spec); err != nil {
		return "", -1, fmt.Errorf("--%s: %s does not fit model %s: %w", flagName, set.Dir, spec.Name, err)
	}
	log.Info("the job starts from a checkpoint", "dir", set.Dir, "version", set.Version, "shards", set.NumShards)
	return root, set.Version, nil
}

// checkTables checks the checkpoint's embedding tables against the model's:
// each must be one of the model's, with its dimension. A table of the model
// that the checkpoint lacks is fine (its rows are created on first use).
func checkTables(set *checkpoint.Set, spec model.Spec) error {
	want := map[string]int{}
	if spec.Sparse != nil {
		for _, t := range spec.Sparse.Tables() {
			want[t.Table] = t.Dim
		}
	}
	for _, c := range set.Shards {
		for _, et := range c.GetEmbeddingTables() {
			name, dim := et.GetInfo().GetName(), et.GetInfo().GetDim()
			d, ok := want[name]
			if !ok {
				return fmt.Errorf("embedding table %q is not one of the model's", name)
			}
			if int64(d) != dim {
				return fmt.Errorf("embedding table %q has dimension %d, the model %d", name, dim, d)
			}
		}
	}
	return nil
}

// fitsParams checks that the tensors described by dims (name -> shape; n
// tensors in all, so that duplicates show) are exactly the model's dense
// parameters.
func fitsParams(dims map[string][]int64, n int, params []*nn.Param) error {
	for _, p := range params {
		d, ok := dims[p.Name]
		if !ok {
			return fmt.Errorf("no parameter %q", p.Name)
		}
		if !slices.Equal(d, intsToInt64(p.Value.Shape)) {
			return fmt.Errorf("parameter %q has shape %v, the model %v", p.Name, d, p.Value.Shape)
		}
	}
	if n != len(params) || len(dims) != len(params) {
		return fmt.Errorf("%d parameters, the model has %d", n, len(params))
	}
	return nil
}

func intsToInt64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}

func sameShape(a, b []int) bool {
	prod := func(s []int) int {
		p := 1
		for _, d := range s {
			p *= d
		}
		return p
	}
	// A flat record fits a model whose input has the same number of values.
	return prod(a) == prod(b)
}
