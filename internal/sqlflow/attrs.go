package sqlflow

import (
	"sort"
	"strings"
)

// Aliases are SQLFlow's attribute names that differ from the job's flag:
// train.epoch is --num_epochs.
var Aliases = map[string]string{"train.epoch": "num_epochs"}

// Settings are a statement's WITH attributes as a job takes them.
type Settings struct {
	// Flags are --name=value arguments, in the statement's order.
	Flags []string
	// ModelParams is --model_params: the model.* attributes as
	// semicolon-separated key=value, in the statement's order.
	ModelParams string
}

// Translate turns attrs into a job's settings: model.NAME becomes NAME
// in --model_params; PREFIX.NAME, for PREFIX in prefixes (train,
// validation), becomes --NAME (or its alias) when known[PREFIX] holds
// that flag. Anything else is an error at the attribute that lists what
// is known.
func Translate(attrs []Attr, known map[string][]string) (Settings, error) {
	var s Settings
	var params []string
	for _, a := range attrs {
		v, err := value(a.Value)
		if err != nil {
			return Settings{}, err
		}
		lower := strings.ToLower(a.Name)
		if name, ok := strings.CutPrefix(lower, "model."); ok && name != "" {
			params = append(params, name+"="+v)
			continue
		}
		flag, ok := flagOf(lower, known)
		if !ok {
			return Settings{}, errorf(a.Pos, "unknown attribute %s: known are model.* (the model's parameters), %s", a.Name, strings.Join(knownAttrs(known), ", "))
		}
		s.Flags = append(s.Flags, "--"+flag+"="+v)
	}
	s.ModelParams = strings.Join(params, "; ")
	return s, nil
}

// flagOf is the flag attribute name (lower case) sets, if known.
func flagOf(name string, known map[string][]string) (string, bool) {
	prefix, rest, ok := strings.Cut(name, ".")
	if !ok {
		return "", false
	}
	if alias, ok := Aliases[name]; ok {
		rest = alias
	}
	return rest, contains(known[prefix], rest)
}

// knownAttrs lists the attributes that set a known flag, sorted; a flag
// with an alias is listed under the alias.
func knownAttrs(known map[string][]string) []string {
	aliased := map[string]bool{}
	for alias, flag := range Aliases {
		p, _, _ := strings.Cut(alias, ".")
		if contains(known[p], flag) {
			aliased[p+"."+flag] = true
		}
	}
	var out []string
	for p, flags := range known {
		for _, f := range flags {
			if a := p + "." + f; !aliased[a] {
				out = append(out, a)
			}
		}
	}
	for alias, flag := range Aliases {
		if p, _, _ := strings.Cut(alias, "."); contains(known[p], flag) {
			out = append(out, alias)
		}
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// value renders an attribute's value as a flag takes it.
func value(e Expr) (string, error) {
	switch e.Kind {
	case ExprCall:
		return "", errorf(e.Pos, "%s(…) is not a value: an attribute takes a number, 'text', a name or [a, list]", e.Text)
	case ExprList:
		for _, a := range e.Args {
			if a.Kind == ExprList || a.Kind == ExprCall {
				return "", errorf(a.Pos, "a list holds numbers, strings or names, not %s", a.String())
			}
		}
	}
	return e.String(), nil
}
