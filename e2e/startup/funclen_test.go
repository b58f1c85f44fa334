package startup_test

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines is the guide's bound: no product function over 100 lines,
// counted from its func line to its closing brace.
const maxFuncLines = 100

// Long functions hide their steps: every non-test function of the module
// stays within maxFuncLines (the last known exception, local's
// Driver.run, was split in issue 40). Run with -v to see the longest.
func TestFunctionsStayShort(t *testing.T) {
	root := moduleRoot(t)
	lengths := funcLengths(t, root)
	if len(lengths) < 500 {
		t.Fatalf("only %d functions measured: the walk no longer finds the module's code", len(lengths))
	}
	names := slices.SortedFunc(maps.Keys(lengths), func(a, b string) int { return cmp.Or(lengths[b]-lengths[a], strings.Compare(a, b)) })
	for i, name := range names {
		n := lengths[name]
		if n > maxFuncLines {
			t.Errorf("%s is %d lines, over %d: split it into named steps a reader can follow", name, n, maxFuncLines)
		} else if i < 5 {
			t.Logf("%s: %d lines", name, n)
		}
	}
}

// funcLengths measures every function and method declared in the module's
// tracked non-test, non-generated Go files, keyed "path: Recv.Name".
func funcLengths(t *testing.T, root string) map[string]int {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string]int{}
	for _, name := range trackedFiles(t, root) {
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			t.Fatalf("parsing %s: %v", name, err)
		}
		if ast.IsGenerated(file) {
			continue
		}
		for _, d := range file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				out[fmt.Sprintf("%s: %s", filepath.ToSlash(name), funcName(fd))] = lines
			}
		}
	}
	return out
}

// funcName is Name, or Recv.Name for a method (pointer and type
// parameters left out).
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
