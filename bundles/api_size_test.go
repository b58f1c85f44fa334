package bundles

import (
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// maxExportedNames bounds what `go doc ./bundles` shows a task author
// (issue 30): New, Register/Add and their options, Client, TaskInstance,
// DagRun, assets, outcomes and Main. Plumbing lives under internal/ or in
// a sub-package; raising this needs a reason a task author would give.
// 35 -> 40: what a Go task declares because Airflow 3.3 does not hand it
// over: four stub attributes (WithExecutionTimeout, WithMultipleOutputs,
// WithBranch, WithBranchJoin) and a templated stub argument (WithTemplate).
// 40 -> 41: Defer, an outcome like Skip: a task that waits on remote work
// frees its worker slot (issue 41).
const maxExportedNames = 41

// bundleMethods are all a task author calls on a Bundle; what the bundle's
// own tools read goes through package taskinfo.
var bundleMethods = []string{"Add", "Register", "Run", "Serve"}

func TestAuthorAPIStaysSmall(t *testing.T) {
	bp, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/airflow-sandbox/airflow-go-worker/bundles")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			names = append(names, v.Names...)
		}
	}
	values(p.Consts)
	values(p.Vars)
	for _, f := range p.Funcs {
		names = append(names, f.Name)
	}
	for _, typ := range p.Types {
		names = append(names, typ.Name)
		if typ.Name == "Bundle" {
			var methods []string
			for _, m := range typ.Methods {
				methods = append(methods, m.Name)
			}
			if !slices.Equal(methods, bundleMethods) {
				t.Errorf("Bundle's methods are %v, want only the author's %v: put what tools read behind taskinfo.Describe", methods, bundleMethods)
			}
		}
		values(typ.Consts)
		values(typ.Vars)
		for _, f := range typ.Funcs {
			names = append(names, f.Name)
		}
	}
	if len(names) < 20 {
		t.Fatalf("found only %d exported names (%v): is the package parsed?", len(names), names)
	}
	if len(names) > maxExportedNames {
		t.Errorf("package bundles exports %d names, more than the %d a task author should need to learn; move plumbing under internal/ or a sub-package:\n%s",
			len(names), maxExportedNames, strings.Join(names, "\n"))
	}
}
