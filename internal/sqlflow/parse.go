package sqlflow

import (
	"strings"
)

// Parse splits src into statements at the semicolons outside strings
// and comments, and parses each. Empty statements are skipped. The first
// error stops it: the statements before it are not returned, so that a
// script with a mistake runs nothing.
func Parse(src string) ([]Statement, error) {
	toks, err := tokens(src)
	if err != nil {
		return nil, err
	}
	var out []Statement
	for len(toks) > 0 {
		n := 0
		for toks[n].kind != tokEOF && !(toks[n].kind == tokPunct && toks[n].text == ";") {
			n++
		}
		if n > 0 {
			end := token{kind: tokEOF, pos: toks[n].pos, end: toks[n].pos.Offset}
			stmt := append(append([]token(nil), toks[:n]...), end)
			s, err := parseStatement(src, stmt)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		if toks[n].kind == tokEOF {
			break
		}
		toks = toks[n+1:]
	}
	return out, nil
}

// tokens lexes all of src, ending with tokEOF.
func tokens(src string) ([]token, error) {
	l := newLexer(src)
	var out []token
	for {
		t, err := l.next()
		if err != nil {
			return nil, err
		}
		out = append(out, t)
		if t.kind == tokEOF {
			return out, nil
		}
	}
}

// extensions are the words that may follow TO; the ones this system does
// not run are refused by name.
var extensions = map[string]bool{"TRAIN": true, "PREDICT": true, "EVALUATE": true,
	"EXPLAIN": false, "RUN": false, "OPTIMIZE": false}

// parseStatement parses one statement's tokens (ending in tokEOF). Only
// a query (SELECT, WITH, VALUES or a parenthesis) can carry an
// extension: elsewhere TO belongs to SQL (RENAME … TO train).
func parseStatement(src string, toks []token) (Statement, error) {
	first, last := toks[0], toks[len(toks)-2]
	text := src[first.pos.Offset:last.end]
	isQuery := first.is("SELECT") || first.is("WITH") || first.is("VALUES") || (first.kind == tokPunct && first.text == "(")
	depth := 0
	for i, t := range toks {
		switch {
		case t.kind == tokPunct && t.text == "(":
			depth++
		case t.kind == tokPunct && t.text == ")":
			depth--
		case isQuery && depth == 0 && t.is("TO") && i > 0 && toks[i+1].kind == tokIdent:
			word := strings.ToUpper(toks[i+1].text)
			run, known := extensions[word]
			if !known {
				continue
			}
			if !run {
				return nil, errorf(toks[i+1].pos, "TO %s is not supported: this system runs TO TRAIN, TO PREDICT and TO EVALUATE", word)
			}
			ext := Extended{At: first.pos, SQL: text, Select: strings.TrimSpace(src[first.pos.Offset:t.pos.Offset])}
			p := &parser{toks: toks[i+2:]}
			return p.extension(word, ext)
		}
	}
	return Standard{At: first.pos, SQL: text}, nil
}

// parser reads an extension's tokens.
type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) take() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

// accept takes the next token if it is keyword kw.
func (p *parser) accept(kw string) bool {
	if p.peek().is(kw) {
		p.i++
		return true
	}
	return false
}

// punct takes the next token if it is the punctuation s.
func (p *parser) punct(s string) bool {
	if t := p.peek(); t.kind == tokPunct && t.text == s {
		p.i++
		return true
	}
	return false
}

func (p *parser) extension(word string, ext Extended) (Statement, error) {
	var s Statement
	var err error
	switch word {
	case "TRAIN":
		s, err = p.train(ext)
	case "PREDICT":
		s, err = p.predict(ext)
	default:
		s, err = p.evaluate(ext)
	}
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, unexpected(t, "the end of the statement")
	}
	return s, nil
}

func (p *parser) train(ext Extended) (Statement, error) {
	s := &Train{Extended: ext}
	var err error
	if s.Model, err = p.modelName("the model to train"); err != nil {
		return nil, err
	}
	if s.Attrs, err = p.with(); err != nil {
		return nil, err
	}
	for p.peek().is("COLUMN") {
		c, err := p.column()
		if err != nil {
			return nil, err
		}
		s.Columns = append(s.Columns, c)
	}
	if s.Label, err = p.label(); err != nil {
		return nil, err
	}
	if !p.accept("INTO") {
		open := s.Label == ""
		return nil, unexpected(p.peek(), followers(open && s.Attrs == nil && s.Columns == nil, open, open, "INTO"))
	}
	if p.accept("OR") {
		if !p.accept("REPLACE") {
			return nil, unexpected(p.peek(), "REPLACE")
		}
		s.Replace = true
	}
	s.Into, err = p.name("the name to store the model under")
	return s, err
}

// followers lists what may come next where a TRAIN or EVALUATE expects
// its end: the optional clauses still open, in their order, then final.
func followers(withOpen, columnOpen, labelOpen bool, final string) string {
	var opts []string
	for _, o := range []struct {
		open bool
		kw   string
	}{{withOpen, "WITH"}, {columnOpen, "COLUMN"}, {labelOpen, "LABEL"}} {
		if o.open {
			opts = append(opts, o.kw)
		}
	}
	return orList(append(opts, final))
}

func orList(opts []string) string {
	if len(opts) == 1 {
		return opts[0]
	}
	return strings.Join(opts[:len(opts)-1], ", ") + " or " + opts[len(opts)-1]
}

func (p *parser) predict(ext Extended) (Statement, error) {
	s := &Predict{Extended: ext}
	at := p.peek()
	result, err := p.name("the result's table.column")
	if err != nil {
		return nil, err
	}
	dot := strings.LastIndexByte(result, '.')
	if dot <= 0 {
		return nil, errorf(at.pos, "TO PREDICT wants table.column (the table to create and the column for the predictions), found %s", at.describe())
	}
	s.Table, s.Column = result[:dot], result[dot+1:]
	if s.Attrs, err = p.with(); err != nil {
		return nil, err
	}
	if !p.accept("USING") {
		return nil, unexpected(p.peek(), map[bool]string{true: "WITH or USING", false: "USING"}[s.Attrs == nil])
	}
	if s.Using, err = p.name("the model to predict with"); err != nil {
		return nil, err
	}
	if s.Attrs == nil {
		s.Attrs, err = p.with()
	}
	return s, err
}

func (p *parser) evaluate(ext Extended) (Statement, error) {
	s := &Evaluate{Extended: ext}
	var err error
	if s.Model, err = p.name("the model to evaluate"); err != nil {
		return nil, err
	}
	if s.Attrs, err = p.with(); err != nil {
		return nil, err
	}
	if s.Label, err = p.label(); err != nil {
		return nil, err
	}
	if !p.accept("INTO") {
		return nil, unexpected(p.peek(), followers(s.Label == "" && s.Attrs == nil, false, s.Label == "", "INTO"))
	}
	s.Into, err = p.name("the table for the evaluation's results")
	return s, err
}

// label parses an optional LABEL name.
func (p *parser) label() (string, error) {
	if !p.accept("LABEL") {
		return "", nil
	}
	if t := p.peek(); t.kind == tokString {
		p.i++
		return t.val, nil
	}
	return p.name("the label's column")
}
