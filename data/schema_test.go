package data

import (
	"hash/fnv"
	"reflect"
	"strings"
	"testing"
)

func TestParseSchema(t *testing.T) {
	cases := []struct {
		in   string
		want []Column
	}{
		{"label:label,i{1..3}:num,c1:cat,c2:hash(100),c3:cat(a|b| c ),x:ignore", []Column{
			{Name: "label", Kind: Label},
			{Name: "i1", Kind: Numeric}, {Name: "i2", Kind: Numeric}, {Name: "i3", Kind: Numeric},
			{Name: "c1", Kind: Categorical},
			{Name: "c2", Kind: Hashed, Buckets: 100},
			{Name: "c3", Kind: Categorical, Vocabulary: []string{"a", "b", "c"}},
			{Name: "x", Kind: Ignore},
		}},
		{" y : label , f{0..0}x : num , h : hash( 7 ) ", []Column{
			{Name: "y", Kind: Label}, {Name: "f0x", Kind: Numeric}, {Name: "h", Kind: Hashed, Buckets: 7},
		}},
		{"y:label", []Column{{Name: "y", Kind: Label}}},
		{"c{9..11}:cat,y:label", []Column{
			{Name: "c9", Kind: Categorical}, {Name: "c10", Kind: Categorical}, {Name: "c11", Kind: Categorical},
			{Name: "y", Kind: Label},
		}},
	}
	for _, tc := range cases {
		s, err := ParseSchema(tc.in)
		if err != nil {
			t.Errorf("ParseSchema(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(s.Columns, tc.want) {
			t.Errorf("ParseSchema(%q) =\n%+v, want\n%+v", tc.in, s.Columns, tc.want)
		}
		back, err := ParseSchema(s.String())
		if err != nil || !reflect.DeepEqual(back, s) {
			t.Errorf("ParseSchema(%q).String() = %q does not parse back: %+v, %v", tc.in, s.String(), back, err)
		}
	}
}

func TestParseSchemaErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "want NAME:KIND"},
		{"y:label,,a:num", `item 2 ""`},
		{"a:num", "no label column"},
		{"a:label,b:label", `schema column 1 "b": a second label column (the first is column 0 "a")`},
		{"a:label,a:num", `schema column 1 "a": duplicate name (also column 0)`},
		{"y:label,b:float", `item 2 "b:float": unknown kind "float"`},
		{"y:label,b:hash", "hash needs a number of buckets"},
		{"y:label,b:hash(0)", "hash(0): want a positive number of buckets"},
		{"y:label,b:hash(x)", "hash(x)"},
		{"y:label,b:hash(10)x", "text after ')'"},
		{"y:label,b:num(3)", "takes no argument"},
		{"y:label,b:cat()", "empty vocabulary"},
		{"y:label,b:cat(x|x)", `"b": vocabulary value "x" appears twice`},
		{"y:label,b:cat(x||y)", `vocabulary value 1 ""`},
		{"y:label,b:cat(x", "unbalanced '('"},
		{"y:label,b:cat(x))", "unbalanced ')'"},
		{"y:label,b{2..1}:num", "want a range {A..B}"},
		{"y:label,b{1..3:num", "'{' without '}'"},
		{"y:label,b1..3}:num", "'}' without '{'"},
		{"y:label,b{1..2}{3..4}:num", "at most one range"},
		{"y:label,b{0..70000}:num", "more than 65536 columns"},
		{"y:label,:num", "schema column 1: empty name"},
		{"y:label,b=c:num", `"b=c": a name may not contain`},
		{"y:label,b", `item 2 "b": want NAME:KIND`},
	}
	for _, tc := range cases {
		s, err := ParseSchema(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSchema(%q) = %+v, %v; want an error containing %q", tc.in, s, err, tc.want)
		}
	}
}

