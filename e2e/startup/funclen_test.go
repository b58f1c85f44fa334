package startup_test

import (
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

// longFuncs are the functions over the bound when the check came (issue
// 40), each at the length it may not exceed, and whose work splits it.
// The list only shrinks: a function here may not grow, and one split
// below the bound must leave the list.
var longFuncs = map[string]struct {
	lines int
	owner string
}{}

// Long functions hide their steps: every non-test function of the module
// stays within maxFuncLines, save the known ones above, which only shrink.
// Run with -v to see each long function and its length.
func TestFunctionsStayShort(t *testing.T) {
	root := moduleRoot(t)
	lengths := funcLengths(t, root)
	if len(lengths) < 500 {
		t.Fatalf("only %d functions measured: the walk no longer finds the module's code", len(lengths))
	}
	var long []string
	for name, n := range lengths {
		if n > maxFuncLines {
			long = append(long, name)
		}
	}
	slices.Sort(long)
	for _, name := range long {
		n := lengths[name]
		known, ok := longFuncs[name]
		switch {
		case !ok:
			t.Errorf("%s is %d lines, over %d: split it into named steps a reader can follow", name, n, maxFuncLines)
		case n > known.lines:
			t.Errorf("%s grew to %d lines (it was %d, already over %d): it may only shrink, until %s work splits it", name, n, known.lines, maxFuncLines, known.owner)
		default:
			t.Logf("%s: %d lines (known, left to %s work)", name, n, known.owner)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(longFuncs)) {
		if n, ok := lengths[name]; !ok || n <= maxFuncLines {
			t.Errorf("%s is no longer over %d lines (%d now, 0 if gone): remove its entry from longFuncs in %s, so it cannot grow back", name, maxFuncLines, n, "e2e/startup/funclen_test.go")
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
