package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"elasticdl/internal/master"
	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqlflow"
)

// sqlRun runs a checked script's statements on one database.
type sqlRun struct {
	env        Env
	db         *sql.DB
	dialect    sqldb.Dialect
	datasource string   // --datasource, as given
	jobFlags   []string // the train flags given to elasticdl sql
	sharedDir  string   // --shared_dir ("": the temporary directory)
	jobs       jobOptions
	jobName    string // --job_name, the jobs' name unless a statement sets it
}

// stmtCheck is what checkTrain or checkEvaluate found of a statement.
type stmtCheck struct {
	settings sqlflow.Settings
	features []columnFeature
	eval     evalCheck
	predict  []string // a TO PREDICT's predict.* attributes as predict's flags
}

func (r sqlRun) run(ctx context.Context, s sqlflow.Statement, c stmtCheck) error {
	switch s := s.(type) {
	case *sqlflow.Train:
		return r.train(ctx, s, c)
	case *sqlflow.Evaluate:
		return r.evaluate(ctx, s, c.eval)
	case *sqlflow.Predict:
		return r.predict(ctx, s, c.predict)
	}
	res, truncated, err := sqldb.Run(ctx, r.db, s.Text())
	if err != nil {
		return err
	}
	writeResult(r.env.Stdout, res, truncated)
	return nil
}

// train runs a TO TRAIN statement: a local training job on the query's
// rows, whose model it stores INTO the models table.
func (r sqlRun) train(ctx context.Context, s *sqlflow.Train, c stmtCheck) error {
	text, err := modelText(s.Model)
	if err != nil {
		return err
	}
	if !s.Replace {
		// Cheap, and before the training it would waste.
		have, err := sqldb.ModelExists(ctx, r.db, r.dialect, s.Into)
		if err != nil {
			return err
		}
		if have {
			return fmt.Errorf("INTO %s: %w: INTO OR REPLACE %s replaces it", s.Into, sqldb.ErrModelExists, s.Into)
		}
	}
	cols, err := sqldb.Describe(ctx, r.db, r.dialect, s.Select)
	if err != nil {
		return fmt.Errorf("the SELECT: %w", err)
	}
	p, err := planFeatures(cols, s.Label, c.features)
	if err != nil {
		return err
	}
	query := s.Select
	if p.project != nil {
		query = r.dialect.Project(s.Select, p.project)
	}
	// A --worker_command (PyTorch) model is the program's: the statement
	// names it, and the program takes the shape from the parameters.
	worker := lastFlag("worker_command", r.jobFlags, c.settings.Flags) != ""
	params := deriveParams(s.Model, c.settings.ModelParams, p, worker)
	if worker && paramValue(params, "num_classes") == "" {
		if params, err = r.withClasses(ctx, query, s.Label, params); err != nil {
			return err
		}
	}
	writeFeatures(r.env, p)
	out, err := r.workDir("elasticdl-sql-train-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out)
	def := s.Model
	if worker {
		def = ""
	}
	args := trainArgs(r.datasource, def, query, s.Label, params, c.features, r.jobFlags, c.settings.Flags)
	if err := r.runJob(ctx, runTrain, append(args, "--output="+out)); err != nil {
		return err
	}
	summary, err := os.ReadFile(filepath.Join(out, "job_summary.json"))
	if err != nil {
		return fmt.Errorf("the job's summary: %w", err)
	}
	m := sqldb.StoredModel{Name: s.Into, CreatedAt: time.Now(), Statement: s.Text(), ModelDef: s.Model, ModelParams: params, Summary: string(summary), ModelText: text}
	n, err := sqldb.StoreModel(ctx, r.db, r.dialect, m, filepath.Join(out, "model"), s.Replace)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.env.Stdout, "model %s stored in table %s (checkpoint %s)\n", s.Into, sqldb.ModelsTable, kib(n))
	return nil
}

// withClasses adds num_classes, the largest label of the query's rows
// plus one, to a worker program's parameters: a predict job of the model
// needs it later, and the program may take it.
func (r sqlRun) withClasses(ctx context.Context, query, label, params string) (string, error) {
	var top sql.NullInt64
	q := "SELECT MAX(" + r.dialect.Quote(label) + ") FROM (" + query + ") q"
	if err := r.db.QueryRowContext(ctx, q).Scan(&top); err != nil {
		return "", fmt.Errorf("the label's classes: %w", err)
	}
	if !top.Valid || top.Int64 < 1 {
		return "", fmt.Errorf("LABEL %s: want class numbers 0, 1, …; the largest is %v", label, top.Int64)
	}
	if params != "" {
		params += "; "
	}
	return params + "num_classes=" + strconv.FormatInt(top.Int64+1, 10), nil
}

// writeFeatures shows how the columns are taken, before the job starts.
func writeFeatures(env Env, p featurePlan) {
	res := sqldb.Result{Query: true, Columns: []string{"column", "type", "feature"}}
	for _, f := range p.features {
		res.Rows = append(res.Rows, []sql.NullString{{String: f.name, Valid: true}, {String: f.sqlType, Valid: true}, {String: f.kind, Valid: true}})
	}
	writeResult(env.Stdout, res, false)
	fmt.Fprintf(env.Stdout, "features: %d dense, %d categorical\n", p.dense, p.fields)
}

func kib(n int) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }

// evaluate runs a TO EVALUATE statement: an evaluate job of the stored
// model on the query's rows; the metrics asked for are printed and
// appended INTO the results table.
func (r sqlRun) evaluate(ctx context.Context, s *sqlflow.Evaluate, c evalCheck) error {
	dir, err := r.workDir("elasticdl-sql-evaluate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m, err := sqldb.LoadModel(ctx, r.db, r.dialect, s.Model, filepath.Join(dir, "model"))
	if err != nil {
		return fmt.Errorf("TO EVALUATE %s: %w", s.Model, err)
	}
	if err := storedModelDef(&m, filepath.Join(dir, "def")); err != nil {
		return err
	}
	_, specs, err := trainedOn(m) // its CATEGORY_HASH columns hash here too
	if err != nil {
		return err
	}
	out := filepath.Join(dir, "output")
	args := modelJobArgs(evaluateFlagSet(), evalStatementFlags, m, filepath.Join(dir, "model"), "validation_data",
		sourceURI(r.datasource, s.Select, s.Label, specs), r.jobFlags, c.flags)
	if err := r.runJob(ctx, runEvaluate, append(args, "--output="+out)); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(out, "job_summary.json"))
	if err != nil {
		return fmt.Errorf("the job's summary: %w", err)
	}
	var sum master.Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		return fmt.Errorf("the job's summary: %w", err)
	}
	metrics, err := evalMetrics(sum.Eval, c.metrics)
	if err != nil {
		return err
	}
	e := sqldb.Evaluation{Model: s.Model, At: time.Now(), Records: sum.Eval.Records, Metrics: metrics}
	res := sqldb.Result{Query: true, Columns: []string{"metric", "value"}}
	for _, mt := range metrics {
		res.Rows = append(res.Rows, []sql.NullString{{String: mt.Name, Valid: true}, {String: fmt.Sprintf("%.6f", mt.Value), Valid: true}})
	}
	writeResult(r.env.Stdout, res, false)
	if s.Into == "" {
		return nil
	}
	if err := sqldb.WriteEvaluation(ctx, r.db, r.dialect, s.Into, e); err != nil {
		return err
	}
	fmt.Fprintf(r.env.Stdout, "%d %s of model %s on %d rows written into %s\n", len(metrics), plural(int64(len(metrics)), "metric", "metrics"), s.Model, e.Records, s.Into)
	return nil
}
