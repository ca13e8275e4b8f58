package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	flag "github.com/spf13/pflag"

	"elasticdl/internal/master"
	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqlflow"
	"elasticdl/model"
)

// evalStatementFlags are the evaluate flags a TO EVALUATE statement sets
// itself: the stored model and the query's rows with their label.
var evalStatementFlags = []string{"model_def", "model_params", "validation_data", "checkpoint_dir_for_init", "output"}

// knownMetrics are what an evaluate job's summary reports, by the name
// validation.metrics takes (case does not matter).
var knownMetrics = []string{"AUC", "Accuracy", "Loss"}

// evalCheck is what checkEvaluate found of a TO EVALUATE statement.
type evalCheck struct {
	flags   []string // validation.* attributes as evaluate's flags
	metrics []string // what to write, as knownMetrics spells them; nil: all there are
}

func evaluateFlagSet() *flag.FlagSet { return jobFlagSet("evaluate", addEvaluateFlags) }

// checkEvaluate checks a TO EVALUATE statement before anything runs:
// its LABEL, validation.metrics, and its other attributes, each set on a
// fresh flag set of evaluate's. model.* is refused: the stored model's
// parameters are the ones it was trained with.
func checkEvaluate(s *sqlflow.Evaluate) (evalCheck, error) {
	if s.Label == "" {
		return evalCheck{}, &sqlflow.Error{Pos: s.At, Msg: "TO EVALUATE needs LABEL column: the column the model's predictions are scored against"}
	}
	known := map[string][]string{}
	evaluateFlagSet().VisitAll(func(f *flag.Flag) {
		if !slices.Contains(evalStatementFlags, f.Name) && !slices.Contains(notAttrs, f.Name) {
			known["validation"] = append(known["validation"], f.Name)
		}
	})
	known["validation"] = append(known["validation"], "metrics")
	var c evalCheck
	for _, a := range s.Attrs {
		if err := refuseModelAttr(a); err != nil {
			return evalCheck{}, err
		}
		if strings.EqualFold(a.Name, "validation.metrics") { // ours, not evaluate's
			var err error
			if c.metrics, err = parseMetrics(a.Value.String()); err != nil {
				return evalCheck{}, &sqlflow.Error{Pos: a.Pos, Msg: a.Name + ": " + err.Error()}
			}
			continue
		}
		flags, err := attrFlag(a, known, evaluateFlagSet)
		if err != nil {
			return evalCheck{}, err
		}
		c.flags = append(c.flags, flags...)
	}
	return c, nil
}

// parseMetrics reads validation.metrics: names of knownMetrics,
// comma-separated, each once.
func parseMetrics(v string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		i := slices.IndexFunc(knownMetrics, func(k string) bool { return strings.EqualFold(k, n) })
		switch {
		case i < 0:
			return nil, fmt.Errorf("unknown metric %q: known are %s", n, strings.Join(knownMetrics, ", "))
		case slices.Contains(out, knownMetrics[i]):
			return nil, fmt.Errorf("metric %s is named twice", knownMetrics[i])
		}
		out = append(out, knownMetrics[i])
	}
	return out, nil
}

// modelJobArgs are an evaluate or predict job's arguments for a stored
// model extracted into dir: its def and parameters, dataFlag's rows
// (source, a data source URI), then the job flags given to elasticdl sql
// that the job takes, then the statement's, which win.
func modelJobArgs(fs *flag.FlagSet, owned []string, m sqldb.StoredModel, dir, dataFlag, source string, jobFlags, stmtFlags []string) []string {
	args := []string{"--model_def=" + m.ModelDef, "--checkpoint_dir_for_init=" + dir, "--" + dataFlag + "=" + source}
	var trained struct {
		WorkerCommand string `json:"worker_command"`
	}
	if json.Unmarshal([]byte(m.Summary), &trained) == nil && trained.WorkerCommand != "" {
		// Its program defines it; a --worker_command given now wins. A
		// predict job of it needs the classes, which training stored.
		args[0] = "--model_def="
		args = append(args, "--worker_command="+trained.WorkerCommand)
		if n := paramValue(m.ModelParams, "num_classes"); n != "" && fs.Lookup("num_classes") != nil {
			args = append(args, "--num_classes="+n)
		}
	}
	if m.ModelParams != "" {
		args = append(args, "--model_params="+m.ModelParams)
	}
	for _, f := range jobFlags {
		name, _, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if fs.Lookup(name) != nil && !slices.Contains(owned, name) {
			args = append(args, f)
		}
	}
	return append(args, stmtFlags...)
}

// paramValue is key's value in model parameters "k=v; k=v" ("": none).
func paramValue(params, key string) string {
	for _, kv := range strings.Split(params, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// modelText is the text of a TO TRAIN model file (a YAML model), which
// the models table keeps with the model; "" for a zoo model.
func modelText(def string) (string, error) {
	if !model.IsDeclarative(def) {
		return "", nil
	}
	b, err := os.ReadFile(def)
	if err != nil {
		return "", fmt.Errorf("TO TRAIN '%s': %w", def, err)
	}
	return string(b), nil
}

// storedModelDef writes a stored model's file text (a YAML model) into
// dir under its file's name, and points m's ModelDef at it: the model
// then runs where the file it was trained from is not. A model stored
// without its text keeps its path.
func storedModelDef(m *sqldb.StoredModel, dir string) error {
	if m.ModelText == "" {
		return nil
	}
	path := filepath.Join(dir, filepath.Base(m.ModelDef))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model %s's file: %w", m.Name, err)
	}
	if err := os.WriteFile(path, []byte(m.ModelText), 0o644); err != nil {
		return fmt.Errorf("model %s's file: %w", m.Name, err)
	}
	m.ModelDef = path
	return nil
}

// evalMetrics picks the metrics asked for (nil: all there are) from an
// evaluate job's result; AUC is only defined for a binary model.
func evalMetrics(e *master.EvalSummary, names []string) ([]sqldb.Metric, error) {
	if e == nil {
		return nil, fmt.Errorf("the evaluate job reported no evaluation")
	}
	all := names == nil
	if all {
		names = knownMetrics
	}
	var out []sqldb.Metric
	for _, n := range names {
		switch n {
		case "AUC":
			if e.AUC == nil && all {
				continue
			}
			if e.AUC == nil {
				return nil, fmt.Errorf("AUC: not defined for this model (a binary, two-class model has one); ask for validation.metrics = 'Accuracy,Loss'")
			}
			out = append(out, sqldb.Metric{Name: n, Value: *e.AUC})
		case "Accuracy":
			out = append(out, sqldb.Metric{Name: n, Value: e.Accuracy})
		case "Loss":
			out = append(out, sqldb.Metric{Name: n, Value: e.Loss})
		}
	}
	return out, nil
}
