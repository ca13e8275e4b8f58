package cli

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

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
}

// trainCheck is what checkTrain found of a TO TRAIN statement.
type trainCheck struct {
	settings sqlflow.Settings
	features []columnFeature
}

func (r sqlRun) run(ctx context.Context, s sqlflow.Statement, c trainCheck) error {
	if t, ok := s.(*sqlflow.Train); ok {
		return r.train(ctx, t, c)
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
func (r sqlRun) train(ctx context.Context, s *sqlflow.Train, c trainCheck) error {
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
	params := deriveParams(s.Model, c.settings.ModelParams, p)
	writeFeatures(r.env, p)
	out, err := os.MkdirTemp("", "elasticdl-sql-train-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out)
	args := trainArgs(r.datasource, s.Model, query, s.Label, params, r.jobFlags, c.settings.Flags)
	if err := runTrain(ctx, r.env, append(args, "--output="+out)); err != nil {
		return err
	}
	summary, err := os.ReadFile(filepath.Join(out, "job_summary.json"))
	if err != nil {
		return fmt.Errorf("the job's summary: %w", err)
	}
	m := sqldb.StoredModel{Name: s.Into, CreatedAt: time.Now(), Statement: s.Text(), ModelDef: s.Model, ModelParams: params, Summary: string(summary)}
	n, err := sqldb.StoreModel(ctx, r.db, r.dialect, m, filepath.Join(out, "model"), s.Replace)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.env.Stdout, "model %s stored in table %s (checkpoint %s)\n", s.Into, sqldb.ModelsTable, kib(n))
	return nil
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
