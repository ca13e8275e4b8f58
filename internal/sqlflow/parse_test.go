package sqlflow

import (
	"fmt"
	"strings"
	"testing"
)

// render is a statement in short, for the table.
func render(s Statement) string {
	attrs := func(as []Attr) string {
		var parts []string
		for _, a := range as {
			v := a.Value.String()
			if a.Value.Kind == ExprString {
				v = "'" + v + "'"
			}
			parts = append(parts, a.Name+"="+v)
		}
		return strings.Join(parts, ",")
	}
	switch s := s.(type) {
	case Standard:
		return "SQL " + s.SQL
	case *Train:
		var cols []string
		for _, c := range s.Columns {
			cols = append(cols, joinExprs(c.Exprs, ", ")+map[bool]string{true: " FOR " + c.For}[c.For != ""])
		}
		out := fmt.Sprintf("TRAIN %s FROM[%s] WITH[%s] COLUMN[%s] LABEL[%s] INTO[%s]", s.Model, s.Select, attrs(s.Attrs), strings.Join(cols, "; "), s.Label, s.Into)
		if s.Replace {
			out += " REPLACE"
		}
		return out
	case *Predict:
		return fmt.Sprintf("PREDICT %s.%s FROM[%s] USING[%s] WITH[%s]", s.Table, s.Column, s.Select, s.Using, attrs(s.Attrs))
	case *Evaluate:
		return fmt.Sprintf("EVALUATE %s FROM[%s] WITH[%s] LABEL[%s] INTO[%s]", s.Model, s.Select, attrs(s.Attrs), s.Label, s.Into)
	}
	return fmt.Sprintf("%T", s)
}

