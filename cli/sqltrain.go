package cli

import (
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"

	flag "github.com/spf13/pflag"

	"elasticdl/internal/master"
	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqlflow"
	"elasticdl/model/zoo"
)

// statementFlags are the train flags a TO TRAIN statement sets itself:
// its model, its rows and their label, its parameters and where the job
// writes (a directory of its own, stored INTO the database).
var statementFlags = []string{"model_def", "model_params", "training_data", "output"}

// notAttrs are train flags that are elasticdl sql's to set, not a
// statement's: where its jobs run, and that they are run and waited for.
var notAttrs = []string{"backend", "wait", "yaml"}

// jobFlagSet is a fresh, silent flag set of a job command's flags (add:
// addTrainFlags, addEvaluateFlags or addPredictFlags).
func jobFlagSet(name string, add func(*flag.FlagSet, *master.Config, *jobOptions)) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := master.DefaultConfig()
	var opts jobOptions
	add(fs, &cfg, &opts)
	return fs
}

// trainFlagSet is a fresh flag set of train's flags.
func trainFlagSet() *flag.FlagSet { return jobFlagSet("train", addTrainFlags) }

// attrFlag is attribute a as the flags it sets (none for model.*), each
// set on a fresh flag set from newFS so that a bad value is an error at
// the attribute, not in the job it would start.
func attrFlag(a sqlflow.Attr, known map[string][]string, newFS func() *flag.FlagSet) ([]string, error) {
	one, err := sqlflow.Translate([]sqlflow.Attr{a}, known)
	if err != nil {
		return nil, err
	}
	if err := newFS().Parse(one.Flags); err != nil {
		return nil, &sqlflow.Error{Pos: a.Pos, Msg: fmt.Sprintf("%s: %v", a.Name, err)}
	}
	return one.Flags, nil
}

// refuseModelAttr refuses model.* on a statement that uses a stored
// model: it keeps the parameters it was trained with.
func refuseModelAttr(a sqlflow.Attr) error {
	if strings.HasPrefix(strings.ToLower(a.Name), "model.") {
		return &sqlflow.Error{Pos: a.Pos, Msg: a.Name + ": a stored model keeps the parameters it was trained with"}
	}
	return nil
}

// trainAttrs are the flags train.* and validation.* attributes may set:
// every train flag but the statement's own, validation.* those about
// validation.
func trainAttrs() map[string][]string {
	known := map[string][]string{}
	trainFlagSet().VisitAll(func(f *flag.Flag) {
		if slices.Contains(statementFlags, f.Name) || slices.Contains(notAttrs, f.Name) {
			return
		}
		known["train"] = append(known["train"], f.Name)
		if strings.Contains(f.Name, "validation") || strings.Contains(f.Name, "evaluation") {
			known["validation"] = append(known["validation"], f.Name)
		}
	})
	return known
}

// checkTrain checks what can be checked of a TO TRAIN statement before
// anything runs: its attributes, each set on a fresh flag set of train's
// so that a bad value is an error at its attribute; its LABEL; its COLUMN
// clauses. It returns the statement's settings and feature columns.
func checkTrain(s *sqlflow.Train) (sqlflow.Settings, []columnFeature, error) {
	known := trainAttrs()
	settings, err := sqlflow.Translate(s.Attrs, known)
	if err != nil {
		return sqlflow.Settings{}, nil, err
	}
	for _, a := range s.Attrs { // model.* ones set no flag: the model checks them
		if _, err := attrFlag(a, known, trainFlagSet); err != nil {
			return sqlflow.Settings{}, nil, err
		}
	}
	if s.Label == "" {
		return sqlflow.Settings{}, nil, &sqlflow.Error{Pos: s.At, Msg: "TO TRAIN needs LABEL column: the column the model learns to predict"}
	}
	var features []columnFeature
	for _, c := range s.Columns {
		if c.For != "" {
			return sqlflow.Settings{}, nil, &sqlflow.Error{Pos: c.Pos, Msg: "COLUMN … FOR " + c.For + ": the models here take one input, so FOR is not used"}
		}
		for _, e := range c.Exprs {
			f, err := parseFeature(e)
			if err != nil {
				return sqlflow.Settings{}, nil, err
			}
			features = append(features, f)
		}
	}
	return settings, features, nil
}

// columnFeature is one COLUMN expression: a column taken as dense
// numbers or categorical ids (kind 0: as its type says), and an
// embedding's width.
type columnFeature struct {
	name    string
	kind    sqldb.Kind
	dim     int
	buckets int64 // CATEGORY_HASH's: its values hashed into this many ids
	pos     sqlflow.Pos
}

const featureSyntax = "a column's name, NUMERIC(col), CATEGORY_ID(col, n), CATEGORY_HASH(col, n) or EMBEDDING(CATEGORY_ID(col, n), dim)"

