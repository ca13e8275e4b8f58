package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqlflow"
)

// predict runs a TO PREDICT statement: the query's rows staged with
// their number, a predict job of the stored model on them, its
// predictions written in batches, and the result table made from both
// and renamed into place last (docs/design-sql.md, decision 6).
func (r sqlRun) predict(ctx context.Context, s *sqlflow.Predict, flags []string) error {
	have, err := sqldb.TableExists(ctx, r.db, r.dialect, s.Table)
	if err != nil {
		return err
	}
	if have {
		return fmt.Errorf("TO PREDICT %s.%s: table %s exists: drop it first, or predict into another table (TO PREDICT does not overwrite)", s.Table, s.Column, s.Table)
	}
	dir, err := r.workDir("elasticdl-sql-predict-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m, err := sqldb.LoadModel(ctx, r.db, r.dialect, s.Using, filepath.Join(dir, "model"))
	if err != nil {
		return fmt.Errorf("TO PREDICT … USING %s: %w", s.Using, err)
	}
	if err := storedModelDef(&m, filepath.Join(dir, "def")); err != nil {
		return err
	}
	trained, specs, err := trainedOn(m)
	if err != nil {
		return err
	}
	label := trained.Label
	from := "its COLUMN clause"
	if len(specs) == 0 {
		// The features the model was trained on, when its training query
		// still runs; else the SELECT's columns but the label.
		tcols, err := sqldb.Describe(ctx, r.db, r.dialect, trained.Select)
		from = "its training query's columns but " + label
		if err != nil {
			from = fmt.Sprintf("this query's columns but %s (its training query fails: %v)", label, err)
		}
		specs = trainedColumns(tcols, label)
	}
	fmt.Fprintf(r.env.Stdout, "model %s takes its features from %s\n", s.Using, from)
	st := sqldb.StagingFor(s.Table)
	// What a killed run for the same table left goes first.
	if err := sqldb.DropStaging(ctx, r.db, r.dialect, st); err != nil {
		return err
	}
	n, err := r.predictStaged(ctx, m, dir, st, label, specs, s, flags)
	if err != nil {
		// A failed run drops its staging tables (MariaDB commits each
		// CREATE TABLE at once); a killed one leaves them for the next.
		if derr := sqldb.DropStaging(context.WithoutCancel(ctx), r.db, r.dialect, st); derr != nil {
			return fmt.Errorf("%w (and %v)", err, derr)
		}
		return err
	}
	fmt.Fprintf(r.env.Stdout, "%d %s of model %s written into %s (column %s)\n", n, plural(int64(n), "prediction", "predictions"), s.Using, s.Table, s.Column)
	return nil
}

// predictStaged stages the query's rows in st.In, runs the predict job on
// them and makes the result table.
func (r sqlRun) predictStaged(ctx context.Context, m sqldb.StoredModel, dir string, st sqldb.Staging,
	label string, specs []columnFeature, s *sqlflow.Predict, flags []string) (int, error) {
	cols, err := sqldb.StageInput(ctx, r.db, r.dialect, st, s.Select)
	if err != nil {
		return 0, fmt.Errorf("the SELECT: %w", err)
	}
	query, err := predictQuery(r.dialect, st.In, cols, label, specs)
	if err != nil {
		return 0, fmt.Errorf("USING %s: %w", s.Using, err)
	}
	var rows int64
	if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+r.dialect.Quote(st.In)).Scan(&rows); err != nil {
		return 0, fmt.Errorf("count %s: %w", st.In, err)
	}
	if rows == 0 {
		return 0, fmt.Errorf("the SELECT has no rows: nothing to predict")
	}
	outputs := filepath.Join(dir, "predictions.csv")
	args := modelJobArgs(predictFlagSet(), predictStatementFlags, m, filepath.Join(dir, "model"), "prediction_data",
		predictSource(r.datasource, query, label, specs), r.jobFlags, flags)
	args = append(args, "--prediction_outputs="+outputs, "--output="+filepath.Join(dir, "output"))
	if err := r.runJob(ctx, runPredict, args); err != nil {
		return 0, err
	}
	f, err := os.Open(outputs)
	if err != nil {
		return 0, fmt.Errorf("the job's predictions: %w", err)
	}
	defer f.Close()
	ps, p1, err := readPredictions(f, rows)
	if err != nil {
		return 0, err
	}
	if err := sqldb.WritePredictions(ctx, r.db, r.dialect, st, ps); err != nil {
		return 0, err
	}
	input := resultInput(cols, s.Column)
	if err := sqldb.FinishPredictions(ctx, r.db, r.dialect, st, s.Table, input, s.Column, p1); err != nil {
		return 0, err
	}
	return len(ps), nil
}
