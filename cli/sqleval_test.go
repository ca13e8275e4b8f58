package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"elasticdl/internal/master"
	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqlflow"
)

// TestCheckEvaluate: attributes become evaluate's flags or the metrics,
// and every mistake is an error at its place before anything runs.
func TestCheckEvaluate(t *testing.T) {
	for _, c := range []struct {
		src, err string
		flags    []string
		metrics  []string
	}{
		{src: "SELECT * FROM t TO EVALUATE m LABEL y INTO r"},
		{src: "SELECT * FROM t TO EVALUATE m WITH validation.metrics = 'auc, Accuracy', validation.num_workers = 3 LABEL y INTO r",
			flags: []string{"--num_workers=3"}, metrics: []string{"AUC", "Accuracy"}},
		{src: "SELECT * FROM t TO EVALUATE m WITH validation.minibatch_size = 32 LABEL y INTO r", flags: []string{"--minibatch_size=32"}},
		{src: "SELECT * FROM t TO EVALUATE m INTO r", err: "line 1, column 1: TO EVALUATE needs LABEL"},
		{src: "SELECT * FROM t TO EVALUATE m WITH validation.metrics = 'AUC,F1' LABEL y INTO r",
			err: `line 1, column 36: validation.metrics: unknown metric "F1": known are AUC, Accuracy, Loss`},
		{src: "SELECT * FROM t TO EVALUATE m WITH validation.metrics = 'Loss,loss' LABEL y INTO r", err: "metric Loss is named twice"},
		{src: "SELECT * FROM t TO EVALUATE m WITH model.dense = 2 LABEL y INTO r", err: "model.dense: a stored model keeps the parameters"},
		{src: "SELECT * FROM t TO EVALUATE m WITH validation.num_workers = 'many' LABEL y INTO r", err: "validation.num_workers: invalid argument"},
		{src: "SELECT * FROM t TO EVALUATE m WITH validation.validation_data = 'x' LABEL y INTO r", err: "unknown attribute validation.validation_data"},
		{src: "SELECT * FROM t TO EVALUATE m WITH train.epoch = 2 LABEL y INTO r", err: "unknown attribute train.epoch"},
	} {
		stmts, err := sqlflow.Parse(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		got, err := checkEvaluate(stmts[0].(*sqlflow.Evaluate))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.src, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got.flags, c.flags) || !slices.Equal(got.metrics, c.metrics) {
			t.Errorf("%s: %+v, %v; want flags %q, metrics %q", c.src, got, err, c.flags, c.metrics)
		}
	}
}

// TestModelJobArgs: the stored model, the query's rows, the job flags
// given to elasticdl sql that evaluate takes (not the ones the statement
// sets, nor train's own; --backend too), then the statement's.
func TestModelJobArgs(t *testing.T) {
	m := sqldb.StoredModel{ModelDef: "ctr.wide_and_deep", ModelParams: "dense=2; fields=1"}
	got := modelJobArgs(evaluateFlagSet(), evalStatementFlags, m, "/tmp/m", "validation_data", sourceURI("sqlite:///d.db", "SELECT * FROM t", "y", nil),
		[]string{"--num_workers=2", "--num_epochs=3", "--validation_data=x", "--minibatch_size=16", "--backend=k8s"}, []string{"--num_workers=4"})
	want := []string{"--model_def=ctr.wide_and_deep", "--checkpoint_dir_for_init=/tmp/m",
		"--validation_data=sqlite:///d.db?query=SELECT+%2A+FROM+t&label=y", "--model_params=dense=2; fields=1",
		"--num_workers=2", "--minibatch_size=16", "--backend=k8s", "--num_workers=4"}
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if u := sourceURI("sqlite:///d.db?_busy=1", "SELECT 1", "", nil); u != "sqlite:///d.db?_busy=1&query=SELECT+1" {
		t.Errorf("sourceURI without a label: %s", u)
	}
}

// TestEvalMetrics: the metrics asked for, in that order; all there are
// by default; AUC asked of a model without one is an error.
func TestEvalMetrics(t *testing.T) {
	auc := 0.9
	binary := &master.EvalSummary{Accuracy: 0.8, AUC: &auc, Loss: 0.3}
	multi := &master.EvalSummary{Accuracy: 0.7, Loss: 0.6}
	for _, c := range []struct {
		e     *master.EvalSummary
		names []string
		want  []sqldb.Metric
		err   string
	}{
		{e: binary, want: []sqldb.Metric{{Name: "AUC", Value: 0.9}, {Name: "Accuracy", Value: 0.8}, {Name: "Loss", Value: 0.3}}},
		{e: binary, names: []string{"Loss", "AUC"}, want: []sqldb.Metric{{Name: "Loss", Value: 0.3}, {Name: "AUC", Value: 0.9}}},
		{e: multi, want: []sqldb.Metric{{Name: "Accuracy", Value: 0.7}, {Name: "Loss", Value: 0.6}}},
		{e: multi, names: []string{"AUC"}, err: "AUC: not defined for this model"},
		{e: nil, err: "reported no evaluation"},
	} {
		got, err := evalMetrics(c.e, c.names)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.names, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%v: %v, %v; want %v", c.names, got, err, c.want)
		}
	}
}

// TestStoredModelText: a YAML model's text is read at TO TRAIN and
// written back for a job of the stored model, under its file's name; a
// zoo model and a model stored without its text keep their def.
func TestStoredModelText(t *testing.T) {
	dir := t.TempDir()
	yaml := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(yaml, []byte("name: m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if text, err := modelText(yaml); err != nil || text != "name: m\n" {
		t.Errorf("modelText(%s) = %q, %v", yaml, text, err)
	}
	if text, err := modelText("ctr.deepfm"); err != nil || text != "" {
		t.Errorf("modelText of a zoo model = %q, %v", text, err)
	}
	if _, err := modelText(filepath.Join(dir, "gone.yml")); err == nil || !strings.Contains(err.Error(), "TO TRAIN '"+dir+"/gone.yml': open") {
		t.Errorf("a missing file: %v", err)
	}
	m := sqldb.StoredModel{Name: "m", ModelDef: "/elsewhere/m.yaml", ModelText: "name: m\n"}
	if err := storedModelDef(&m, filepath.Join(dir, "def")); err != nil || m.ModelDef != filepath.Join(dir, "def", "m.yaml") {
		t.Fatalf("storedModelDef: %+v, %v", m, err)
	}
	if b, err := os.ReadFile(m.ModelDef); err != nil || string(b) != m.ModelText {
		t.Errorf("the written file: %q, %v", b, err)
	}
	old := sqldb.StoredModel{Name: "old", ModelDef: "/elsewhere/m.yaml"}
	if err := storedModelDef(&old, filepath.Join(dir, "def2")); err != nil || old.ModelDef != "/elsewhere/m.yaml" {
		t.Errorf("a model without text: %+v, %v", old, err)
	}
	m.ModelDef = "m.yaml"
	if err := storedModelDef(&m, filepath.Join(yaml, "def")); err == nil || !strings.Contains(err.Error(), "model m's file: ") {
		t.Errorf("a directory that cannot be made: %v", err)
	}
}
