package data

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ColumnKind says how a schema column is decoded.
type ColumnKind int

// Column kinds. The zero value is not a kind, so a Column whose Kind was
// forgotten is rejected rather than silently read as something.
const (
	Numeric     ColumnKind = iota + 1 // a dense float32 feature; an empty field is 0
	Categorical                       // a string value mapped to one id: by hash, or by Vocabulary when set
	Hashed                            // a string value hashed into Buckets ids
	Label                             // the int32 label (0/1 for click-through rate)
	Ignore                            // skipped
	// ID is a non-negative int64 taken as the id itself: records whose
	// ids were made elsewhere (`elasticdl data export` writes them, cat
	// columns' ids included). Such ids share the id space with the other
	// columns' and make it unbounded.
	ID
)

var kindNames = [...]string{Numeric: "num", Categorical: "cat", Hashed: "hash", Label: "label", Ignore: "ignore", ID: "id"}

// String returns the kind's name in the schema syntax.
func (k ColumnKind) String() string {
	if k >= Numeric && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "ColumnKind(" + strconv.Itoa(int(k)) + ")"
}

// Column describes one column of a CSV file read with a schema.
type Column struct {
	Name       string
	Kind       ColumnKind
	Buckets    int64    // Hashed only: how many ids the column hashes into (>= 1)
	Vocabulary []string // Categorical only, optional: the known values, see Schema
}

// Schema declares the columns of a CSV file, in file order, for
// OpenCSVSchema.
//
// Numeric columns become the dense features (Batch.Features, in schema
// order); Categorical and Hashed columns become one id each
// (Batch.Categorical, in schema order); exactly one column is the Label.
//
// Categorical ids of all columns share one id space of non-negative int64,
// so one embedding table can serve every column. The value is the field with
// surrounding spaces removed (an empty value is a value too: the column's
// "missing" id), and h is the 64-bit FNV-1a hash of the bytes of
// name + "=" + value, so equal values in different columns get different
// ids. Then:
//
//   - cat: id = 2^62 + h mod 2^62. These ids are unbounded (IDBound is 0):
//     they need a hash-keyed embedding, and two values collide with
//     probability about 2^-62 per pair.
//   - hash(N): id = offset + h mod N, where the column owns ids
//     [offset, offset+N).
//   - cat(v0|v1|...) (a Vocabulary of k values): id = offset + i for value
//     vi, and offset + k for any other value; the column owns ids
//     [offset, offset+k+1).
//
// The offsets lay the bounded (hash and vocabulary) columns side by side
// from 0 in schema order, so they stay below 2^62 and never meet the cat
// ids. A schema without cat columns has a bounded id space (IDBound).
type Schema struct {
	Columns []Column
}

// clone is a deep copy: a caller may change it without touching a
// reader's schema.
func (s Schema) clone() Schema {
	cols := slices.Clone(s.Columns)
	for i := range cols {
		cols[i].Vocabulary = slices.Clone(cols[i].Vocabulary)
	}
	return Schema{Columns: cols}
}

const (
	catIDBase = int64(1) << 62 // cat ids are in [catIDBase, 2*catIDBase); bounded ones below it

	// maxSchemaColumns caps a parsed schema, so that a typo in a name range
	// such as c{1..1000000000} fails rather than allocating gigabytes.
	maxSchemaColumns = 1 << 16

	nameForbidden  = ",:(){}|=" // the syntax's separators, and "=" which the id hash uses
	valueForbidden = ",:(){}|"  // vocabulary entries: the syntax's separators
)

const kindSyntax = "num, cat, cat(V1|V2|...), hash(N), id, label or ignore"

// ParseSchema parses a schema written compactly, as in a flag or a URI:
//
//	label:label,i{1..13}:num,c{1..26}:hash(1000000)
//
// Columns are separated by commas, in file order, each NAME:KIND with KIND
// one of
//
//	num             a Numeric column
//	cat             a Categorical column, ids hashed into an unbounded space
//	cat(V1|V2|...)  a Categorical column with a vocabulary
//	hash(N)         a Hashed column of N buckets
//	id              an ID column: the field is the id
//	label           the Label column (exactly one)
//	ignore          an Ignore column
//
// A name may hold one range {A..B} of non-negative integers, which stands for
// B-A+1 columns of the same kind: c{1..3}:cat is c1:cat,c2:cat,c3:cat.
// Names must be unique and may not contain any of , : ( ) { } | = ;
// vocabulary values may not contain , : ( ) { } |. Spaces around items are
// ignored. See Schema for how ids are computed.
func ParseSchema(s string) (Schema, error) {
	items, err := splitTopLevel(s)
	if err != nil {
		return Schema{}, fmt.Errorf("schema %q: %w", s, err)
	}
	var sc Schema
	for i, item := range items {
		cols, err := parseSchemaItem(strings.TrimSpace(item), maxSchemaColumns-len(sc.Columns))
		if err != nil {
			return Schema{}, fmt.Errorf("schema item %d %q: %w", i+1, strings.TrimSpace(item), err)
		}
		sc.Columns = append(sc.Columns, cols...)
	}
	if err := sc.Validate(); err != nil {
		return Schema{}, err
	}
	return sc, nil
}

