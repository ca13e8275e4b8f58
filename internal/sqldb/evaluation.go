package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Evaluation is what TO EVALUATE … INTO writes: one row per metric.
type Evaluation struct {
	Model   string
	At      time.Time
	Records int64 // the rows evaluated
	Metrics []Metric
}

// Metric is one evaluation result, by name (AUC, Accuracy, Loss).
type Metric struct {
	Name  string
	Value float64
}

// evaluationColumns are an evaluation table's columns, in insert order:
// long, one row per metric, so that evaluations with other metrics or of
// other models append to the same table.
const evaluationColumns = "model, metric, value, records, evaluated_at"

// createEvaluation makes table, an evaluation table, if it is missing.
func (d Dialect) createEvaluation(table string) string {
	return "CREATE TABLE IF NOT EXISTS " + d.quoteName(table) + " (model " + d.keyType() + " NOT NULL, metric " +
		d.keyType() + " NOT NULL, value " + d.numberType() + ", records BIGINT NOT NULL, evaluated_at " + d.keyType() + " NOT NULL)"
}

// WriteEvaluation appends e's metrics to table, made if missing, in one
// transaction.
func WriteEvaluation(ctx context.Context, db *sql.DB, d Dialect, table string, e Evaluation) error {
	// DDL outside the transaction: MariaDB would commit it anyway.
	if _, err := db.ExecContext(ctx, d.createEvaluation(table)); err != nil {
		return fmt.Errorf("create table %s: %w", table, err)
	}
	err := inTx(ctx, db, func(tx *sql.Tx) error {
		insert := "INSERT INTO " + d.quoteName(table) + " (" + evaluationColumns + ") VALUES (" + d.placeholders(5) + ")"
		at := e.At.UTC().Format(time.RFC3339Nano)
		for _, m := range e.Metrics {
			if _, err := tx.ExecContext(ctx, insert, e.Model, m.Name, m.Value, e.Records, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write into %s: %w", table, err)
	}
	return nil
}
