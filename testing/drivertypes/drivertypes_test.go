package drivertypes

import (
	"fmt"
	"path/filepath"
	"runtime"
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

// The import is found under any name, the test file's is not counted, and
// the message names each use, with the driver's name for an alias.
func TestNoPortableImportNamesWhatTheImportIsFor(t *testing.T) {
	r := run(t, NoPortableImport, "aliased")
	want := "imports package sandbox, the portable layer over the driver this package implements, for " +
		"sandbox.Info (write driver.Info), sandbox.NewBackend, sandbox.Spec (write driver.Spec), " +
		"sandbox.Info (write driver.Info), sandbox.Info (write driver.Info), sandbox.ErrGone (write driver.ErrGone): "
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "aliased.go:") || !strings.Contains(r.errors[0], want) {
		t.Fatalf("NoPortableImport reported %q: want one error for aliased.go saying %q", r.errors, want)
	}
	if r := run(t, NoPortableImport, "clean"); len(r.errors) > 0 {
		t.Fatalf("NoPortableImport reported a package that does not import sandbox: %v", r.errors)
	}
}

func TestADirectoryWithoutCodeFails(t *testing.T) {
	if r := record(t, NoPortableImport, "testsonly"); !r.fatal || !strings.Contains(r.errors[0], "no non-test Go file") {
		t.Fatalf("a directory with tests only passed, or failed for another reason: %v", r.errors)
	}
}
