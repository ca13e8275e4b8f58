package data

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

const csvScheme = "csv"

// SchemaCSV reads a CSV file whose columns are declared by a Schema: numeric
// columns become Batch.Features, categorical and hashed columns one id each
// in Batch.Categorical, and the label column Batch.Labels. It shares CSV's
// random access: the file is indexed once at open, and each Read parses only
// its range.
//
// A record goes to Batch.Corrupt when it has the wrong number of fields, bad
// quoting, a numeric field that is not a finite number (an empty one is 0),
// or a label that is not an int32 (empty included).
type SchemaCSV struct {
	name   string
	csv    *CSV // the file, its index and its lock
	schema Schema
	plan   *schemaPlan
}

// OpenCSVSchema opens and indexes a CSV file read with schema. With
// opts.HasHeader, the header must list the schema's column names, in order;
// without, the first record must have as many fields as the schema has
// columns. Either mismatch is an error at open, naming the column, since it
// almost always means a wrong schema. opts.LabelColumn must be empty: the
// schema names the label.
func OpenCSVSchema(path string, schema Schema, opts CSVOptions) (*SchemaCSV, error) {
	return openCSVSchema(path, path, schema, opts)
}

// openCSVSchema opens path under name, the path or a csv:// URI.
func openCSVSchema(name, path string, schema Schema, opts CSVOptions) (*SchemaCSV, error) {
	plan, err := schema.plan()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if opts.LabelColumn != "" {
		return nil, fmt.Errorf("%s: CSVOptions.LabelColumn is %q: with a schema, the schema's label column is used; leave it empty",
			name, opts.LabelColumn)
	}
	c, err := OpenCSV(path, CSVOptions{HasHeader: opts.HasHeader, Comma: opts.Comma})
	if err != nil {
		return nil, err
	}
	c.name = name // record errors name the source as it was opened
	if err := checkColumns(c.columns, opts.HasHeader, schema); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &SchemaCSV{name: name, csv: c, schema: Schema{Columns: slices.Clone(schema.Columns)}, plan: plan}, nil
}