// splitTopLevel splits s at the commas outside parentheses.
func splitTopLevel(s string) ([]string, error) {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("unbalanced ')' at byte %d", i)
			}
		case ',':
			if depth == 0 {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, errors.New("unbalanced '('")
	}
	return append(items, s[start:]), nil
}

// parseSchemaItem parses NAME:KIND into one column, or several for a name
// range; room is how many more columns the schema may take.
func parseSchemaItem(item string, room int) ([]Column, error) {
	name, kind, ok := strings.Cut(item, ":")
	if !ok {
		return nil, fmt.Errorf("want NAME:KIND with KIND one of %s", kindSyntax)
	}
	name, kind = strings.TrimSpace(name), strings.TrimSpace(kind)
	col := Column{Name: name}
	arg, hasArg := "", false
	if open := strings.IndexByte(kind, '('); open >= 0 {
		if !strings.HasSuffix(kind, ")") {
			return nil, fmt.Errorf("kind %q: text after ')'", kind)
		}
		kind, arg, hasArg = strings.TrimSpace(kind[:open]), kind[open+1:len(kind)-1], true
	}
	switch {
	case kind == "num" && !hasArg:
		col.Kind = Numeric
	case kind == "cat" && !hasArg:
		col.Kind = Categorical
	case kind == "cat":
		col.Kind = Categorical
		if strings.TrimSpace(arg) == "" {
			return nil, errors.New("cat(): empty vocabulary: want cat(V1|V2|...), or cat for hashed ids")
		}
		for v := range strings.SplitSeq(arg, "|") {
			col.Vocabulary = append(col.Vocabulary, strings.TrimSpace(v))
		}
	case kind == "hash" && hasArg:
		col.Kind = Hashed
		n, err := strconv.ParseInt(strings.TrimSpace(arg), 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("hash(%s): want a positive number of buckets", arg)
		}
		col.Buckets = n
	case kind == "hash":
		return nil, errors.New("hash needs a number of buckets: hash(N)")
	case kind == "label" && !hasArg:
		col.Kind = Label
	case kind == "ignore" && !hasArg:
		col.Kind = Ignore
	case kind == "id" && !hasArg:
		col.Kind = ID
	case hasArg:
		return nil, fmt.Errorf("kind %q takes no argument, or is unknown (want %s)", kind+"("+arg+")", kindSyntax)
	default:
		return nil, fmt.Errorf("unknown kind %q (want %s)", kind, kindSyntax)
	}
	names, err := expandName(name, room)
	if err != nil {
		return nil, err
	}
	cols := make([]Column, len(names))
	for i, n := range names {
		cols[i] = col
		cols[i].Name = n
	}
	return cols, nil
}

// expandName expands a name range "c{1..3}" into c1, c2, c3. A name without
// braces is itself.
func expandName(name string, room int) ([]string, error) {
	open := strings.IndexByte(name, '{')
	if open < 0 {
		if strings.IndexByte(name, '}') >= 0 {
			return nil, fmt.Errorf("name %q: '}' without '{'", name)
		}
		if room < 1 {
			return nil, fmt.Errorf("more than %d columns", maxSchemaColumns)
		}
		return []string{name}, nil
	}
	closing := strings.IndexByte(name[open:], '}')
	if closing < 0 {
		return nil, fmt.Errorf("name %q: '{' without '}'", name)
	}
	closing += open
	prefix, rng, suffix := name[:open], name[open+1:closing], name[closing+1:]
	if strings.ContainsAny(suffix, "{}") {
		return nil, fmt.Errorf("name %q: at most one range {A..B} per name", name)
	}
	as, bs, ok := strings.Cut(rng, "..")
	a, aerr := strconv.Atoi(as)
	b, berr := strconv.Atoi(bs)
	if !ok || aerr != nil || berr != nil || a < 0 || b < a {
		return nil, fmt.Errorf("name %q: want a range {A..B} with 0 <= A <= B", name)
	}
	if b-a >= room {
		return nil, fmt.Errorf("name %q: range of %d columns: more than %d columns in the schema", name, b-a+1, maxSchemaColumns)
	}
	names := make([]string, 0, b-a+1)
	for k := a; k <= b; k++ {
		names = append(names, prefix+strconv.Itoa(k)+suffix)
	}
	return names, nil
}

