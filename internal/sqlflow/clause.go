package sqlflow

import (
	"fmt"
	"strings"
)

// reserved words start or end a clause: a name that is one of them is a
// mistake (INTO LABEL). train, predict and the like stay names
// (train.epoch).
var reserved = []string{"WITH", "COLUMN", "FOR", "LABEL", "INTO", "USING"}

// keywords are every word the grammar expects somewhere: a word close to
// one is likely its misspelling.
var keywords = append([]string{"OR", "REPLACE"}, reserved...)

func isKeyword(t token) bool {
	for _, k := range reserved {
		if t.is(k) {
			return true
		}
	}
	return false
}

// unexpected is the error for t where want was expected; a word one or
// two letters from an expected keyword gets a "did you mean".
func unexpected(t token, want string) error {
	msg := fmt.Sprintf("expected %s, found %s", want, t.describe())
	if t.kind == tokIdent {
		for _, k := range keywords {
			if strings.Contains(want, k) && !strings.EqualFold(t.text, k) && editDistance(strings.ToUpper(t.text), k) <= 2 && len(t.text) > 2 {
				msg += fmt.Sprintf(" (did you mean %s?)", k)
				break
			}
		}
	}
	return errorf(t.pos, "%s", msg)
}

// editDistance is Levenshtein's distance between a and b (ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// name parses a dotted name (db.table, table.column, a zoo model): parts
// bare or quoted, no keyword. what says what the name is for, in errors.
func (p *parser) name(what string) (string, error) {
	var parts []string
	for {
		t := p.peek()
		if !(t.kind == tokIdent && !isKeyword(t)) && t.kind != tokQuoted {
			return "", unexpected(t, what)
		}
		p.i++
		parts = append(parts, t.val)
		if !p.punct(".") {
			return strings.Join(parts, "."), nil
		}
		what = "a name after '.'"
	}
}

// modelName is TRAIN's model: a dotted zoo name, or a quoted model file
// (a YAML model).
func (p *parser) modelName(what string) (string, error) {
	if t := p.peek(); t.kind == tokString {
		p.i++
		return t.val, nil
	}
	return p.name(what)
}

// with parses an optional WITH name = value, …; nil without WITH.
func (p *parser) with() ([]Attr, error) {
	if !p.accept("WITH") {
		return nil, nil
	}
	attrs := []Attr{}
	seen := map[string]Pos{}
	for {
		at := p.peek().pos
		name, err := p.name("an attribute's name (such as train.epoch)")
		if err != nil {
			return nil, err
		}
		if prev, ok := seen[strings.ToLower(name)]; ok {
			return nil, errorf(at, "attribute %s is given twice (first at %s)", name, prev)
		}
		seen[strings.ToLower(name)] = at
		if !p.punct("=") {
			return nil, unexpected(p.peek(), fmt.Sprintf("'=' after %s", name))
		}
		v, err := p.expr(true)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, Attr{Name: name, Value: v, Pos: at})
		if !p.punct(",") {
			return attrs, nil
		}
	}
}

// column parses COLUMN expr, … [FOR name].
func (p *parser) column() (ColumnClause, error) {
	c := ColumnClause{Pos: p.take().pos}
	for {
		e, err := p.expr(false)
		if err != nil {
			return c, err
		}
		c.Exprs = append(c.Exprs, e)
		if !p.punct(",") {
			break
		}
	}
	if p.accept("FOR") {
		var err error
		if c.For, err = p.name("the input the columns are FOR"); err != nil {
			return c, err
		}
	}
	return c, nil
}

// expr parses a value or a feature column: a number (signed), a string,
// a list, a dotted name or a call NAME(args). In an attribute's value
// (attr), a double-quoted token is a string, as SQLFlow writes them.
func (p *parser) expr(attr bool) (Expr, error) {
	t := p.peek()
	switch {
	case t.kind == tokNumber:
		p.i++
		return Expr{Kind: ExprNumber, Text: t.text, Pos: t.pos}, nil
	case t.kind == tokPunct && (t.text == "-" || t.text == "+"):
		p.i++
		n := p.peek()
		if n.kind != tokNumber {
			return Expr{}, unexpected(n, "a number after "+t.text)
		}
		p.i++
		return Expr{Kind: ExprNumber, Text: strings.TrimPrefix(t.text, "+") + n.text, Pos: t.pos}, nil
	case t.kind == tokString || (attr && t.kind == tokQuoted && strings.HasPrefix(t.text, `"`)):
		p.i++
		return Expr{Kind: ExprString, Text: t.val, Pos: t.pos}, nil
	case t.kind == tokPunct && t.text == "[":
		p.i++
		items, err := p.exprs("]", attr)
		return Expr{Kind: ExprList, Args: items, Pos: t.pos}, err
	}
	name, err := p.name(map[bool]string{true: "a value (a number, 'text', [list] or a name)", false: "a column or a feature column such as NUMERIC(col, 1)"}[attr])
	if err != nil {
		return Expr{}, err
	}
	if !p.punct("(") {
		return Expr{Kind: ExprName, Text: name, Pos: t.pos}, nil
	}
	args, err := p.exprs(")", attr)
	return Expr{Kind: ExprCall, Text: strings.ToUpper(name), Args: args, Pos: t.pos}, err
}

// exprs parses expressions separated by commas up to close (taken).
func (p *parser) exprs(close string, attr bool) ([]Expr, error) {
	var out []Expr
	if p.punct(close) {
		return out, nil
	}
	for {
		e, err := p.expr(attr)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		if p.punct(close) {
			return out, nil
		}
		if !p.punct(",") {
			return nil, unexpected(p.peek(), fmt.Sprintf("',' or '%s'", close))
		}
	}
}
