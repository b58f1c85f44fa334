package exeinfo

import (
	"os"
	"path/filepath"
	"testing"
)

// The test binary is built from this module, so it is the positive case;
// a file that is no Go executable is the negative one.
func TestReadsAnotherExecutablesBuildInfo(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !BuiltWithThisModule(self) {
		t.Errorf("BuiltWithThisModule(%s) = false for a binary of this module", self)
	}
	script := filepath.Join(t.TempDir(), "not-go")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if BuiltWithThisModule(script) {
		t.Errorf("BuiltWithThisModule of a shell script = true")
	}
	if v := MainVersion(script); v != "(devel)" {
		t.Errorf("MainVersion of a shell script = %q, want (devel)", v)
	}
	if v := MainVersion(self); v == "" {
		t.Errorf("MainVersion of the test binary is empty")
	}
}