// String returns the schema in ParseSchema's syntax (names ranges expanded);
// for a valid schema, ParseSchema(s.String()) gives s back.
func (s Schema) String() string {
	var b strings.Builder
	for i, c := range s.Columns {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(c.Name)
		b.WriteByte(':')
		b.WriteString(c.Kind.String())
		switch {
		case c.Kind == Hashed:
			fmt.Fprintf(&b, "(%d)", c.Buckets)
		case c.Kind == Categorical && len(c.Vocabulary) > 0:
			b.WriteString("(" + strings.Join(c.Vocabulary, "|") + ")")
		}
	}
	return b.String()
}

// Validate checks that the schema can be read: at least one column, unique
// names that the syntax can express, known kinds, buckets and vocabularies
// only where they belong, exactly one label, and a bounded id space that
// fits below 2^62. Errors name the column.
func (s Schema) Validate() error {
	if len(s.Columns) == 0 {
		return errors.New("schema has no columns")
	}
	seen := make(map[string]int, len(s.Columns))
	label := -1
	var bounded int64 // ids taken by hash and vocabulary columns so far
	for i, c := range s.Columns {
		where := fmt.Sprintf("schema column %d %q", i, c.Name)
		switch {
		case c.Name == "":
			return fmt.Errorf("schema column %d: empty name", i)
		case strings.ContainsAny(c.Name, nameForbidden):
			return fmt.Errorf("%s: a name may not contain any of %s", where, nameForbidden)
		case strings.TrimSpace(c.Name) != c.Name:
			return fmt.Errorf("%s: space around the name", where)
		}
		if j, dup := seen[c.Name]; dup {
			return fmt.Errorf("%s: duplicate name (also column %d)", where, j)
		}
		seen[c.Name] = i
		if c.Kind < Numeric || c.Kind > ID {
			return fmt.Errorf("%s: unknown kind %v (want one of %s)", where, c.Kind, kindSyntax)
		}
		if c.Buckets != 0 && c.Kind != Hashed {
			return fmt.Errorf("%s: Buckets set on a %v column (only hash columns have buckets)", where, c.Kind)
		}
		if len(c.Vocabulary) > 0 && c.Kind != Categorical {
			return fmt.Errorf("%s: Vocabulary set on a %v column (only cat columns have one)", where, c.Kind)
		}
		var size int64
		switch c.Kind {
		case Label:
			if label >= 0 {
				return fmt.Errorf("%s: a second label column (the first is column %d %q)", where, label, s.Columns[label].Name)
			}
			label = i
		case Hashed:
			if c.Buckets < 1 {
				return fmt.Errorf("%s: hash column with %d buckets, want at least 1", where, c.Buckets)
			}
			size = c.Buckets
		case Categorical:
			if len(c.Vocabulary) == 0 {
				break
			}
			vocab := make(map[string]int, len(c.Vocabulary))
			for k, v := range c.Vocabulary {
				if v == "" || strings.ContainsAny(v, valueForbidden) || strings.TrimSpace(v) != v {
					return fmt.Errorf("%s: vocabulary value %d %q: want a non-empty value without spaces around it or any of %s",
						where, k, v, valueForbidden)
				}
				if j, dup := vocab[v]; dup {
					return fmt.Errorf("%s: vocabulary value %q appears twice (values %d and %d)", where, v, j, k)
				}
				vocab[v] = k
			}
			size = int64(len(c.Vocabulary)) + 1 // +1: the id of values outside the vocabulary
		}
		if size > catIDBase-bounded {
			return fmt.Errorf("%s: the hash and vocabulary columns up to here need more than 2^62 ids", where)
		}
		bounded += size
	}
	if label < 0 {
		return errors.New("schema has no label column: want exactly one column of kind label")
	}
	return nil
}

// FNV-1a 64 parameters (FNV spec, as in hash/fnv); inlined so hashing a
// value does not allocate or go through an interface.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// schemaPlan is a validated schema compiled for decoding: where each column
// goes, and its id rule.
type schemaPlan struct {
	cols           []colPlan
	numDense       int
	numCategorical int
	label          int   // column index
	idBound        int64 // 0: unbounded (a cat column without vocabulary)
}

type colPlan struct {
	name   string // for errors
	kind   ColumnKind
	slot   int    // Numeric: feature index; Categorical, Hashed: id index
	prefix uint64 // FNV-1a state after name + "="
	offset int64  // first id of a bounded column
	size   int64  // ids of a bounded column (buckets, or vocabulary + 1); 0 for unbounded cat
	vocab  map[string]int64
}

