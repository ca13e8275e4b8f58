// Package sqlflow parses SQLFlow's extended SQL: a standard statement,
// passed to the database as written, optionally followed by TO TRAIN,
// TO PREDICT or TO EVALUATE and their clauses (WITH, COLUMN, LABEL,
// INTO, USING). It is pure: text in, statements or an error that names
// the line and column out. What the statements mean (flags, features,
// tables) is decided by its callers.
package sqlflow

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Pos is a place in the source: line and column count from 1, the column
// in characters (not bytes); Offset is the byte offset.
type Pos struct {
	Line, Col, Offset int
}

func (p Pos) String() string { return fmt.Sprintf("line %d, column %d", p.Line, p.Col) }

// Error is a syntax or meaning error at a place in the source.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string { return e.Pos.String() + ": " + e.Msg }

func errorf(p Pos, format string, args ...any) error {
	return &Error{Pos: p, Msg: fmt.Sprintf(format, args...)}
}

type tokKind int

const (
	tokEOF    tokKind = iota
	tokIdent          // a bare word: a keyword or a name
	tokQuoted         // "name" or `name`: always a name
	tokString         // 'text'
	tokNumber
	tokPunct // one of the operators and separators, in Text
)

type token struct {
	kind tokKind
	text string // as written, quotes included
	val  string // an identifier's or string's value, unquoted
	pos  Pos
	end  int // byte offset just past the token
}

// is says whether t is the keyword kw (case-insensitive).
func (t token) is(kw string) bool { return t.kind == tokIdent && strings.EqualFold(t.text, kw) }

// describe names t in an error message.
func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "the end of the statement"
	case tokString:
		return "string " + t.text
	}
	return t.text
}

// lexer turns source text into tokens, skipping white space and comments
// (-- to the end of the line, /* … */, and MySQL's #).
type lexer struct {
	src       string
	off       int
	line, col int
}

func newLexer(src string) *lexer { return &lexer{src: src, line: 1, col: 1} }

func (l *lexer) pos() Pos { return Pos{Line: l.line, Col: l.col, Offset: l.off} }

// advance moves past n bytes, counting lines and characters.
func (l *lexer) advance(n int) {
	for _, r := range l.src[l.off : l.off+n] {
		if r == '\n' {
			l.line, l.col = l.line+1, 1
		} else {
			l.col++
		}
	}
	l.off += n
}

// skip passes white space and comments; an unterminated block comment is
// an error.
func (l *lexer) skip() error {
	for l.off < len(l.src) {
		rest := l.src[l.off:]
		r, n := utf8.DecodeRuneInString(rest)
		switch {
		case unicode.IsSpace(r):
			l.advance(n)
		case strings.HasPrefix(rest, "--") || r == '#':
			end := strings.IndexByte(rest, '\n')
			if end < 0 {
				end = len(rest)
			}
			l.advance(end)
		case strings.HasPrefix(rest, "/*"):
			end := strings.Index(rest[2:], "*/")
			if end < 0 {
				return errorf(l.pos(), "a comment /* is not closed")
			}
			l.advance(end + 4)
		default:
			return nil
		}
	}
	return nil
}

// next returns the next token.
func (l *lexer) next() (token, error) {
	if err := l.skip(); err != nil {
		return token{}, err
	}
	start := l.pos()
	if l.off == len(l.src) {
		return token{kind: tokEOF, pos: start, end: l.off}, nil
	}
	rest := l.src[l.off:]
	r, _ := utf8.DecodeRuneInString(rest)
	var t token
	var err error
	switch {
	case r == '\'' || r == '"' || r == '`':
		t, err = l.quoted(start, rest, byte(r))
	case r == '_' || unicode.IsLetter(r):
		n := len(rest) - len(strings.TrimLeftFunc(rest, func(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }))
		t = token{kind: tokIdent, text: rest[:n], val: rest[:n]}
	case (r >= '0' && r <= '9') || (r == '.' && len(rest) > 1 && rest[1] >= '0' && rest[1] <= '9'):
		t = token{kind: tokNumber, text: rest[:numberLen(rest)]}
	default:
		t = token{kind: tokPunct, text: punct(rest)}
	}
	if err != nil {
		return token{}, err
	}
	t.pos = start
	l.advance(len(t.text))
	t.end = l.off
	return t, nil
}

// quoted reads a quoted string or name; a doubled quote stands for one,
// and a backslash escapes the next character (MySQL's strings).
func (l *lexer) quoted(start Pos, rest string, q byte) (token, error) {
	var b strings.Builder
	for i := 1; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c == '\\' && q == '\'' && i+1 < len(rest):
			i++
			b.WriteByte(rest[i])
		case c == q && i+1 < len(rest) && rest[i+1] == q:
			i++
			b.WriteByte(q)
		case c == q:
			kind := tokQuoted
			if q == '\'' {
				kind = tokString
			}
			return token{kind: kind, text: rest[:i+1], val: b.String()}, nil
		default:
			b.WriteByte(c)
		}
	}
	what := map[byte]string{'\'': "a string", '"': "a quoted name", '`': "a quoted name"}[q]
	return token{}, errorf(start, "%s opened with %c is not closed", what, q)
}

// numberLen is the length of the number rest starts with: digits, a
// fraction, an exponent.
func numberLen(rest string) int {
	i := 0
	digits := func() {
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
	}
	digits()
	if i < len(rest) && rest[i] == '.' {
		i++
		digits()
	}
	if i < len(rest) && (rest[i] == 'e' || rest[i] == 'E') {
		j := i + 1
		if j < len(rest) && (rest[j] == '+' || rest[j] == '-') {
			j++
		}
		if j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			i = j
			digits()
		}
	}
	return i
}

// punct is the operator or separator rest starts with: the two-character
// ones first, else one character.
func punct(rest string) string {
	for _, op := range []string{"<=", ">=", "<>", "!=", "||", "::"} {
		if strings.HasPrefix(rest, op) {
			return op
		}
	}
	_, n := utf8.DecodeRuneInString(rest)
	return rest[:n]
}
