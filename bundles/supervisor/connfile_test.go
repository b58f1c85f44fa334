package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A broken connections file is named once, with what is wrong in it.
func TestConnectionsFileErrorNamesTheFileOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "conns.yaml")
	if err := os.WriteFile(file, []byte("x: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Supervisor{ConnectionsFile: file, Env: []string{}}
	_, _, err := s.connection("x")
	if err == nil {
		t.Fatal("want an error for a file that is not YAML")
	}
	if n := strings.Count(err.Error(), file); n != 1 {
		t.Errorf("error names the file %d times, want once: %v", n, err)
	}
	if !strings.Contains(err.Error(), "not valid YAML") {
		t.Errorf("error does not say what is wrong: %v", err)
	}
}
