package cli

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	flag "github.com/spf13/pflag"

	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqlflow"
)

// predictStatementFlags are the predict flags a TO PREDICT statement sets
// itself: the stored model, the staged rows and where they go.
var predictStatementFlags = []string{"model_def", "model_params", "prediction_data", "prediction_outputs", "checkpoint_dir_for_init", "output"}

func predictFlagSet() *flag.FlagSet { return jobFlagSet("predict", addPredictFlags) }

// checkPredict checks a TO PREDICT statement before anything runs: its
// result table (one of the connection's schema, not a staging name) and
// its predict.* attributes, each set on a fresh flag set of predict's.
// model.* is refused: the stored model keeps its parameters.
func checkPredict(s *sqlflow.Predict) ([]string, error) {
	if strings.Contains(s.Table, ".") {
		return nil, &sqlflow.Error{Pos: s.At, Msg: "TO PREDICT " + s.Table + "." + s.Column + ": the result table is one of the connection's schema or database: name it without a schema"}
	}
	if strings.Contains(s.Table, "__edl_") {
		return nil, &sqlflow.Error{Pos: s.At, Msg: "TO PREDICT " + s.Table + ": names with __edl_ are TO PREDICT's staging tables"}
	}
	known := map[string][]string{}
	predictFlagSet().VisitAll(func(f *flag.Flag) {
		if !slices.Contains(predictStatementFlags, f.Name) && !slices.Contains(notAttrs, f.Name) {
			known["predict"] = append(known["predict"], f.Name)
		}
	})
	var flags []string
	for _, a := range s.Attrs {
		if err := refuseModelAttr(a); err != nil {
			return nil, err
		}
		one, err := attrFlag(a, known, predictFlagSet)
		if err != nil {
			return nil, err
		}
		flags = append(flags, one...)
	}
	return flags, nil
}

// trainedOn is what a stored model's TO TRAIN statement says of its
// input: its SELECT, its label and COLUMN clauses.
func trainedOn(m sqldb.StoredModel) (*sqlflow.Train, []columnFeature, error) {
	stmts, err := sqlflow.Parse(m.Statement)
	if err != nil || len(stmts) != 1 {
		return nil, nil, fmt.Errorf("model %s: its statement does not parse: %v", m.Name, err)
	}
	s, ok := stmts[0].(*sqlflow.Train)
	if !ok {
		return nil, nil, fmt.Errorf("model %s: its statement is not TO TRAIN", m.Name)
	}
	_, features, err := checkTrain(s)
	if err != nil {
		return nil, nil, fmt.Errorf("model %s: its statement: %w", m.Name, err)
	}
	return s, features, nil
}

// trainedColumns are the features a model trained without a COLUMN
// clause took: its training query's columns (trained) but its label.
func trainedColumns(trained []sqldb.Column, label string) []columnFeature {
	var out []columnFeature
	for _, c := range trained {
		if c.Name != label {
			out = append(out, columnFeature{name: c.Name})
		}
	}
	return out
}

// predictQuery is the query predict's job reads from the staged input
// table in: the features as training took them (the COLUMN clauses'
// casts included), a label of 0 in the training label's name (the job
// wants one; the input's own, if there, is left out), and the row number.
func predictQuery(d sqldb.Dialect, in string, cols []sqldb.Column, label string, specs []columnFeature) (string, error) {
	var feats []sqldb.Column
	for _, c := range cols {
		if c.Name != label {
			feats = append(feats, c)
		}
	}
	for _, sp := range specs {
		if !slices.ContainsFunc(feats, func(c sqldb.Column) bool { return c.Name == sp.name }) {
			var names []string
			for _, c := range cols {
				names = append(names, c.Name)
			}
			return "", fmt.Errorf("column %s, a feature of the model, is not one of the query's columns: %s", sp.name, columnList(names))
		}
	}
	p, err := planFeatures(append(feats, sqldb.Column{Name: label, Kind: sqldb.Number}), label, specs)
	if err != nil {
		return "", err
	}
	if p.project == nil {
		for _, c := range feats {
			p.project = append(p.project, sqldb.Projected{Name: c.Name})
		}
		p.project = append(p.project, sqldb.Projected{Name: label})
	}
	// The input's own label column, if there, goes: the job's is the 0.
	list := []string{}
	for _, c := range feats {
		list = append(list, "q."+d.Quote(c.Name))
	}
	list = append(list, "q."+d.Quote(sqldb.InputRow), "0 AS "+d.Quote(label))
	base := "SELECT " + strings.Join(list, ", ") + " FROM " + d.Quote(in) + " q"
	return d.Project(base, append(p.project, sqldb.Projected{Name: sqldb.InputRow})), nil
}

// predictSource is predict's --prediction_data: query's rows in input
// order, their row number not a feature, the model's CATEGORY_HASH
// columns (of specs) hashed.
func predictSource(datasource, query, label string, specs []columnFeature) string {
	return sourceURI(datasource, query, label, specs) + "&order=" + sqldb.InputRow + "&ignore=" + sqldb.InputRow
}

// readPredictions reads predict's CSV (index,class,p0,...): one row per
// input row, in order. p1 says whether the model has two classes.
func readPredictions(r io.Reader, rows int64) (ps []sqldb.Prediction, p1 bool, err error) {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if err != nil {
		return nil, false, fmt.Errorf("predictions: %w", err)
	}
	if len(header) < 3 || header[0] != "index" || header[1] != "class" {
		return nil, false, fmt.Errorf("predictions: header %q: want index,class,p0,...", strings.Join(header, ","))
	}
	p1 = len(header) == 4
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("predictions: %w", err)
		}
		var p sqldb.Prediction
		p.Row, err = strconv.ParseInt(rec[0], 10, 64)
		if err == nil {
			p.Class, err = strconv.ParseInt(rec[1], 10, 64)
		}
		if err == nil && p1 {
			p.P1, err = strconv.ParseFloat(rec[3], 64)
		}
		if err != nil || p.Row != int64(len(ps)) {
			return nil, false, fmt.Errorf("predictions: row %d: %q: want index %d, a class and probabilities (%v)", len(ps)+1, strings.Join(rec, ","), len(ps), err)
		}
		ps = append(ps, p)
	}
	if int64(len(ps)) != rows {
		return nil, false, fmt.Errorf("predictions: %d rows for %d input rows", len(ps), rows)
	}
	return ps, p1, nil
}

// resultInput are the input's columns the result table keeps, in order:
// all but those of the prediction's names (col, col_p1), which the
// predictions replace.
func resultInput(cols []sqldb.Column, col string) []string {
	var out []string
	for _, c := range cols {
		if c.Name != col && c.Name != col+"_p1" {
			out = append(out, c.Name)
		}
	}
	return out
}
