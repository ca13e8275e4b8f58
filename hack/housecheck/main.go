// Command housecheck enforces the project's size rules on the hand-written
// code, so that they keep holding (hack/test.sh runs it first):
//
//   - no hand-written file over 700 lines (Go, Python, shell);
//   - no function over 80 lines outside tests and generated code;
//   - internal/master's Master struct at most 20 fields (its shell holds
//     I/O handles and the core, grouped; see internal/master/master.go);
//   - every Go package says in its package comment what it is for.
//
// It prints one line per breach and exits 1 when there is any.
//
//	go run ./hack/housecheck [root]
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The limits; see the package comment.
const (
	maxFileLines   = 700
	maxFuncLines   = 80
	maxMasterField = 20
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	breaches, err := check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "housecheck:", err)
		os.Exit(2)
	}
	for _, b := range breaches {
		fmt.Println(b)
	}
	if len(breaches) > 0 {
		fmt.Printf("housecheck: %d breach(es) of the size rules (hack/housecheck)\n", len(breaches))
		os.Exit(1)
	}
}

// check walks root and returns every breach, sorted.
func check(root string) ([]string, error) {
	var breaches []string
	pkgDoc := map[string]bool{} // Go package dir -> has a package comment
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(path, d.Name(), root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !handWrittenKind(d.Name()) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generated(src) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if n := bytes.Count(src, []byte("\n")); n > maxFileLines {
			breaches = append(breaches, fmt.Sprintf("%s: %d lines (at most %d)", rel, n, maxFileLines))
		}
		if strings.HasSuffix(path, ".go") {
			b, hasDoc, err := checkGo(rel, src)
			if err != nil {
				return err
			}
			breaches = append(breaches, b...)
			dir := filepath.Dir(rel)
			pkgDoc[dir] = pkgDoc[dir] || hasDoc
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	breaches = append(breaches, missingDocs(pkgDoc)...)
	sort.Strings(breaches)
	return breaches, nil
}

// skipDir leaves out what is not the project's hand-written code.
func skipDir(path, name, root string) bool {
	if path == root {
		return false
	}
	return strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" ||
		name == "_proto" || name == "bin" || name == "out" || name == "__pycache__"
}

func handWrittenKind(name string) bool {
	for _, ext := range []string{".go", ".py", ".sh"} {
		if strings.HasSuffix(name, ext) {
			return !strings.HasSuffix(name, ".pb.go") && !strings.HasSuffix(name, "_pb2.py") &&
				!strings.HasSuffix(name, "_pb2_grpc.py")
		}
	}
	return false
}

// generated reports Go's convention for generated files (a line
// "// Code generated ... DO NOT EDIT." before the package clause).
func generated(src []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "package ") {
			return false
		}
		if strings.HasPrefix(line, "// Code generated ") && strings.HasSuffix(line, " DO NOT EDIT.") {
			return true
		}
	}
	return false
}

// checkGo parses one Go file: long functions (outside tests), the Master
// struct's fields, and whether the file carries a package comment.
func checkGo(rel string, src []byte) (breaches []string, hasDoc bool, err error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
	if err != nil {
		return nil, false, fmt.Errorf("parse %s: %w", rel, err)
	}
	hasDoc = f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != ""
	test := strings.HasSuffix(rel, "_test.go")
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if test || d.Body == nil {
				continue
			}
			n := fset.Position(d.End()).Line - fset.Position(d.Pos()).Line + 1
			if n > maxFuncLines {
				breaches = append(breaches, fmt.Sprintf("%s:%d: func %s: %d lines (at most %d)",
					rel, fset.Position(d.Pos()).Line, funcName(d), n, maxFuncLines))
			}
		case *ast.GenDecl:
			if filepath.ToSlash(filepath.Dir(rel)) == "internal/master" && !test {
				breaches = append(breaches, masterFields(fset, rel, d)...)
			}
		}
	}
	return breaches, hasDoc, nil
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + d.Name.Name
	}
	return d.Name.Name
}

// masterFields counts the fields of type Master (a field list "a, b T"
// counts two; an embedded type one).
func masterFields(fset *token.FileSet, rel string, d *ast.GenDecl) []string {
	for _, spec := range d.Specs {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Master" {
			continue
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		n := 0
		for _, f := range st.Fields.List {
			n += max(len(f.Names), 1)
		}
		if n > maxMasterField {
			return []string{fmt.Sprintf("%s:%d: type Master: %d fields (at most %d)",
				rel, fset.Position(ts.Pos()).Line, n, maxMasterField)}
		}
	}
	return nil
}

// missingDocs names the Go packages none of whose files has a package
// comment.
func missingDocs(pkgDoc map[string]bool) []string {
	var out []string
	for dir, ok := range pkgDoc {
		if !ok {
			out = append(out, fmt.Sprintf("%s: package has no package comment saying what it is for", dir))
		}
	}
	return out
}
