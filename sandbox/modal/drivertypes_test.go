package modal

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// The driver implements driver.Driver in driver's own types: the names
// sandbox/types.go declares are the portable API's aliases for its users,
// not for backends (issue 40).
func TestDriverSpeaksDriverTypes(t *testing.T) {
	fset := token.NewFileSet()
	types, err := parser.ParseFile(fset, filepath.Join("..", "types.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	aliases := map[string]bool{}
	for _, d := range types.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					aliases[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						aliases[n.Name] = true
					}
				}
			}
		case *ast.FuncDecl:
			aliases[d.Name.Name] = true
		}
	}
	if !aliases["Spec"] || !aliases["ErrGone"] || !aliases["Refused"] {
		t.Fatalf("read no aliases from sandbox/types.go (%d names): the check below would prove nothing", len(aliases))
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "sandbox" && aliases[sel.Sel.Name] {
				t.Errorf("%s: sandbox.%s is an alias for the portable API's users: write driver.%s", fset.Position(sel.Pos()), sel.Sel.Name, sel.Sel.Name)
			}
			return true
		})
	}
}
