package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ModelsTable is the table of the models TO TRAIN … INTO stores.
const ModelsTable = "elasticdl_models"

// StoredModel is a row of ModelsTable: a trained model and what made it.
type StoredModel struct {
	Name        string
	CreatedAt   time.Time
	Statement   string // the TO TRAIN statement, as written
	ModelDef    string // --model_def: a zoo name or a model file's path
	ModelParams string // --model_params
	Summary     string // the job's job_summary.json
	// ModelText is the model file's text when ModelDef names one (a YAML
	// model), so that the model is used where that file is not; "" for a
	// zoo model, and for a model stored before the column was added.
	ModelText string
}

// ErrModelExists is wrapped by StoreModel's error for a name taken when
// replacing was not asked for.
var ErrModelExists = errors.New("a model of that name is stored")

// createModels is the statement that makes ModelsTable if it is missing.
func (d Dialect) createModels() string {
	t := d.textColumn()
	return "CREATE TABLE IF NOT EXISTS " + d.quote(ModelsTable) + " (name " + d.keyType() + " NOT NULL PRIMARY KEY, " +
		"created_at " + d.keyType() + " NOT NULL, statement " + t + ", model_def " + t + ", model_params " + t +
		", summary " + t + ", checkpoint " + d.blobType() + ", " + modelTextColumn + " " + t + ")"
}

// modelColumns are ModelsTable's columns in the order insert and load use,
// but modelTextColumn, which a table made by an older version lacks.
const modelColumns = "name, created_at, statement, model_def, model_params, summary, checkpoint"

// modelTextColumn holds StoredModel.ModelText: added to an older table
// when a model is stored, read as "" where it is missing.
const modelTextColumn = "model_text"

// hasModelText says whether ModelsTable (there) has modelTextColumn.
func hasModelText(ctx context.Context, db *sql.DB, d Dialect) (bool, error) {
	var n int
	if err := db.QueryRowContext(ctx, d.columnExists(ModelsTable, modelTextColumn)).Scan(&n); err != nil {
		return false, fmt.Errorf("look for column %s of %s: %w", modelTextColumn, ModelsTable, err)
	}
	return n > 0, nil
}

// addModelText adds modelTextColumn to a ModelsTable an older version
// made; a concurrent store adding it too is no error.
func addModelText(ctx context.Context, db *sql.DB, d Dialect) error {
	if have, err := hasModelText(ctx, db, d); err != nil || have {
		return err
	}
	_, err := db.ExecContext(ctx, "ALTER TABLE "+d.quote(ModelsTable)+" ADD COLUMN "+modelTextColumn+" "+d.textColumn())
	if err == nil {
		return nil
	}
	if have, herr := hasModelText(ctx, db, d); herr == nil && have {
		return nil
	}
	return fmt.Errorf("add column %s to %s: %w", modelTextColumn, ModelsTable, err)
}

// ModelExists says whether a model named name is stored (false when
// there is no ModelsTable yet).
func ModelExists(ctx context.Context, db *sql.DB, d Dialect, name string) (bool, error) {
	have, err := tableExists(ctx, db, d, ModelsTable)
	if err != nil || !have {
		return false, err
	}
	return modelExists(ctx, db, d, name)
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func modelExists(ctx context.Context, q querier, d Dialect, name string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+d.quote(ModelsTable)+" WHERE name = "+d.placeholders(1), name).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look for model %s: %w", name, err)
	}
	return n > 0, nil
}

