// Package drivertypes holds a sandbox backend's code to sandbox/driver's
// own names, below the portable layer. Package sandbox re-exports the
// driver's types, error kinds and constants (sandbox/types.go) for the
// portable API's users; a backend that names them there stands above the
// portable type it implements, and one thing has two names (issue 40).
package drivertypes

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sandboxPath is package sandbox's import path.
const sandboxPath = "github.com/airflow-sandbox/airflow-go-worker/sandbox"

// portableAliases are the names sandbox/types.go declares (types,
// constants, variables and functions), read from the file itself so that
// a name added there is named at once. dir is any directory inside the
// module.
func portableAliases(t testing.TB, dir string) map[string]bool {
	t.Helper()
	root := moduleRoot(t, dir)
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "sandbox", "types.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					names[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				}
			}
		case *ast.FuncDecl:
			names[d.Name.Name] = true
		}
	}
	// Names every version of the file has: without them it was not read.
	if !names["Spec"] || !names["ErrGone"] || !names["Refused"] {
		t.Fatalf("read no aliases from sandbox/types.go (%d names): the check would not name them", len(names))
	}
	return names
}

// NoPortableImport fails t for every non-test Go file of package directory
// dir that imports package sandbox, naming what the file uses it for (an
// alias with the driver's own name): a backend sits below the portable
// layer over it.
func NoPortableImport(t testing.TB, dir string) {
	t.Helper()
	aliases := portableAliases(t, dir)
	fset := token.NewFileSet()
	forEachFile(t, fset, dir, func(f *ast.File) {
		for _, is := range f.Imports {
			if p, _ := strconv.Unquote(is.Path.Value); p != sandboxPath {
				continue
			}
			local := "sandbox"
			if is.Name != nil {
				local = is.Name.Name
			}
			var used []string
			for _, sel := range selectors(f, local) {
				name := "sandbox." + sel.Sel.Name
				if aliases[sel.Sel.Name] {
					name += " (write driver." + sel.Sel.Name + ")"
				}
				used = append(used, name)
			}
			t.Errorf("%s: imports package sandbox, the portable layer over the driver this package implements, for %s: use sandbox/driver's names, and move anything else it needs below the portable layer", fset.Position(is.Pos()), strings.Join(used, ", "))
		}
	})
}

// selectors are f's selector expressions on the package imported as local.
func selectors(f *ast.File, local string) []*ast.SelectorExpr {
	var sels []*ast.SelectorExpr
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == local {
				sels = append(sels, sel)
			}
		}
		return true
	})
	return sels
}

// forEachFile parses every non-test Go file of dir, failing t when there is
// none.
func forEachFile(t testing.TB, fset *token.FileSet, dir string, each func(*ast.File)) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		each(f)
		n++
	}
	if n == 0 {
		t.Fatalf("no non-test Go file in %s: the check would prove nothing", dir)
	}
}

// moduleRoot is the directory of the go.mod above dir.
func moduleRoot(t testing.TB, dir string) string {
	t.Helper()
	d, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			t.Fatalf("no go.mod above %s", dir)
		}
		d = parent
	}
}
