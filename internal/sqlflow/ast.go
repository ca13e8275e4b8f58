package sqlflow

import (
	"strconv"
	"strings"
)

// Statement is one parsed statement: Standard, *Train, *Predict or
// *Evaluate.
type Statement interface {
	// Start is where the statement begins in the source.
	Start() Pos
	// Text is the statement as written, without its semicolon.
	Text() string
}

// Standard is a statement with no extension: the database runs it as
// written.
type Standard struct {
	At  Pos
	SQL string
}

// Extended is what every extended statement has: the standard SELECT
// that gives its rows, and its WITH attributes.
type Extended struct {
	At     Pos
	SQL    string // the whole statement
	Select string // the standard part, before TO
	Attrs  []Attr
}

// Train is SELECT … TO TRAIN model [WITH …] [COLUMN …] [LABEL l] INTO
// [OR REPLACE] name.
type Train struct {
	Extended
	Model   string // the model to train: a zoo name (dotted) or a file name (quoted)
	Columns []ColumnClause
	Label   string // "" when there is no LABEL clause
	Into    string // where the trained model is stored
	Replace bool   // INTO OR REPLACE: an existing model of that name may be replaced
}

// Predict is SELECT … TO PREDICT table.column USING model [WITH …].
type Predict struct {
	Extended
	Table, Column string // the result's table and the column for the predictions
	Using         string
}

// Evaluate is SELECT … TO EVALUATE model [WITH …] [LABEL l] INTO table.
type Evaluate struct {
	Extended
	Model string
	Label string
	Into  string
}

func (s Standard) Start() Pos   { return s.At }
func (s Standard) Text() string { return s.SQL }
func (e Extended) Start() Pos   { return e.At }
func (e Extended) Text() string { return e.SQL }

// Attr is one WITH attribute, name = value.
type Attr struct {
	Name  string // dotted, as written: model.embedding_dim
	Value Expr
	Pos   Pos
}

// ColumnClause is COLUMN expr, … [FOR name].
type ColumnClause struct {
	Exprs []Expr
	For   string // "" without FOR
	Pos   Pos
}

// ExprKind says what an Expr is.
type ExprKind int

// The kinds of Expr.
const (
	ExprName   ExprKind = iota // a (dotted) name or a keyword such as true
	ExprNumber                 // as written, sign included
	ExprString                 // a quoted string
	ExprList                   // [a, b]
	ExprCall                   // NAME(args): a feature column such as EMBEDDING(CATEGORY_ID(c, 100), 8)
)

// Expr is an attribute's value or a COLUMN expression.
type Expr struct {
	Kind ExprKind
	Text string // a name, a number as written, or a string's value; a call's function
	Args []Expr // a list's items or a call's arguments
	Pos  Pos
}

// String renders e as an attribute value: a string's text unquoted, a
// list's items joined by commas, a call as written.
func (e Expr) String() string {
	switch e.Kind {
	case ExprList:
		return joinExprs(e.Args, ",")
	case ExprCall:
		return e.Text + "(" + joinExprs(e.Args, ", ") + ")"
	}
	return e.Text
}

func joinExprs(es []Expr, sep string) string {
	parts := make([]string, len(es))
	for i, a := range es {
		parts[i] = a.String()
		if a.Kind == ExprString && sep != "," {
			parts[i] = strconv.Quote(a.Text)
		}
	}
	return strings.Join(parts, sep)
}