func TestParse(t *testing.T) {
	cases := []struct {
		src  string
		want string // statements rendered, one per line; or "error: …"
	}{
		// Standard statements pass through as written.
		{"SELECT 1", "SQL SELECT 1"},
		{"SHOW TABLES;", "SQL SHOW TABLES"},
		{"  CREATE TABLE t (a INT, b TEXT) ;  ", "SQL CREATE TABLE t (a INT, b TEXT)"},
		{"ALTER TABLE a RENAME TO train", "SQL ALTER TABLE a RENAME TO train"},
		{"SELECT 'to train' FROM t", "SQL SELECT 'to train' FROM t"},
		{"SELECT a AS \"TO\" FROM t -- TO TRAIN x", "SQL SELECT a AS \"TO\" FROM t"},
		{"SELECT 1; SELECT 2;;\n SELECT 3", "SQL SELECT 1\nSQL SELECT 2\nSQL SELECT 3"},
		{"SELECT ';' FROM t; SELECT 'it''s'", "SQL SELECT ';' FROM t\nSQL SELECT 'it''s'"},
		{"INSERT INTO t VALUES (1, 'a'), (2, 'b')", "SQL INSERT INTO t VALUES (1, 'a'), (2, 'b')"},
		{"", ""},
		{"-- only a comment\n;", ""},
		// TO TRAIN.
		{"SELECT * FROM census.train TO TRAIN ctr.wide_and_deep WITH model.embedding_dim = 8, train.epoch = 2, train.num_workers = 4 LABEL income INTO census_model;",
			"TRAIN ctr.wide_and_deep FROM[SELECT * FROM census.train] WITH[model.embedding_dim=8,train.epoch=2,train.num_workers=4] COLUMN[] LABEL[income] INTO[census_model]"},
		{"select * from t to train fashion_mnist.mlp label y into m", "TRAIN fashion_mnist.mlp FROM[select * from t] WITH[] COLUMN[] LABEL[y] INTO[m]"},
		{"SELECT * FROM t TO TRAIN m INTO db.m2", "TRAIN m FROM[SELECT * FROM t] WITH[] COLUMN[] LABEL[] INTO[db.m2]"},
		{"SELECT * FROM t TO TRAIN m LABEL y INTO OR REPLACE m2", "TRAIN m FROM[SELECT * FROM t] WITH[] COLUMN[] LABEL[y] INTO[m2] REPLACE"},
		{"SELECT * FROM t TO TRAIN 'models/my.yaml' LABEL \"class\" INTO m", "TRAIN models/my.yaml FROM[SELECT * FROM t] WITH[] COLUMN[] LABEL[class] INTO[m]"},
		{"SELECT * FROM t TO TRAIN m LABEL 'class' INTO `my model`", "TRAIN m FROM[SELECT * FROM t] WITH[] COLUMN[] LABEL[class] INTO[my model]"},
		{"SELECT * FROM t TO TRAIN m WITH validation.metrics = \"AUC,Accuracy\", train.optimizer = adam, model.hidden = [64, 32], train.learning_rate = -1.5e-3, model.flag = true LABEL y INTO m",
			"TRAIN m FROM[SELECT * FROM t] WITH[validation.metrics='AUC,Accuracy',train.optimizer=adam,model.hidden=64,32,train.learning_rate=-1.5e-3,model.flag=true] COLUMN[] LABEL[y] INTO[m]"},
		{"SELECT * FROM t TO TRAIN m COLUMN a, NUMERIC(b, 1), EMBEDDING(CATEGORY_ID(c, 100), 8) LABEL y INTO m",
			`TRAIN m FROM[SELECT * FROM t] WITH[] COLUMN[a, NUMERIC(b, 1), EMBEDDING(CATEGORY_ID(c, 100), 8)] LABEL[y] INTO[m]`},
		{"SELECT * FROM t TO TRAIN m WITH train.epoch=1 COLUMN numeric(a, 1) FOR dense COLUMN category_id(b, 10) FOR fields LABEL y INTO m",
			"TRAIN m FROM[SELECT * FROM t] WITH[train.epoch=1] COLUMN[NUMERIC(a, 1) FOR dense; CATEGORY_ID(b, 10) FOR fields] LABEL[y] INTO[m]"},
		{"SELECT a, b FROM (SELECT * FROM t WHERE x > 1) s WHERE b <> 'to' TO TRAIN m LABEL y INTO m",
			"TRAIN m FROM[SELECT a, b FROM (SELECT * FROM t WHERE x > 1) s WHERE b <> 'to'] WITH[] COLUMN[] LABEL[y] INTO[m]"},
		{"WITH s AS (SELECT * FROM t) SELECT * FROM s TO TRAIN m LABEL y INTO m",
			"TRAIN m FROM[WITH s AS (SELECT * FROM t) SELECT * FROM s] WITH[] COLUMN[] LABEL[y] INTO[m]"},
		{"SELECT *\n  FROM t /* the data */\nTO TRAIN m\nLABEL y\nINTO m;\nSELECT * FROM t2 TO PREDICT t3.y USING m;",
			"TRAIN m FROM[SELECT *\n  FROM t /* the data */] WITH[] COLUMN[] LABEL[y] INTO[m]\nPREDICT t3.y FROM[SELECT * FROM t2] USING[m] WITH[]"},
		// TO PREDICT.
		{"SELECT * FROM census.test TO PREDICT census.pred.income USING census_model;",
			"PREDICT census.pred.income FROM[SELECT * FROM census.test] USING[census_model] WITH[]"},
		{"SELECT * FROM t TO PREDICT p.y WITH predict.minibatch_size = 64 USING m", "PREDICT p.y FROM[SELECT * FROM t] USING[m] WITH[predict.minibatch_size=64]"},
		{"SELECT * FROM t TO PREDICT p.y USING m WITH predict.minibatch_size = 64", "PREDICT p.y FROM[SELECT * FROM t] USING[m] WITH[predict.minibatch_size=64]"},
		// TO EVALUATE.
		{"SELECT * FROM census.test TO EVALUATE census_model WITH validation.metrics = 'AUC,Accuracy' LABEL income INTO census.eval;",
			"EVALUATE census_model FROM[SELECT * FROM census.test] WITH[validation.metrics='AUC,Accuracy'] LABEL[income] INTO[census.eval]"},
		{"SELECT * FROM t TO EVALUATE m INTO r", "EVALUATE m FROM[SELECT * FROM t] WITH[] LABEL[] INTO[r]"},
		// Errors point at the line and column.
		{"SELECT * FROM t\nTO TRAIN m\nWITH a = 1\nLABLE y INTO m", "error: line 4, column 1: expected COLUMN, LABEL or INTO, found LABLE (did you mean LABEL?)"},
		{"SELECT * FROM t TO TRAIN m COLUMN a\n  LABLE y INTO m", "error: line 2, column 3: expected COLUMN, LABEL or INTO, found LABLE (did you mean LABEL?)"},
		{"SELECT * FROM t TO TRAIN m LABEL y", "error: line 1, column 35: expected INTO, found the end of the statement"},
		{"SELECT * FROM t TO TRAIN m LABEL y INTO", "error: line 1, column 40: expected the name to store the model under, found the end of the statement"},
		{"SELECT * FROM t TO TRAIN INTO m", "error: line 1, column 26: expected the model to train, found INTO"},
		{"SELECT * FROM t TO TRAIN m WITH LABEL y INTO m", "error: line 1, column 33: expected an attribute's name (such as train.epoch), found LABEL"},
		{"SELECT * FROM t TO TRAIN m WITH a 1 INTO m", "error: line 1, column 35: expected '=' after a, found 1"},
		{"SELECT * FROM t TO TRAIN m WITH a = 1, a = 2 INTO m", "error: line 1, column 40: attribute a is given twice (first at line 1, column 33)"},
		{"SELECT * FROM t TO TRAIN m WITH a = [1, 2 INTO m", "error: line 1, column 43: expected ',' or ']', found INTO"},
		{"SELECT * FROM t TO TRAIN m WITH a = - x INTO m", "error: line 1, column 39: expected a number after -, found x"},
		{"SELECT * FROM t TO TRAIN m COLUMN EMBEDDING(c, 8 LABEL y INTO m", "error: line 1, column 50: expected ',' or ')', found LABEL"},
		{"SELECT * FROM t TO TRAIN m COLUMN a FOR INTO m", "error: line 1, column 41: expected the input the columns are FOR, found INTO"},
		{"SELECT * FROM t TO TRAIN m LABEL y INTO m extra", "error: line 1, column 43: expected the end of the statement, found extra"},
		{"SELECT * FROM t TO TRAIN m LABEL y INTO OR m", "error: line 1, column 44: expected REPLACE, found m"},
		{"SELECT * FROM t TO TRAIN m INTO m.", "error: line 1, column 35: expected a name after '.', found the end of the statement"},
		{"SELECT * FROM t TO PREDICT y USING m", "error: line 1, column 28: TO PREDICT wants table.column (the table to create and the column for the predictions), found y"},
		{"SELECT * FROM t TO PREDICT p.y", "error: line 1, column 31: expected WITH or USING, found the end of the statement"},
		{"SELECT * FROM t TO PREDICT p.y WITH a=1 WITH b=2 USING m", "error: line 1, column 41: expected USING, found WITH"},
		{"SELECT * FROM t TO EVALUATE m LABEL y", "error: line 1, column 38: expected INTO, found the end of the statement"},
		{"SELECT * FROM t TO EVALUATE m WITH a = 1 LABLE y INTO r", "error: line 1, column 42: expected LABEL or INTO, found LABLE (did you mean LABEL?)"},
		{"SELECT * FROM t TO EXPLAIN m", "error: line 1, column 20: TO EXPLAIN is not supported: this system runs TO TRAIN, TO PREDICT and TO EVALUATE"},
		{"SELECT 'open", "error: line 1, column 8: a string opened with ' is not closed"},
		{"SELECT 1; /* open", "error: line 1, column 11: a comment /* is not closed"},
		{"SELECT 1;\nSELECT * FROM t TO TRAIN m LABEL y;\nSELECT 2", "error: line 2, column 35: expected INTO, found the end of the statement"},
		{"SELECT `a FROM t", "error: line 1, column 8: a quoted name opened with ` is not closed"},
		{"SELECT é FROM t TO TRAIN m LABEL y INTO", "error: line 1, column 40: expected the name to store the model under, found the end of the statement"},
	}
	for _, c := range cases {
		t.Run(c.src, func(t *testing.T) {
			stmts, err := Parse(c.src)
			var got string
			if err != nil {
				got = "error: " + err.Error()
				if _, ok := err.(*Error); !ok {
					t.Errorf("the error is a %T, want *Error", err)
				}
			} else {
				var lines []string
				for _, s := range stmts {
					lines = append(lines, render(s))
				}
				got = strings.Join(lines, "\n")
			}
			if got != c.want {
				t.Errorf("Parse(%q)\n got: %s\nwant: %s", c.src, got, c.want)
			}
		})
	}
	if len(cases) < 40 {
		t.Fatalf("the grammar's table has %d statements, want at least 40", len(cases))
	}
}

// TestPositions: a statement's Start and Text come from the source, and
// an extended statement's Select is the text before TO.
func TestPositions(t *testing.T) {
	src := "SELECT 1;\n  SELECT a\n  FROM t TO TRAIN m LABEL a INTO n ;"
	stmts, err := Parse(src)
	if err != nil || len(stmts) != 2 {
		t.Fatalf("Parse: %v, %d statements", err, len(stmts))
	}
	tr := stmts[1].(*Train)
	if p := tr.Start(); p.Line != 2 || p.Col != 3 || src[p.Offset:p.Offset+6] != "SELECT" {
		t.Errorf("Start %+v", p)
	}
	if tr.Text() != "SELECT a\n  FROM t TO TRAIN m LABEL a INTO n" || tr.Select != "SELECT a\n  FROM t" {
		t.Errorf("Text %q Select %q", tr.Text(), tr.Select)
	}
}