// parseFeature reads a COLUMN expression (SQLFlow's feature columns).
func parseFeature(e sqlflow.Expr) (columnFeature, error) {
	bad := func(format string, args ...any) (columnFeature, error) {
		return columnFeature{}, &sqlflow.Error{Pos: e.Pos, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case e.Kind == sqlflow.ExprName:
		return columnFeature{name: e.Text, pos: e.Pos}, nil
	case e.Kind != sqlflow.ExprCall:
		return bad("COLUMN %s: want %s", e.String(), featureSyntax)
	}
	fn := strings.ToUpper(e.Text)
	switch {
	case fn == "NUMERIC" && (len(e.Args) == 1 || len(e.Args) == 2):
		if len(e.Args) == 2 && e.Args[1].Text != "1" {
			return bad("%s: a column is one number: NUMERIC(col) or NUMERIC(col, 1)", e.String())
		}
		return columnOf(e, sqldb.Number)
	case fn == "CATEGORY_ID" && len(e.Args) == 2:
		if _, ok := positive(e.Args[1]); !ok {
			return bad("%s: the number of ids must be a whole number above 0", e.String())
		}
		return columnOf(e, sqldb.Text)
	case fn == "CATEGORY_HASH" && len(e.Args) == 2:
		n, ok := positive(e.Args[1])
		if !ok {
			return bad("%s: the number of buckets must be a whole number above 0", e.String())
		}
		f, err := columnOf(e, sqldb.Text)
		f.buckets = int64(n)
		return f, err
	case fn == "EMBEDDING" && len(e.Args) == 2:
		dim, ok := positive(e.Args[1])
		if !ok {
			return bad("%s: the embedding's width must be a whole number above 0", e.String())
		}
		inner := e.Args[0]
		if inner.Kind == sqlflow.ExprCall && !strings.EqualFold(inner.Text, "CATEGORY_ID") && !strings.EqualFold(inner.Text, "CATEGORY_HASH") {
			return bad("%s: EMBEDDING takes CATEGORY_ID(col, n), CATEGORY_HASH(col, n) or a column", e.String())
		}
		f, err := parseFeature(inner)
		f.kind, f.dim = sqldb.Text, dim
		return f, err
	case fn == "NUMERIC" || fn == "CATEGORY_ID" || fn == "CATEGORY_HASH" || fn == "EMBEDDING":
		return bad("%s: wrong arguments: want %s", e.String(), featureSyntax)
	}
	return bad("unknown feature column %s: want %s", e.Text, featureSyntax)
}

// columnOf is the feature of a call whose first argument names a column.
func columnOf(e sqlflow.Expr, kind sqldb.Kind) (columnFeature, error) {
	a := e.Args[0]
	if a.Kind != sqlflow.ExprName {
		return columnFeature{}, &sqlflow.Error{Pos: a.Pos, Msg: fmt.Sprintf("%s: its first argument must be a column's name", e.String())}
	}
	return columnFeature{name: a.Text, kind: kind, pos: e.Pos}, nil
}

func positive(e sqlflow.Expr) (int, bool) {
	n, err := strconv.Atoi(e.Text)
	return n, e.Kind == sqlflow.ExprNumber && err == nil && n > 0
}

// feature is a column as the job takes it, shown before training.
type feature struct {
	name, sqlType, kind string // kind: dense, categorical or label
}

// featurePlan is how the query's columns become the job's features.
type featurePlan struct {
	features       []feature
	project        []sqldb.Projected // nil: the query's rows as they are
	dense, fields  int
	embeddingWidth int // from an EMBEDDING column; 0 none
}

// columnList names a query's columns for an error: the first 12 and how
// many there are (a table of pixels has hundreds).
func columnList(names []string) string {
	const show = 12
	if len(names) <= show {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, … (%d columns)", strings.Join(names[:show], ", "), len(names))
}

// planFeatures maps the query's columns to features: by their types with
// no COLUMN clause (every column), or as the COLUMN clause says (only the
// columns it names, cast where it takes one as the other kind).
func planFeatures(cols []sqldb.Column, label string, specs []columnFeature) (featurePlan, error) {
	byName := map[string]sqldb.Column{}
	var names []string
	for _, c := range cols {
		byName[c.Name] = c
		names = append(names, c.Name)
	}
	list := columnList(names)
	lc, ok := byName[label]
	if !ok {
		return featurePlan{}, fmt.Errorf("LABEL %s is not one of the query's columns: %s", label, list)
	}
	if len(specs) == 0 {
		for _, c := range cols {
			if c.Name != label {
				specs = append(specs, columnFeature{name: c.Name})
			}
		}
	}
	var p featurePlan
	seen := map[string]bool{}
	for _, s := range specs {
		c, ok := byName[s.name]
		switch {
		case !ok:
			return featurePlan{}, posError(s.pos, fmt.Sprintf("column %s is not one of the query's columns: %s", s.name, list))
		case s.name == label:
			return featurePlan{}, posError(s.pos, fmt.Sprintf("column %s is the LABEL: it cannot be a feature too", s.name))
		case seen[s.name]:
			return featurePlan{}, posError(s.pos, fmt.Sprintf("column %s is named twice", s.name))
		}
		seen[s.name] = true
		kind, cast := s.kind, sqldb.Kind(0)
		if kind == 0 {
			kind = c.Kind
		} else if kind != c.Kind {
			cast = kind
		}
		switch kind {
		case sqldb.Number:
			p.dense++
			p.features = append(p.features, feature{c.Name, c.Type, "dense"})
		case sqldb.Text:
			p.fields++
			p.features = append(p.features, feature{c.Name, c.Type, "categorical"})
		default:
			return featurePlan{}, posError(s.pos, fmt.Sprintf("column %s has type %s, which a model cannot take: leave it out, "+
				"name it in NUMERIC(…) or CATEGORY_ID(…), or cast it in the query", c.Name, c.Type))
		}
		p.project = append(p.project, sqldb.Projected{Name: c.Name, Cast: cast})
		p.embeddingWidth = max(p.embeddingWidth, s.dim)
	}
	p.features = append(p.features, feature{lc.Name, lc.Type, "label"})
	if len(cols) == len(specs)+1 && !slices.ContainsFunc(p.project, func(c sqldb.Projected) bool { return c.Cast != 0 }) {
		p.project = nil // every column as it is: no projection needed
	} else {
		p.project = append(p.project, sqldb.Projected{Name: label})
	}
	return p, nil
}

// posError is an error at pos, or without a place when there is none (a
// column taken by default).
func posError(pos sqlflow.Pos, msg string) error {
	if pos.Line == 0 {
		return fmt.Errorf("%s", msg)
	}
	return &sqlflow.Error{Pos: pos, Msg: msg}
}

// ctrModels are the zoo models whose input shape is dense and fields.
var ctrModels = []string{zoo.CTRWideAndDeep, zoo.CTRDeepFM, zoo.CTRXDeepFM}

// deriveParams adds to the statement's model parameters what the
// features say and the statement did not: a CTR model's (or a worker
// program's: worker) dense and fields counts, and its embedding_dim from
// an EMBEDDING column.
func deriveParams(model, given string, p featurePlan, worker bool) string {
	if !worker && !slices.Contains(ctrModels, model) {
		return given
	}
	have := map[string]bool{}
	for _, kv := range strings.Split(given, ";") {
		k, _, _ := strings.Cut(kv, "=")
		have[strings.TrimSpace(k)] = true
	}
	parts := []string{}
	if given != "" {
		parts = append(parts, given)
	}
	for _, d := range []struct {
		key string
		n   int
	}{{"dense", p.dense}, {"fields", p.fields}, {"embedding_dim", p.embeddingWidth}} {
		if !have[d.key] && d.n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", d.key, d.n))
		}
	}
	return strings.Join(parts, "; ")
}

// trainArgs are train's arguments for a statement: the model, the rows of
// query over datasource with their label, the parameters, then the job
// flags given to elasticdl sql and the statement's, which win.
func trainArgs(datasource, model, query, label, params string, features []columnFeature, jobFlags, stmtFlags []string) []string {
	args := []string{"--model_def=" + model, "--training_data=" + sourceURI(datasource, query, label, features)}
	if params != "" {
		args = append(args, "--model_params="+params)
	}
	args = append(args, jobFlags...)
	return append(args, stmtFlags...)
}

// lastFlag is the value of the last --name= among flag lists ("": none).
func lastFlag(name string, lists ...[]string) string {
	v := ""
	for _, l := range lists {
		for _, f := range l {
			if rest, ok := strings.CutPrefix(f, "--"+name+"="); ok {
				v = rest
			}
		}
	}
	return v
}

// sourceURI is datasource reading query's rows, with their label ("":
// none) and the CATEGORY_HASH columns of features hashed.
func sourceURI(datasource, query, label string, features []columnFeature) string {
	sep := "?"
	if strings.Contains(datasource, "?") {
		sep = "&"
	}
	u := datasource + sep + "query=" + url.QueryEscape(query)
	if label != "" {
		u += "&label=" + url.QueryEscape(label)
	}
	if h := hashParam(features); h != "" {
		u += "&hash=" + url.QueryEscape(h)
	}
	return u
}

// hashParam is a datasource's hash= for the CATEGORY_HASH columns of
// features; "" for none.
func hashParam(features []columnFeature) string {
	hashed := map[string]int64{}
	for _, f := range features {
		if f.buckets > 0 {
			hashed[f.name] = f.buckets
		}
	}
	return sqldb.HashParam(hashed)
}