func TestSchemaValidate(t *testing.T) {
	y := Column{Name: "y", Kind: Label}
	cases := []struct {
		name string
		cols []Column
		want string
	}{
		{"no columns", nil, "no columns"},
		{"kind not set", []Column{y, {Name: "a"}}, `schema column 1 "a": unknown kind ColumnKind(0)`},
		{"buckets on num", []Column{y, {Name: "a", Kind: Numeric, Buckets: 3}}, `"a": Buckets set on a num column`},
		{"vocabulary on hash", []Column{y, {Name: "a", Kind: Hashed, Buckets: 3, Vocabulary: []string{"x"}}}, `"a": Vocabulary set on a hash column`},
		{"hash without buckets", []Column{y, {Name: "a", Kind: Hashed}}, `"a": hash column with 0 buckets`},
		{"space in name", []Column{y, {Name: "a ", Kind: Numeric}}, "space around the name"},
		{"id space overflow", []Column{y, {Name: "a", Kind: Hashed, Buckets: catIDBase - 1}, {Name: "b", Kind: Hashed, Buckets: 2}},
			`schema column 2 "b": the hash and vocabulary columns up to here need more than 2^62 ids`},
	}
	for _, tc := range cases {
		err := Schema{Columns: tc.cols}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	// Exactly at the limit is fine.
	ok := Schema{Columns: []Column{y, {Name: "a", Kind: Hashed, Buckets: catIDBase - 1}, {Name: "b", Kind: Hashed, Buckets: 1}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("2^62 bounded ids: %v", err)
	}
}

// TestCategoricalIDScheme checks the documented id formulas against an
// independent FNV-1a implementation (hash/fnv).
func TestCategoricalIDScheme(t *testing.T) {
	s, err := ParseSchema("y:label,c1:cat,h1:hash(1000),n:num,v:cat(lo|mid|hi),h2:hash(7)")
	if err != nil {
		t.Fatal(err)
	}
	fnv64a := func(s string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(s))
		return h.Sum64()
	}
	cases := []struct {
		col   int
		value string
		want  int64
	}{
		{1, "abc", 1<<62 + int64(fnv64a("c1=abc")%(1<<62))},
		{1, " abc ", 1<<62 + int64(fnv64a("c1=abc")%(1<<62))}, // spaces around are ignored
		{1, "", 1<<62 + int64(fnv64a("c1=")%(1<<62))},
		{2, "abc", int64(fnv64a("h1=abc") % 1000)}, // first bounded column: offset 0
		{4, "lo", 1000}, // after h1's 1000 ids
		{4, "hi", 1002},
		{4, "other", 1003}, // out of vocabulary
		{4, "", 1003},
		{5, "abc", 1004 + int64(fnv64a("h2=abc")%7)}, // after v's 3+1 ids
	}
	for _, tc := range cases {
		got, err := s.CategoricalID(tc.col, tc.value)
		if err != nil || got != tc.want {
			t.Errorf("CategoricalID(%d, %q) = %d, %v; want %d", tc.col, tc.value, got, err, tc.want)
		}
	}
	// The same value in two columns must get two ids.
	a, _ := s.CategoricalID(2, "x")
	b, _ := s.CategoricalID(5, "x")
	if a == b {
		t.Errorf("value x has id %d in two columns", a)
	}
	for _, col := range []int{0, 3, 6, -1} {
		if _, err := s.CategoricalID(col, "x"); err == nil {
			t.Errorf("CategoricalID(%d): want an error for a column without ids", col)
		}
	}
}

func FuzzParseSchema(f *testing.F) {
	for _, s := range []string{
		"label:label,i{1..13}:num,c{1..26}:hash(1000000)",
		"y:label,c:cat(a|b|c),x:ignore",
		"a:label,b:cat(x", "y:label,b{0..70000}:num", "y : label , z:hash( 3 )",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseSchema(in)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("ParseSchema(%q) accepted an invalid schema: %v", in, err)
		}
		back, err := ParseSchema(s.String())
		if err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("ParseSchema(%q).String() = %q parses back as %+v, %v", in, s.String(), back, err)
		}
	})
}
