package drivertypes

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what the checks report.
type recorder struct {
	testing.TB
	errors []string
	fatal  bool
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, a ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, a...))
}

func (r *recorder) Fatal(a ...any) { r.Fatalf("%s", fmt.Sprint(a...)) }

func (r *recorder) Fatalf(format string, a ...any) {
	r.fatal = true
	r.Errorf(format, a...)
	runtime.Goexit()
}

// record runs check on testdata/dir with a recorder, on a goroutine of its
// own, which a Fatal ends.
func record(t *testing.T, check func(testing.TB, string), dir string) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r, filepath.Join("testdata", dir))
	}()
	<-done
	return r
}

// run is record for a check that must be able to run.
func run(t *testing.T, check func(testing.TB, string), dir string) *recorder {
	r := record(t, check, dir)
	if r.fatal {
		t.Fatalf("the check could not run on %s: %v", dir, r.errors)
	}
	return r
}

func TestNoAliasesNamesEachAliasUnderAnyImportName(t *testing.T) {
	r := run(t, NoAliases, "aliased")
	var named []string
	for _, e := range r.errors {
		named = append(named, e[strings.Index(e, "sandbox."):strings.Index(e, " is an alias")])
	}
	slices.Sort(named)
	// sb.NewBackend is the portable API itself, no alias; the test file's
	// sandbox.Spec is not counted.
	if want := []string{"sandbox.ErrGone", "sandbox.Info", "sandbox.Info", "sandbox.Info", "sandbox.Spec"}; !slices.Equal(named, want) {
		t.Fatalf("NoAliases reported %q, want %q:\n%s", named, want, strings.Join(r.errors, "\n"))
	}
	if r := run(t, NoAliases, "clean"); len(r.errors) > 0 {
		t.Fatalf("NoAliases reported a package that names none: %v", r.errors)
	}
}

func TestNoPortableImportNamesWhatTheImportIsFor(t *testing.T) {
	r := run(t, NoPortableImport, "aliased")
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "aliased.go") ||
		!strings.Contains(r.errors[0], "sandbox.NewBackend, ") || !strings.Contains(r.errors[0], "sandbox.Spec (write driver.Spec)") {
		t.Fatalf("NoPortableImport reported %q: want one error for aliased.go naming sandbox.NewBackend and sandbox.Spec's driver name", r.errors)
	}
	if r := run(t, NoPortableImport, "clean"); len(r.errors) > 0 {
		t.Fatalf("NoPortableImport reported a package that does not import sandbox: %v", r.errors)
	}
}

func TestADirectoryWithoutCodeFails(t *testing.T) {
	for _, check := range []func(testing.TB, string){NoAliases, NoPortableImport} {
		if r := record(t, check, "testsonly"); !r.fatal || !strings.Contains(r.errors[0], "no non-test Go file") {
			t.Fatalf("a directory with tests only passed, or failed for another reason: %v", r.errors)
		}
	}
}