// StoreModel stores m with the checkpoint directory dir (archived with
// TarDir) in ModelsTable, made if missing, in one transaction. An
// existing model of m's name is replaced when replace is set, and
// otherwise an error wrapping ErrModelExists. It returns the archive's
// size in bytes.
func StoreModel(ctx context.Context, db *sql.DB, d Dialect, m StoredModel, dir string, replace bool) (int, error) {
	ckpt, err := TarDir(dir)
	if err != nil {
		return 0, err
	}
	if d == MySQL {
		var limit int64
		if err := db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&limit); err != nil {
			return 0, fmt.Errorf("max_allowed_packet: %w", err)
		}
		size := int64(len(ckpt) + len(m.Statement) + len(m.Summary) + len(m.ModelParams) + len(m.ModelDef) + len(m.ModelText))
		if err := checkPacket(size, limit); err != nil {
			return 0, fmt.Errorf("store model %s: %w", m.Name, err)
		}
	}
	// MariaDB commits a CREATE TABLE at once: it is made before, not in,
	// the transaction (an empty table left is harmless).
	if _, err := db.ExecContext(ctx, d.createModels()); err != nil {
		return 0, fmt.Errorf("create %s: %w", ModelsTable, err)
	}
	if err := addModelText(ctx, db, d); err != nil {
		return 0, err
	}
	if err := insertModel(ctx, db, d, m, ckpt, replace); err != nil {
		return 0, fmt.Errorf("store model %s: %w", m.Name, err)
	}
	return len(ckpt), nil
}

func insertModel(ctx context.Context, db *sql.DB, d Dialect, m StoredModel, ckpt []byte, replace bool) error {
	return inTx(ctx, db, func(tx *sql.Tx) error {
		have, err := modelExists(ctx, tx, d, m.Name)
		if err != nil {
			return err
		}
		if have && !replace {
			return fmt.Errorf("%w: INTO OR REPLACE %s replaces it", ErrModelExists, m.Name)
		}
		if have {
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+d.quote(ModelsTable)+" WHERE name = "+d.placeholders(1), m.Name); err != nil {
				return fmt.Errorf("delete the old one: %w", err)
			}
		}
		at := m.CreatedAt.UTC().Format(time.RFC3339Nano)
		_, err = tx.ExecContext(ctx, "INSERT INTO "+d.quote(ModelsTable)+" ("+modelColumns+", "+modelTextColumn+") VALUES ("+d.placeholders(8)+")",
			m.Name, at, m.Statement, m.ModelDef, m.ModelParams, m.Summary, ckpt, m.ModelText)
		return err
	})
}

// checkPacket fails a row of size bytes that MariaDB's max_allowed_packet
// (limit) would refuse, saying how to raise it; a little is kept for the
// statement around the values.
func checkPacket(size, limit int64) error {
	const slack = 1 << 10
	if size+slack <= limit {
		return nil
	}
	return fmt.Errorf("the model is %s, more than the server's max_allowed_packet of %s: raise it "+
		"(SET GLOBAL max_allowed_packet = %d, or max_allowed_packet in the server's configuration)", mib(size), mib(limit), need(size+slack))
}

// need rounds n up to a whole MiB.
func need(n int64) int64 { return (n + 1<<20 - 1) / (1 << 20) * (1 << 20) }

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// LoadModel reads model name from ModelsTable and extracts its checkpoint
// into dir (made if missing), where --checkpoint_dir_for_init finds it.
func LoadModel(ctx context.Context, db *sql.DB, d Dialect, name, dir string) (StoredModel, error) {
	have, err := ModelExists(ctx, db, d, name)
	if err != nil {
		return StoredModel{}, err
	}
	if !have {
		return StoredModel{}, fmt.Errorf("no model %s in %s (TO TRAIN … INTO %s stores one)", name, ModelsTable, name)
	}
	withText, err := hasModelText(ctx, db, d)
	if err != nil {
		return StoredModel{}, err
	}
	var m StoredModel
	var at string
	var ckpt []byte
	var text sql.NullString // NULL in rows stored before the column was added
	cols, dest := modelColumns, []any{&m.Name, &at, &m.Statement, &m.ModelDef, &m.ModelParams, &m.Summary, &ckpt}
	if withText {
		cols, dest = cols+", "+modelTextColumn, append(dest, &text)
	}
	err = db.QueryRowContext(ctx, "SELECT "+cols+" FROM "+d.quote(ModelsTable)+" WHERE name = "+d.placeholders(1), name).Scan(dest...)
	m.ModelText = text.String
	if err != nil {
		return StoredModel{}, fmt.Errorf("load model %s: %w", name, err)
	}
	if m.CreatedAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
		return StoredModel{}, fmt.Errorf("load model %s: created_at: %w", name, err)
	}
	if err := Untar(ckpt, dir); err != nil {
		return StoredModel{}, fmt.Errorf("load model %s: %w", name, err)
	}
	return m, nil
}