// checkColumns compares a file's columns (its header, or c0.. for the
// fields of its first record) with the schema.
func checkColumns(got []string, header bool, s Schema) error {
	want := s.Columns
	if !header {
		switch {
		case len(got) < len(want):
			return fmt.Errorf("the first record has %d fields but the schema has %d columns: schema column %d %q has no field",
				len(got), len(want), len(got), want[len(got)].Name)
		case len(got) > len(want):
			return fmt.Errorf("the first record has %d fields but the schema has %d columns: field %d has no schema column",
				len(got), len(want), len(want))
		}
		return nil
	}
	count := ""
	if len(got) != len(want) {
		count = fmt.Sprintf("the header has %d columns but the schema has %d: ", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if h := strings.TrimSpace(got[i]); h != want[i].Name {
			return fmt.Errorf("%sheader column %d is %q but schema column %d is %q", count, i, h, i, want[i].Name)
		}
	}
	switch {
	case len(got) > len(want):
		return fmt.Errorf("%sheader column %d %q is not in the schema", count, len(want), got[len(want)])
	case len(got) < len(want):
		return fmt.Errorf("%sschema column %d %q is not in the header", count, len(got), want[len(got)].Name)
	}
	return nil
}

// OpenCSVURI opens a CSV file named by a URI of the form
//
//	csv://PATH?schema=SCHEMA[&header=BOOL][&comma=C]
//
// PATH is taken literally up to the '?' (csv:///data/x.csv is the absolute
// path /data/x.csv, csv://x.csv a relative one); SCHEMA is in ParseSchema's
// syntax; header (default false) says whether the first line is a header;
// comma is the separator (default ","), one character or "tab". Parameter
// values are URL query values: '+' means a space, and ';' must be written
// %3B. Unknown parameters are errors. Quote the URI in a shell: it holds '&'
// and braces. For example, the Criteo display-ads files:
//
//	csv:///data/criteo/train.txt?comma=tab&schema=label:label,i{1..13}:num,c{1..26}:hash(1000000)
//
// The source's Name is the URI.
func OpenCSVURI(uri string) (*SchemaCSV, error) {
	rest, ok := strings.CutPrefix(uri, csvScheme+"://")
	if !ok {
		return nil, fmt.Errorf("%s: not a %s:// URI", uri, csvScheme)
	}
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return nil, fmt.Errorf("%s: no file path: want csv://PATH?schema=...", uri)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%s: query: %w", uri, err)
	}
	var opts CSVOptions
	var schema Schema
	for _, k := range slices.Sorted(maps.Keys(q)) { // sorted: the same URI always gives the same error
		v := q[k]
		if len(v) != 1 {
			return nil, fmt.Errorf("%s: parameter %q given %d times", uri, k, len(v))
		}
		switch k {
		case "schema":
			if schema, err = ParseSchema(v[0]); err != nil {
				return nil, fmt.Errorf("%s: %w", uri, err)
			}
		case "header":
			if opts.HasHeader, err = strconv.ParseBool(v[0]); err != nil {
				return nil, fmt.Errorf("%s: header=%q: want true or false", uri, v[0])
			}
		case "comma":
			switch r, size := utf8.DecodeRuneInString(v[0]); {
			case v[0] == "tab":
				opts.Comma = '\t'
			case size > 0 && size == len(v[0]) && r != utf8.RuneError:
				opts.Comma = r
			default:
				return nil, fmt.Errorf(`%s: comma=%q: want one character or "tab"`, uri, v[0])
			}
		default:
			return nil, fmt.Errorf("%s: unknown parameter %q (want schema, header, comma)", uri, k)
		}
	}
	if schema.Columns == nil {
		return nil, fmt.Errorf("%s: no schema: want csv://PATH?schema=NAME:KIND,... (see ParseSchema)", uri)
	}
	return openCSVSchema(uri, path, schema, opts)
}

// Name returns the path or URI the source was opened with.
func (s *SchemaCSV) Name() string { return s.name }

// Len returns the number of data records (the header excluded).
func (s *SchemaCSV) Len() int64 { return s.csv.Len() }

// FeatureShape returns [number of numeric columns].
func (s *SchemaCSV) FeatureShape() []int { return []int{s.plan.numDense} }

// NumCategorical returns the number of categorical and hashed columns.
func (s *SchemaCSV) NumCategorical() int { return s.plan.numCategorical }

// IDBound returns the size of the id space of the hash and vocabulary
// columns, or 0 if the schema has a cat column without vocabulary, whose ids
// are unbounded 63-bit hashes (see Schema).
func (s *SchemaCSV) IDBound() int64 { return s.plan.idBound }

// Schema returns the schema the file is read with.
func (s *SchemaCSV) Schema() Schema {
	return s.schema.clone()
}

// Read decodes records [start,end); see SchemaCSV for what makes a record
// corrupt.
func (s *SchemaCSV) Read(start, end int64) (*Batch, error) {
	c := s.csv
	if err := checkRange(s.name, start, end, c.Len()); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, fmt.Errorf("%s: read: %w", s.name, os.ErrClosed)
	}
	b := s.plan.newBatch(int(end - start))
	err := c.scan(start, end, true, func(rec int64, fields []string, perr error) error {
		if perr == nil {
			if perr = s.plan.decode(fields, b); perr == nil {
				b.Index = append(b.Index, rec)
				return nil
			}
		}
		b.Corrupt = append(b.Corrupt, &RecordError{Source: s.name, Record: rec, Err: perr})
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.N = len(b.Labels)
	return b, nil
}

// Close releases the file. Reads after Close fail; Close is idempotent.
func (s *SchemaCSV) Close() error { return s.csv.Close() }