func (s Schema) plan() (*schemaPlan, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	p := &schemaPlan{cols: make([]colPlan, len(s.Columns))}
	var bounded int64
	unbounded := false
	for i, c := range s.Columns {
		cp := colPlan{name: c.Name, kind: c.Kind, prefix: fnv1a(fnvOffset64, c.Name+"=")}
		switch c.Kind {
		case Numeric:
			cp.slot = p.numDense
			p.numDense++
		case Label:
			p.label = i
		case ID:
			cp.slot = p.numCategorical
			p.numCategorical++
			unbounded = true
		case Hashed, Categorical:
			cp.slot = p.numCategorical
			p.numCategorical++
			switch {
			case c.Kind == Hashed:
				cp.size = c.Buckets
			case len(c.Vocabulary) > 0:
				cp.size = int64(len(c.Vocabulary)) + 1
				cp.vocab = make(map[string]int64, len(c.Vocabulary))
				for k, v := range c.Vocabulary {
					cp.vocab[v] = int64(k)
				}
			default:
				unbounded = true
			}
			cp.offset = bounded
			bounded += cp.size
		}
		p.cols[i] = cp
	}
	if !unbounded {
		p.idBound = bounded
	}
	return p, nil
}

// newBatch returns an empty batch with room for n records.
func (p *schemaPlan) newBatch(n int) *Batch {
	return &Batch{
		FeatureShape:   []int{p.numDense},
		Features:       make([]float32, 0, n*p.numDense),
		Labels:         make([]int32, 0, n),
		Index:          make([]int64, 0, n),
		NumCategorical: p.numCategorical,
		Categorical:    make([]int64, 0, n*p.numCategorical),
	}
}

// decode appends one record, its fields in schema order, to b. On error b is left as it was, so a
// corrupt record leaves no partial features or ids behind.
func (p *schemaPlan) decode(fields []string, b *Batch) error {
	if len(fields) != len(p.cols) {
		return fmt.Errorf("got %d fields, want %d", len(fields), len(p.cols))
	}
	nf, nc := len(b.Features), len(b.Categorical)
	b.Features = slices.Grow(b.Features, p.numDense)[:nf+p.numDense]
	b.Categorical = slices.Grow(b.Categorical, p.numCategorical)[:nc+p.numCategorical]
	feats, ids := b.Features[nf:], b.Categorical[nc:]
	var label int32
	for i, f := range fields {
		cp := &p.cols[i]
		f = strings.TrimSpace(f)
		var err error
		switch cp.kind {
		case Numeric:
			feats[cp.slot], err = parseNumeric(f)
		case Categorical, Hashed:
			ids[cp.slot] = cp.id(f)
		case ID:
			ids[cp.slot], err = parseID(f)
		case Label:
			label, err = parseLabel(f)
		}
		if err != nil {
			b.Features, b.Categorical = b.Features[:nf], b.Categorical[:nc]
			return fmt.Errorf("%v column %d (%s): %w", cp.kind, i, cp.name, err)
		}
	}
	b.Labels = append(b.Labels, label)
	return nil
}

// id maps a (trimmed) value of a Categorical or Hashed column to its id.
func (cp *colPlan) id(value string) int64 {
	if cp.vocab != nil {
		if k, ok := cp.vocab[value]; ok {
			return cp.offset + k
		}
		return cp.offset + cp.size - 1
	}
	h := fnv1a(cp.prefix, value)
	if cp.size == 0 {
		return catIDBase | int64(h&uint64(catIDBase-1))
	}
	return cp.offset + int64(h%uint64(cp.size))
}

// CategoricalID returns the id that column col of the schema gives to value
// (spaces around it are ignored, as when reading a file), for code that
// builds records outside a CSV file, such as a serving path. It fails for
// an invalid schema or a column that is not Categorical or Hashed. It
// compiles the schema on each call, so it is for checks, not bulk use.
func (s Schema) CategoricalID(col int, value string) (int64, error) {
	p, err := s.plan()
	if err != nil {
		return 0, err
	}
	if col < 0 || col >= len(p.cols) {
		return 0, fmt.Errorf("schema column %d: out of range (have %d columns)", col, len(p.cols))
	}
	if k := p.cols[col].kind; k != Categorical && k != Hashed {
		return 0, fmt.Errorf("schema column %d %q: a %v column has no ids", col, s.Columns[col].Name, k)
	}
	return p.cols[col].id(strings.TrimSpace(value)), nil
}

// parseID parses an ID field: a non-negative int64. Not only below 2^62:
// a cat column's ids (2^62 and up) written out by `data export` must read
// back as the same ids.
func parseID(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("id %q: want an integer from 0 to 2^63-1", s)
	}
	return v, nil
}

// parseNumeric parses a Numeric field: empty is 0 (CTR data has many
// missing counts); anything else must be a finite number.
func parseNumeric(s string) (float32, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 32)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("non-finite value %q", s) // would poison training
	}
	return float32(v), nil
}
